"""The CUDA back projection in axial slabs (``stirgpu/kernels/joseph/slabs.py``) adds what one
launch over the whole image adds, and what the CPU kernels add, to float32 summation order
(``BACK_RTOL`` of the maximum voxel): on every segment of a scanner's ring differences, for slabs
of one plane up to more than the image, and it stays the forward projection's adjoint."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BACK_RTOL

from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels import JosephChunk, back_chunk, forward_chunk
from stirgpu.kernels.joseph import cuda as joseph_cuda
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def oblique_case():
    """GE Discovery MI (36 rings), span 1, every ring difference, a few views: LORs from direct
    planes to ones crossing the whole axial FOV."""
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 35, 6, 41)
    info = stir_default_image_info(pdi)
    chunk = JosephChunk([pdi.chunk_tables(s) for s in pdi.segment_nums], pdi)
    rng = np.random.default_rng(7)
    values = rng.uniform(0.5, 1.5, chunk.num_lors).astype(np.float32)
    image = rng.uniform(0, 1, info.shape).astype(np.float32)
    return pdi, info, chunk, values, image


def _back(cp, monkeypatch, case, planes):
    pdi, info, chunk, values, _ = case
    monkeypatch.setattr(joseph_cuda, "back_slab_planes", lambda image, spread_views: planes)
    out = cp.zeros(info.shape, np.float32)
    back_chunk(chunk, pdi, cp.asarray(values), out, stir_image_frame(info))
    return cp.asnumpy(out)


@pytest.mark.parametrize("planes", [1, 3, 16, 200])
def test_slabs_add_what_one_launch_and_the_cpu_add(cp, monkeypatch, oblique_case, planes):
    pdi, info, chunk, values, _ = oblique_case
    cpu = back_chunk(chunk, pdi, values, np.zeros(info.shape, np.float32), stir_image_frame(info))
    whole = _back(cp, monkeypatch, oblique_case, None)
    got = _back(cp, monkeypatch, oblique_case, planes)
    tolerance = BACK_RTOL * float(np.abs(cpu).max())
    np.testing.assert_allclose(whole, cpu, rtol=0, atol=tolerance)
    np.testing.assert_allclose(got, cpu, rtol=0, atol=tolerance)
    np.testing.assert_array_equal(got == 0, cpu == 0)


def test_slabs_keep_the_adjoint(cp, monkeypatch, oblique_case):
    """<A x, y> = <x, A^T y> with A^T in slabs of 2 planes, to float32 rounding of the sums."""
    pdi, info, chunk, values, image = oblique_case
    ax = cp.asnumpy(forward_chunk(chunk, pdi, cp.asarray(image), stir_image_frame(info))).reshape(-1)
    aty = _back(cp, monkeypatch, oblique_case, 2)
    left = float(ax.astype(np.float64) @ values.astype(np.float64))
    right = float(image.reshape(-1).astype(np.float64) @ aty.reshape(-1).astype(np.float64))
    assert left == pytest.approx(right, rel=1e-5)


def test_slab_thickness_follows_the_gpus_l2(cp):
    """The planes back_slab_planes picks: slabs for a subset's spread views into an image larger
    than the GPU's L2 cache (a Quadra's, 515 MB); one launch for runs of views, or an image that
    fits the L2."""
    l2 = joseph_cuda.l2_cache_bytes(cp.cuda.Device().id)
    big = cp.empty((645, 447, 447), np.float32)
    planes = joseph_cuda.back_slab_planes(big, True)
    assert planes is not None and 2 * planes * 447 * 447 * 4 <= l2
    assert joseph_cuda.back_slab_planes(big, False) is None
    assert joseph_cuda.back_slab_planes(cp.empty((8, 64, 64), np.float32), True) is None
