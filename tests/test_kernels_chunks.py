"""The chunk entry points ``forward_chunk`` / ``back_chunk`` (STIR's endpoints computed in the
kernels from a chunk's tables) and :class:`JosephChunk`, the tables made once: bad input refused by
name, a chunk's parts one after the other, prepared and kept tables projecting as the chunk's own,
and worker images kept over calls.

Guards against a wrong array silently projected (shape, dtype, size, host/GPU mix), against parts
or kept tables mixed up between a chunk's segments, and against tables made again for every chunk
part.  No STIR needed (agreement with STIR: ``test_kernels_fixtures.py`` and
``stir_differential``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import JosephChunk, back_chunk, forward_chunk
from stirgpu.kernels.joseph.cuda import PART_FIELDS
from stirgpu.kernels.joseph.lors import axial_tables, stir_image_frame, stir_part_geometry
from stirgpu.projectors import ProjectorPair


@pytest.fixture(scope="module")
def setup():
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 16, False)
    info = ImageInfo.default_for(pdi, xy_size=21)
    return pdi, info, pdi.chunk_tables(0), stir_image_frame(info)


def test_forward_refuses_bad_arrays(setup):
    """An image that is not (nz, ny, nx) float32, an ``out`` of another size, tables that are no
    ChunkTables and a frame that is no (origin, voxel_size, rescale) are refused naming the
    argument."""
    pdi, info, t, frame = setup
    good = np.zeros(info.shape, np.float32)
    with pytest.raises(GeometryError, match="tables"):
        forward_chunk(object(), pdi, good, frame)
    with pytest.raises(GeometryError, match="image"):
        forward_chunk(t, pdi, good.astype(np.float64), frame)
    with pytest.raises(GeometryError, match="image"):
        forward_chunk(t, pdi, good[0], frame)
    with pytest.raises(GeometryError, match="out"):
        forward_chunk(t, pdi, good, frame, out=np.zeros(t.num_lors + 1, np.float32))
    with pytest.raises(GeometryError, match="out"):
        forward_chunk(t, pdi, good, frame, out=np.zeros(t.shape, np.float64))
    with pytest.raises(GeometryError, match="frame"):
        forward_chunk(t, pdi, good, (1, 2))


def test_back_refuses_bad_arrays_and_leaves_the_image(setup):
    """``values`` of another size or dtype, and an ``out_image`` that is not C-contiguous or not
    writable, are refused naming the argument, before anything is added."""
    pdi, info, t, frame = setup
    image = np.ones(info.shape, np.float32)
    with pytest.raises(GeometryError, match="values"):
        back_chunk(t, pdi, np.ones(t.num_lors - 1, np.float32), image, frame)
    with pytest.raises(GeometryError, match="values"):
        back_chunk(t, pdi, np.ones(t.num_lors, np.float64), image, frame)
    with pytest.raises(GeometryError, match="out_image"):
        back_chunk(t, pdi, np.ones(t.num_lors, np.float32), image.T, frame)
    read_only = image.copy()
    read_only.setflags(write=False)
    with pytest.raises(GeometryError, match="out_image"):
        back_chunk(t, pdi, np.ones(t.num_lors, np.float32), read_only, frame)
    assert np.all(image == 1)


def test_multi_part_chunks_are_their_parts_one_after_the_other():
    """A sequence of ChunkTables (the parts of a chunk spanning several segments) projects to
    the parts' results one after the other, flat, bit for bit (each LOR's value is its own); its
    back projection equals the parts' back projections added, bit for bit on the CPU (the parts
    are added one after the other, each by the same workers); mismatched parts and sizes are refused naming the problem.
    The packing the GPU kernels read (one launch for all parts) holds each part's row: its shape,
    first LOR, views, axial tables, and its views' transaxial tables, those the CPU kernels take.
    Guards against parts' bins or tables mixed up."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=4, num_views=8, num_tangential_poss=32)
    parts = [pdi.chunk_tables(s, views=[1, 5]) for s in pdi.segment_nums]
    rng = np.random.default_rng(3)
    info = ImageInfo((15, 21, 21), (6.75, 9.3, 9.3), origin=(0.0, 1.0, -2.0))
    frame = stir_image_frame(info)
    img = rng.random(info.shape, dtype=np.float32)
    one = [forward_chunk(t, pdi, img, frame) for t in parts]
    got = forward_chunk(parts, pdi, img, frame)
    np.testing.assert_array_equal(got, np.concatenate([a.reshape(-1) for a in one]))
    assert np.count_nonzero(got) > got.size // 4
    vals = rng.random(got.size, dtype=np.float32)
    want = np.zeros_like(img)
    o = 0
    for t in parts:
        back_chunk(t, pdi, vals[o : o + t.num_lors].reshape(t.shape), want, frame)
        o += t.num_lors
    back = back_chunk(parts, pdi, vals, np.zeros_like(img), frame)
    np.testing.assert_array_equal(back, want)
    with pytest.raises(GeometryError, match="out"):
        forward_chunk(parts, pdi, img, frame, out=np.zeros(got.size - 1, np.float32))
    with pytest.raises(GeometryError, match="tangential"):
        forward_chunk([parts[0], pdi.chunk_tables(0, views=[0], tangential_poss=range(-4, 4))], pdi, img, frame)
    with pytest.raises(GeometryError, match="at least one part"):
        forward_chunk([], pdi, img, frame)

    chunk = JosephChunk(parts, pdi)
    packed = chunk.packed()
    assert int(packed.n_parts) == len(parts) and packed.num_lors == got.size
    k = 2
    row = packed.directory[PART_FIELDS * k : PART_FIELDS * (k + 1)]
    x_offset, _, nv, na, nt, _, lor, a_offset, view_offset, n_views, first, end = row
    assert (nv, na, nt) == parts[k].shape and lor == sum(t.num_lors for t in parts[:k])
    assert (first, end) == (0, nv * na * nt)  # one launch runs all the part's threads
    np.testing.assert_array_equal(packed.directory[view_offset : view_offset + nv], parts[k].views)
    m, mt = axial_tables(stir_part_geometry(pdi, parts[k]))
    np.testing.assert_array_equal(packed.A[a_offset : a_offset + na], m)
    np.testing.assert_array_equal(packed.A[a_offset + na : a_offset + na + nt], mt)
    x1 = packed.X[x_offset : x_offset + n_views * nt].reshape(n_views, nt)
    np.testing.assert_array_equal(x1[parts[k].views], chunk.host[k][0])


def test_prepared_chunk_gives_the_same_numbers(setup):
    """A JosephChunk (tables computed once, as OSEM's fused step uses them for its forward and back
    projection) projects exactly as the ChunkTables it came from, single part and multi-part.
    Guards the chunk's kept tables against the per-call ones."""
    pdi, info, t, frame = setup
    image = np.random.default_rng(0).uniform(0, 1, info.shape).astype(np.float32)
    for tables in (t, [pdi.chunk_tables(s, views=[1, 5]) for s in pdi.segment_nums]):
        chunk = JosephChunk(tables, pdi)
        fwd = forward_chunk(tables, pdi, image, frame)
        assert np.array_equal(forward_chunk(chunk, pdi, image, frame), fwd)
        a = back_chunk(tables, pdi, fwd, np.zeros(info.shape, np.float32), frame)
        b = back_chunk(chunk, pdi, fwd, np.zeros(info.shape, np.float32), frame)
        assert np.array_equal(a, b)


def test_kept_transaxial_tables_are_each_parts_own():
    """Tables made through one TransaxialTables (the views' transaxial tables kept from part to
    part of a call, whatever the segment) equal each part's own, bit for bit: parts of every
    segment with overlapping, disjoint and repeated view sets, arc-corrected and not, and a part
    with another FOV radius.  Guards against a kept set handed to a part of another geometry."""
    from stirgpu.kernels.joseph.lors import TransaxialTables, stir_chunk_tables

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
    from stirgpu.kernels.joseph import lors

    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, 12, 16, False)
    info = ImageInfo.default_for(pdi, xy_size=21)
    pp = ProjectorPair(backend="cpu", max_views_per_chunk=4)
    pp.set_up(pdi, info)
    image = np.ones(info.shape, np.float32)
    data = ProjDataInMemory(pdi)
    pp.forward_project(data, image)
    rows = []
    made = lors._transaxial_tables

    def counted(phi, *args):
        rows.append(int(phi.shape[0]))
        return made(phi, *args)

    monkeypatch.setattr(lors, "_transaxial_tables", counted)
    calls = {
        "forward": lambda: pp.forward_project(ProjDataInMemory(pdi), image),
        "back": lambda: pp.back_project(None, data),
        "fused": lambda: pp.forward_back_ratio(image, data),
    }
    calls[kind]()
    assert pdi.get_num_segments() > 1 and pp.last_stats.chunks > 1
    assert sum(rows) == pdi.get_num_views()


def test_worker_images_kept_over_calls_give_the_same_back_projection(setup):
    """Back projections of several chunks into worker images kept over the calls (``workers=``,
    what a CPU lane does for one pipeline call) equal the calls' own back projections once
    reduced (float32 summation order: measured 0 to 2.1e-7 of the maximum with 1 to 16 numba
    threads, bar 1e-6); worker images of another image are refused and the image is left alone.
    Guards against worker images added twice, or not at all, or into the wrong image."""
    from stirgpu.kernels.joseph.workers import WorkerImages

    pdi, info, _, frame = setup
    rng = np.random.default_rng(7)
    chunks = [pdi.chunk_tables(s, views=v) for s in pdi.segment_nums for v in ([0, 1, 2], [5, 9])]
    values = [rng.random(t.shape, dtype=np.float32) for t in chunks]
    want = np.zeros(info.shape, np.float32)
    for t, y in zip(chunks, values, strict=True):
        back_chunk(t, pdi, y, want, frame)
    got = np.zeros(info.shape, np.float32)
    workers = WorkerImages(got.reshape(-1))
    for t, y in zip(chunks, values, strict=True):
        back_chunk(t, pdi, y, got, frame, workers=workers)
    assert workers.extra.shape[0] == 0 or workers.extra.any()  # the extra workers hold their sums
    workers.reduce()
    assert np.count_nonzero(workers.extra) == 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * float(want.max()))
    other = np.zeros(info.shape, np.float32)
    with pytest.raises(GeometryError, match="workers"):
        back_chunk(chunks[0], pdi, values[0], other, frame, workers=workers)
    assert not other.any()
