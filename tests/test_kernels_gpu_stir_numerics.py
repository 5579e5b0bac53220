"""STIR numerics on the GPU (``cuda/joseph_stir.cu``) against the CPU reference (``cpu_stir``).

Identity: every float operation of the CUDA kernels is an explicit round-to-nearest intrinsic in
the CPU reference's order, so forward projections are equal bit for bit; back projections add
in another order (atomics), so they agree to float32 summation rounding (1e-5 of the maximum:
about 2e-6 measured on an H200; STIR's own back projections spread by 1.6e-6 between thread
counts on a smaller case).  Guards against NVRTC
contracting multiply-adds, a changed operation order, and table packing errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk_stir, forward_chunk_stir
from stirgpu.kernels.stir_lors import stir_image_frame

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("both_lor_orders")]

GEOMETRIES = {
    # the mMR's native views (63 and 189 at 45 / 135 degrees), segments 0 and +-1
    "mMR-native": (Scanner.from_name("Siemens mMR"), 11, 16, 252, 40, False),
    "ECAT953-mashed": (Scanner.from_name("ECAT 953"), 3, 4, 96, 64, False),
    "ECAT953-arc": (Scanner.from_name("ECAT 953"), 1, 2, 48, 95, True),
}


def _setup(name):
    scanner, span, mrd, nv, nt, arc = GEOMETRIES[name]
    pdi = ProjDataInfo.construct(scanner, span, mrd, nv, nt, arc)
    info = ImageInfo.default_for(pdi, zoom=1.25 if arc else 1.0, origin=(1.5, -2.0, 3.0) if arc else (0, 0, 0))
    image = np.random.default_rng(3).uniform(0, 1, info.shape).astype(np.float32)
    return pdi, info, image


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_forward_equals_cpu_bit_for_bit(cp, name):
    pdi, info, image = _setup(name)
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s, views=range(0, pdi.get_num_views(), 3)) for s in pdi.segment_nums]
    cpu = forward_chunk_stir(parts, pdi, image, frame)
    gpu = forward_chunk_stir(parts, pdi, cp.asarray(image), frame)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)
    single = pdi.chunk_tables(pdi.segment_nums[-1])
    np.testing.assert_array_equal(
        cp.asnumpy(forward_chunk_stir(single, pdi, cp.asarray(image), frame)),
        forward_chunk_stir(single, pdi, image, frame),
    )


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
@pytest.mark.parametrize("crop", [False, True], ids=["image", "cropped-image"])
def test_framed_forward_equals_cpu_bit_for_bit(cp, name, crop):
    """A prepared image (what the engine hands the kernels) is read in its zero-framed copies:
    every walk's sum is the plain image's, bit for bit, whatever the lanes of a warp group
    into -- the mMR's views at 45 degrees mix walks along y and x in one warp -- and on an image
    cropped inside the FOV (walks leave it on two sides) of voxels other than the default's."""
    from stirgpu.kernels.cuda_workspaces import prepare_image

    pdi, info, image = _setup(name)
    if crop:
        image = np.ascontiguousarray(image[1:-2, 5:-9, 3:])
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s, views=range(0, pdi.get_num_views(), 2)) for s in pdi.segment_nums]
    cpu = forward_chunk_stir(parts, pdi, image, frame)
    prepared = prepare_image(cp.asarray(image))
    gpu = forward_chunk_stir(parts, pdi, prepared, frame)
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)
    assert np.count_nonzero(cpu) > cpu.size // 2


@pytest.mark.parametrize("name", sorted(GEOMETRIES))
def test_back_equals_cpu_to_summation_rounding(cp, name):
    pdi, info, image = _setup(name)
    frame = stir_image_frame(info)
    parts = [pdi.chunk_tables(s) for s in pdi.segment_nums]
    n = sum(p.num_lors for p in parts)
    values = np.random.default_rng(4).uniform(0.5, 1.5, n).astype(np.float32)
    cpu = back_chunk_stir(parts, pdi, values, np.zeros(info.shape, np.float32), frame)
    gpu = back_chunk_stir(parts, pdi, cp.asarray(values), cp.zeros(info.shape, cp.float32), frame)
    assert np.max(np.abs(cp.asnumpy(gpu) - cpu)) <= 1e-5 * cpu.max()


def test_projector_pair_gpu_equals_cpu(cp):
    """Through the engine (streamed chunks, subsets): forward bit for bit, back to rounding."""
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.projectors import ProjectorPair

    pdi, info, image = _setup("mMR-native")
    out = {}
    for backend in ("cpu", "cuda"):
        pair = ProjectorPair(backend=backend, max_views_per_chunk=5)
        assert pair.get_forward_projector().numerics == "stir"
        pair.set_up(pdi, info)
        fwd = ProjDataInMemory(pdi)
        pair.forward_project(fwd, image, subset_num=0, num_subsets=63)
        back = pair.back_project(None, fwd, subset_num=0, num_subsets=63)
        out[backend] = (fwd.as_array(), np.asarray(back))
    np.testing.assert_array_equal(out["cuda"][0], out["cpu"][0])
    assert np.max(np.abs(out["cuda"][1] - out["cpu"][1])) <= 1e-5 * out["cpu"][1].max()


def test_wide_back_kernel_adds_what_the_narrow_one_does(cp):
    """``back_stir_wide`` (64-bit offsets, for images of 2^31 voxels or more: ``cuda_stir.back``
    picks it by the image's size) adds what ``back_stir`` adds, to float32 summation rounding;
    launched here on an ordinary image."""
    from stirgpu.kernels import cuda_stir
    from stirgpu.kernels.stir_api import StirChunk

    pdi, info, _ = _setup("mMR-native")
    frame = stir_image_frame(info)
    (org, vs), r = (np.asarray(v, np.float32) for v in frame[:2]), np.float32(frame[2])
    chunk = StirChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    parts = chunk.device(0)
    values = cp.asarray(np.random.default_rng(5).uniform(0.5, 1.5, chunk.num_lors).astype(np.float32))
    images = {}
    for name in ("back_stir", "back_stir_wide"):
        image = cp.zeros(info.shape, cp.float32)
        along_x = cuda_stir.transposed_accumulator(cp, image)
        kernel = cuda_stir._kernel(0, name, cuda_stir.lor_order("back", image))
        cuda_stir.launch(kernel, parts, (*parts.args, values, image, along_x, *cuda_stir.frame_args(image, org, vs, r)))
        cuda_stir.fold(image, along_x)
        images[name] = cp.asnumpy(image)
    narrow, wide = images["back_stir"], images["back_stir_wide"]
    assert narrow.max() > 0 and np.max(np.abs(wide - narrow)) <= 1e-5 * narrow.max()
