"""STIR-numerics entry points refuse bad input by name, and the option is validated where set.

Guards against a wrong array silently projected (shape, dtype, size, host/GPU mix) and against
an impossible combination (STIR's numbers in mm) being accepted.  No STIR needed.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import stirgpu
from stirgpu.errors import GeometryError, StirGpuError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk_stir, forward_chunk_stir, stir_scaled_geometry
from stirgpu.kernels.stir_lors import stir_image_frame
from stirgpu.projectors import ProjectorPair


@pytest.fixture(scope="module")
def setup():
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 16, False)
    info = ImageInfo.default_for(pdi, xy_size=21)
    return pdi, info, pdi.chunk_tables(0), stir_image_frame(info)


def test_forward_refuses_bad_arrays(setup):
    pdi, info, t, frame = setup
    good = np.zeros(info.shape, np.float32)
    with pytest.raises(GeometryError, match="image"):
        forward_chunk_stir(t, pdi, good.astype(np.float64), frame)
    with pytest.raises(GeometryError, match="image"):
        forward_chunk_stir(t, pdi, good[0], frame)
    with pytest.raises(GeometryError, match="out"):
        forward_chunk_stir(t, pdi, good, frame, out=np.zeros(t.num_lors + 1, np.float32))
    with pytest.raises(GeometryError, match="frame"):
        forward_chunk_stir(t, pdi, good, (1, 2))


def test_back_refuses_bad_arrays_and_leaves_the_image(setup):
    pdi, info, t, frame = setup
    image = np.ones(info.shape, np.float32)
    with pytest.raises(GeometryError, match="values"):
        back_chunk_stir(t, pdi, np.ones(t.num_lors - 1, np.float32), image, frame)
    with pytest.raises(GeometryError, match="out_image"):
        back_chunk_stir(t, pdi, np.ones(t.num_lors, np.float32), image.T, frame)
    assert np.all(image == 1)


def test_numerics_option_is_validated():
    with pytest.raises(StirGpuError, match="numerics"):
        ProjectorPair(backend="cpu", numerics="fast")
    with pytest.raises(StirGpuError, match="units='stir'"):
        ProjectorPair(backend="cpu", numerics="stir", units="mm")
    assert ProjectorPair(backend="cpu", units="mm").numerics == "exact"
    assert ProjectorPair(backend="cpu").numerics == "stir"
    with stirgpu.config(numerics="exact"):
        assert ProjectorPair(backend="cpu").numerics == "exact"
    with pytest.raises(StirGpuError, match="numerics"):
        with stirgpu.config(numerics="float64"):
            pass


def test_kernel_geometry_needs_the_projection_data_for_stir(setup):
    pdi, info, _, _ = setup
    with pytest.raises(GeometryError, match="proj_data_info"):
        stir_scaled_geometry(info, numerics="stir")
    with pytest.raises(GeometryError, match="units"):
        stir_scaled_geometry(info, stir_units=False, numerics="stir", proj_data_info=pdi)
    g = stir_scaled_geometry(info, numerics="stir", proj_data_info=pdi)
    assert g.numerics == "stir" and g.stir_frame is not None


def test_prepared_chunk_gives_the_same_numbers(setup):
    """A StirChunk (tables computed once, as OSEM's fused step uses them for its forward and back
    projection) projects exactly as the ChunkTables it came from, single part and multi-part."""
    from stirgpu.kernels.stir_api import StirChunk

    pdi, info, t, frame = setup
    image = np.random.default_rng(0).uniform(0, 1, info.shape).astype(np.float32)
    for tables in (t, [pdi.chunk_tables(s, views=[1, 5]) for s in pdi.segment_nums]):
        chunk = StirChunk(tables, pdi)
        fwd = forward_chunk_stir(tables, pdi, image, frame)
        assert np.array_equal(forward_chunk_stir(chunk, pdi, image, frame), fwd)
        a = back_chunk_stir(tables, pdi, fwd, np.zeros(info.shape, np.float32), frame)
        b = back_chunk_stir(chunk, pdi, fwd, np.zeros(info.shape, np.float32), frame)
        assert np.array_equal(a, b)


def test_kept_transaxial_tables_are_each_parts_own():
    """Tables made through one TransaxialTables (the views' transaxial tables kept from part to
    part of a call, whatever the segment) equal each part's own, bit for bit: parts of every
    segment with overlapping, disjoint and repeated view sets, arc-corrected and not, and a part
    with another FOV radius."""
    from stirgpu.kernels.stir_lors import TransaxialTables, stir_chunk_tables

    for arc in (False, True):
        pdi = ProjDataInfo.construct(Scanner.from_name("Siemens mMR"), 11, 27, 36, 64, arc)
        kept = TransaxialTables(pdi)
        parts = [pdi.chunk_tables(s, views=v) for s in pdi.segment_nums for v in ([0, 3, 4], [4, 5, 35], range(36))]
        other = pdi.chunk_tables(1, views=[3, 9])
        parts.append(dataclasses.replace(other, radius=0.5 * other.radius))
        for part in parts:
            got, want = stir_chunk_tables(pdi, part, kept), stir_chunk_tables(pdi, part)
            assert len(got) == len(want)
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and np.array_equal(g, w)


@pytest.mark.parametrize("kind", ["forward", "back", "fused"])
def test_projector_calls_make_each_views_transaxial_tables_once(monkeypatch, kind):
    """A projector's forward and back projections, like OSEM's fused step, make each view's
    transaxial tables once per call for the chunks of every segment (the lane's
    ``TransaxialTables``), not once per chunk part: the rows computed in a call of several
    chunks and segments are the geometry's views, once each."""
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.kernels import stir_lors

    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 16, False)
    info = ImageInfo.default_for(pdi, xy_size=21)
    pp = ProjectorPair(backend="cpu", numerics="stir", max_views_per_chunk=4)
    pp.set_up(pdi, info)
    image = np.ones(info.shape, np.float32)
    data = ProjDataInMemory(pdi)
    pp.forward_project(data, image)
    rows = []
    made = stir_lors._transaxial_tables

    def counted(phi, *args):
        rows.append(int(phi.shape[0]))
        return made(phi, *args)

    monkeypatch.setattr(stir_lors, "_transaxial_tables", counted)
    calls = {
        "forward": lambda: pp.forward_project(ProjDataInMemory(pdi), image),
        "back": lambda: pp.back_project(None, data),
        "fused": lambda: pp.forward_back_ratio(image, data),
    }
    calls[kind]()
    assert pdi.get_num_segments() > 1 and pp.last_stats.chunks > 1
    assert sum(rows) == pdi.get_num_views()


def test_worker_images_kept_over_calls_give_the_same_back_projection(setup):
    """Back projections of several chunks into worker images kept over the calls
    (``workers=``, what a CPU lane does for one pipeline call) equal the calls' own back
    projections once reduced, for both numerics; worker images of another image are refused
    and the image is left alone."""
    from stirgpu.kernels import back_chunk
    from stirgpu.kernels.cpu import WorkerImages

    pdi, info, _, frame = setup
    rng = np.random.default_rng(7)
    chunks = [pdi.chunk_tables(s, views=v) for s in pdi.segment_nums for v in ([0, 1, 2], [5, 9])]
    values = [rng.random(t.shape, dtype=np.float32) for t in chunks]
    g = stir_scaled_geometry(info)
    ways = {
        "stir": lambda t, y, out, w: back_chunk_stir(t, pdi, y, out, frame, workers=w),
        "exact": lambda t, y, out, w: back_chunk(t, y, out, g.origin, g.voxel_size, scale=g.scale, workers=w),
    }
    for name, back in ways.items():
        want = np.zeros(info.shape, np.float32)
        for t, y in zip(chunks, values, strict=True):
            back(t, y, want, None)
        got = np.zeros(info.shape, np.float32)
        workers = WorkerImages(got.reshape(-1))
        for t, y in zip(chunks, values, strict=True):
            back(t, y, got, workers)
        workers.reduce()
        assert np.count_nonzero(workers.extra) == 0, name
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * float(want.max()), err_msg=name)
        other = np.zeros(info.shape, np.float32)
        with pytest.raises(GeometryError, match="workers"):
            back(chunks[0], values[0], other, workers)
        assert not other.any(), name
