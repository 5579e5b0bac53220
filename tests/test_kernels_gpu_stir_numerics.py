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
