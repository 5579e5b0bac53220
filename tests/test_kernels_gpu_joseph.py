"""The Joseph projector on the GPU (``cuda/joseph.cu``) against the CPU kernels (numba,
``stirgpu.kernels.joseph.cpu``).

Identity: every float operation of the CUDA kernels is an explicitly rounded one in the CPU
kernels' order (libparallelproj 2.0.7's), so forward projections are equal bit for bit, in either
LOR order the source is compiled for, through the framed copies of a prepared image or not, in
STIR's units and in mm, and through the engine whatever its chunks; back projections add in
another order (atomics), so they agree to float32 summation rounding: 5e-6 of the maximum (the
mMR's native views add thousands of LORs into a voxel: 2.7e-6 measured on an H200, and two CPU
splits of the same LORs among workers differ by 3.1e-6 there; the other geometries 1.1e-6).
Guards against NVRTC contracting multiply-adds, a changed operation order, and table packing
errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk
from stirgpu.kernels.joseph.lors import stir_image_frame

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("lor_orders")]

#: back projections, GPU against CPU: float32 summation order (see the module docstring)
BACK_TOLERANCE = 5e-6

GEOMETRIES = {
    # the mMR's native views (63 and 189 at 45 / 135 degrees), segments 0 and +-1
    "mMR-native": (Scanner.from_name("Siemens mMR"), 11, 16, 252, 40, False),
    "ECAT953-mashed": (Scanner.from_name("ECAT 953"), 3, 4, 96, 64, False),
    "ECAT953-arc": (Scanner.from_name("ECAT 953"), 1, 2, 48, 95, True),
}


@pytest.fixture(params=["view-major", "axial-major"])
def lor_orders(request, monkeypatch):
    """Runs a test with the kernels compiled in each LOR order of ``joseph.cu``
    (``STIR_AXIAL_MAJOR``): the projector takes axial-major for every non-TOF projection
    (``joseph.cuda.axial_major``), and the view-major order the source keeps must give the same
    numbers."""
    from stirgpu.kernels.joseph import cuda as jc

    major = request.param == "axial-major"
    monkeypatch.setattr(jc, "axial_major", lambda kind, image_bytes, l2_bytes, tof=False: major)
    return request.param


def _setup(name):
    scanner, span, mrd, nv, nt, arc = GEOMETRIES[name]
    pdi = ProjDataInfo.construct(scanner, span, mrd, nv, nt, arc)
    info = ImageInfo.default_for(pdi, zoom=1.25 if arc else 1.0, origin=(1.5, -2.0, 3.0) if arc else (0, 0, 0))
    image = np.random.default_rng(3).uniform(0, 1, info.shape).astype(np.float32)
    return pdi, info, image


def _within_summation_order(got, want):
    assert float(want.max()) > 0
    assert np.max(np.abs(got - want)) <= BACK_TOLERANCE * float(want.max())


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_forward_equals_cpu_bit_for_bit(cp, name):
    """A multi-part chunk (every third view of every segment, one launch) and a single part:
    the GPU's forward projection is the CPU's, bit for bit."""
    pdi, info, image = _setup(name)
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s, views=range(0, pdi.get_num_views(), 3)) for s in pdi.segment_nums]
    cpu = forward_chunk(parts, pdi, image, frame)
    gpu = forward_chunk(parts, pdi, cp.asarray(image), frame)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)
    single = pdi.chunk_tables(pdi.segment_nums[-1])
    np.testing.assert_array_equal(
        cp.asnumpy(forward_chunk(single, pdi, cp.asarray(image), frame)),
        forward_chunk(single, pdi, image, frame),
    )


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
@pytest.mark.parametrize("crop", [False, True], ids=["image", "cropped-image"])
def test_framed_forward_equals_cpu_bit_for_bit(cp, name, crop):
    """A prepared image (what the engine hands the kernels) is read in its zero-framed copies:
    every walk's sum is the plain image's, bit for bit, whatever the lanes of a warp group
    into -- the mMR's views at 45 degrees mix walks along y and x in one warp -- and on an image
    cropped inside the FOV (walks leave it on two sides) of voxels other than the default's."""
    from stirgpu.kernels.cuda.images import prepare_image

    pdi, info, image = _setup(name)
    if crop:
        image = np.ascontiguousarray(image[1:-2, 5:-9, 3:])
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s, views=range(0, pdi.get_num_views(), 2)) for s in pdi.segment_nums]
    cpu = forward_chunk(parts, pdi, image, frame)
    prepared = prepare_image(cp.asarray(image))
    assert prepared.framed is not None
    gpu = forward_chunk(parts, pdi, prepared, frame)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)
    assert np.count_nonzero(cpu) > cpu.size // 2


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_back_equals_cpu_to_summation_rounding(cp, name):
    """The back projection of every segment (one launch) is the CPU's to float32 summation
    order (5e-6 of the maximum)."""
    pdi, info, image = _setup(name)
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s) for s in pdi.segment_nums]
    n = sum(p.num_lors for p in parts)
    values = np.random.default_rng(4).uniform(0.5, 1.5, n).astype(np.float32)
    cpu = back_chunk(parts, pdi, values, np.zeros(info.shape, np.float32), frame)
    gpu = back_chunk(parts, pdi, cp.asarray(values), cp.zeros(info.shape, cp.float32), frame)
    _within_summation_order(cp.asnumpy(gpu), cpu)


def test_mm_units_equal_cpu(cp):
    """``units="mm"`` (the same kernels on the unscaled frame, rescale 1): the GPU's forward
    projection is the CPU's bit for bit, its back projection to summation order, and the line
    integrals add up to those in STIR's units times the x voxel size (to 1e-6: float32 rounding
    of the two frames moves a few walks' end planes; 3e-8 measured on the CPU).  Guards the
    rescale reaching the kernels in both frames."""
    pdi, info, image = _setup("ECAT953-mashed")
    mm = stir_image_frame(info, stir_units=False)
    stir = stir_image_frame(info)
    assert float(mm[2]) == 1.0 and float(stir[2]) != 1.0
    parts = [pdi.chunk_tables(s, views=range(0, pdi.get_num_views(), 4)) for s in pdi.segment_nums]
    img = cp.asarray(image)
    cpu = forward_chunk(parts, pdi, image, mm)
    gpu = cp.asnumpy(forward_chunk(parts, pdi, img, mm))
    np.testing.assert_array_equal(gpu, cpu)
    in_stir_units = cp.asnumpy(forward_chunk(parts, pdi, img, stir)).astype(np.float64)
    total = float(gpu.astype(np.float64).sum())
    assert total > 0 and abs(total - in_stir_units.sum() * info.voxel_size[2]) <= 1e-6 * total
    values = np.random.default_rng(6).uniform(0.5, 1.5, cpu.size).astype(np.float32)
    want = back_chunk(parts, pdi, values, np.zeros(info.shape, np.float32), mm)
    got = back_chunk(parts, pdi, cp.asarray(values), cp.zeros(info.shape, cp.float32), mm)
    _within_summation_order(cp.asnumpy(got), want)


def test_projector_pair_gpu_equals_cpu(cp):
    """Through the engine (streamed chunks of at most 5 views, a subset): forward bit for bit,
    back to summation order."""
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.projectors import ProjectorPair

    pdi, info, image = _setup("mMR-native")
    out = {}
    for backend in ("cpu", "cuda"):
        pair = ProjectorPair(backend=backend, max_views_per_chunk=5)
        pair.set_up(pdi, info)
        fwd = ProjDataInMemory(pdi)
        pair.forward_project(fwd, image, subset_num=0, num_subsets=63)
        back = pair.back_project(None, fwd, subset_num=0, num_subsets=63)
        out[backend] = (fwd.as_array(), np.asarray(back))
    np.testing.assert_array_equal(out["cuda"][0], out["cpu"][0])
    _within_summation_order(out["cuda"][1], out["cpu"][1])


def test_wide_back_kernels_add_what_the_narrow_ones_do(cp):
    """``back_stir_wide`` and ``back_lors_wide`` (64-bit offsets, for images of 2^31 voxels or
    more: ``joseph.cuda.back`` and ``joseph.cuda.joseph_back`` pick them by the image's size) add
    what ``back_stir`` and ``back_lors`` add, to float32 summation rounding; launched here on an
    ordinary image, the chunk kernels on a chunk's tables, the explicit ones on that chunk's
    endpoints."""
    from stirgpu.kernels.joseph import cuda as jc
    from stirgpu.kernels.joseph.chunk import JosephChunk

    pdi, info, _ = _setup("mMR-native")
    frame = stir_image_frame(info)
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    chunk = JosephChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    dev = cp.cuda.Device().id
    parts = chunk.device(dev)
    xs, xe = jc.endpoints(parts, r, dev)
    n = np.int64(chunk.num_lors)
    values = cp.asarray(np.random.default_rng(5).uniform(0.5, 1.5, chunk.num_lors).astype(np.float32))
    images = {}
    for name in ("back_stir", "back_stir_wide", "back_lors", "back_lors_wide"):
        image = cp.zeros(info.shape, cp.float32)
        along_x = jc.transposed_accumulator(cp, image)
        kernel = jc._kernel(dev, name, jc.lor_order("back", image))
        frame_args = jc.frame_args(image, org, vs, r)
        if name.startswith("back_stir"):
            whole = (np.int32(0), np.int32(info.shape[0]))  # (the planes it adds into: all)
            jc.launch(kernel, parts, (*parts.args, values, image, along_x, *frame_args, *whole))
        else:
            blocks = -(-chunk.num_lors // jc.THREADS)
            kernel((blocks,), (jc.THREADS,), (xs, xe, n, values, image, along_x, *frame_args[:-1]))
        jc.fold(image, along_x)
        images[name] = cp.asnumpy(image)
    narrow = images["back_stir"]
    for name in ("back_stir_wide", "back_lors", "back_lors_wide"):
        _within_summation_order(images[name], narrow)
