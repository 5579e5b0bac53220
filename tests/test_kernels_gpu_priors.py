"""The CUDA prior kernels (kernels/prior_cuda.py, cuda/priors.cu) compute what the numba kernels
(kernels/prior_cpu.py) compute, to float32 rounding, and OSMAPOSL's One-Step-Late update on the
GPU is the CPU one.

Why the tolerance: both walk each voxel's neighbourhood in the same order and compute every pair
term and sum in double with the same expressions (the GPU without fused multiply-adds), so the
doubles differ only where CUDA's log / cosh / tanh differ from the host's by an ulp (Logcosh),
and the value only by its summation order (planes on the CPU, blocks on the GPU).  Each stored
result is then one rounding of such a double: at most one ulp of the output type apart
(``helpers.assert_within_one_ulp``).  The kernels' logic also runs on the CPU, compiled for the
host: tests/test_kernels_prior_cuda_host.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import PRIOR_CASES, PRIOR_POTENTIALS, PRIOR_VOXEL_SIZE, assert_within_one_ulp, prior_image

from stirgpu.errors import DeviceError
from stirgpu.geometry import ImageInfo
from stirgpu.kernels.priors import (
    LOGCOSH,
    QUADRATIC,
    RELATIVE_DIFFERENCE,
    prior_gradient,
    prior_hessian_times,
    prior_value,
)
from stirgpu.kernels.priors import cuda as prior_cuda
from stirgpu.priors import RelativeDifferencePrior, stir_default_weights
from stirgpu.recon.arrays import osl_denominator, stir_divide

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", sorted(PRIOR_POTENTIALS))
@pytest.mark.parametrize("case", sorted(PRIOR_CASES))
@pytest.mark.parametrize("with_kappa", [False, True], ids=["no-kappa", "kappa"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_value_gradient_and_hessian_match_the_numba_kernels(cp, name, case, with_kappa, dtype):
    """Through prior_api (so the dispatch to the CUDA kernels is what is tested): value to 1e-12
    relative, gradient (scaled) and H v (accumulated into a non-zero out) within one ulp."""
    kind, p1, p2 = PRIOR_POTENTIALS[name]
    shape, w = PRIOR_CASES[case]
    x = prior_image(shape, 1, dtype)
    v = np.random.default_rng(2).normal(size=shape).astype(dtype)
    kappa = prior_image(shape, 3, dtype, zeros=False) if with_kappa else None
    xd, vd = cp.asarray(x), cp.asarray(v)
    kd = None if kappa is None else cp.asarray(kappa)

    got = prior_value(xd, w, kind, p1, p2, kappa=kd)
    assert isinstance(got, float)
    assert got == pytest.approx(prior_value(x, w, kind, p1, p2, kappa=kappa), rel=1e-12, abs=1e-300)

    g = prior_gradient(xd, w, kind, p1, p2, scale=0.3, kappa=kd)
    assert isinstance(g, cp.ndarray) and g.dtype == dtype
    assert_within_one_ulp(g, prior_gradient(x, w, kind, p1, p2, scale=0.3, kappa=kappa))

    start = np.random.default_rng(4).normal(size=shape).astype(dtype)
    h = prior_hessian_times(xd, vd, w, kind, p1, p2, scale=0.3, out=cp.asarray(start), kappa=kd)
    want = prior_hessian_times(x, v, w, kind, p1, p2, scale=0.3, out=start.copy(), kappa=kappa)
    assert_within_one_ulp(h, want)
    if name == "rdp":
        assert not np.isfinite(want).all()  # a zero pair was reached (STIR's INFINITY: inf or NaN)


@pytest.mark.parametrize("name", sorted(PRIOR_POTENTIALS))
def test_64_bit_indices_give_the_32_bit_numbers(cp, name):
    """The long long instantiations (forced on a small image) compute bit for bit what the int ones
    do: the index width changes nothing but the range."""
    kind, p1, p2 = PRIOR_POTENTIALS[name]
    shape, w = PRIOR_CASES["3d-user"]
    x, v = cp.asarray(prior_image(shape, 5, np.float32)), cp.asarray(prior_image(shape, 6, np.float32))
    kappa = cp.asarray(prior_image(shape, 7, np.float32, zeros=False))
    results = []
    for index64 in (False, True):
        val = prior_cuda.value(x, w, kind, p1, p2, kappa, index64=index64)
        g = prior_cuda.gradient(x, w, kind, p1, p2, 0.5, cp.empty_like(x), kappa, index64=index64)
        h = prior_cuda.hessian_times(x, v, w, kind, p1, p2, 0.5, cp.zeros_like(x), kappa, index64=index64)
        results.append((val, g.get(), h.get()))
    (v32, g32, h32), (v64, g64, h64) = results
    assert v64 == v32
    np.testing.assert_array_equal(g64, g32)
    np.testing.assert_array_equal(h64, h32)


def test_an_image_past_2_to_the_31_voxels_does_not_wrap(cp):
    """An image of 2^31 + 2^16 float32 voxels (8.6 GB; 64-bit indices chosen by size), zero but for
    random last two planes: the RDP value equals the numba value of the last three planes (every
    non-zero pair lies there), and the gradient's first and last planes equal numba's on the
    matching sub-images.  With wrapped 32-bit indices the last planes would read the first ones."""
    nz, ny, nx = 32769, 256, 256
    need = 2 * nz * ny * nx * 4 + (1 << 30)
    if cp.cuda.Device().mem_info[0] < need:
        pytest.skip(f"needs {need / 1e9:.0f} GB of free GPU memory")
    assert prior_cuda.needs_index64(nz * ny * nx)
    kind, p1, p2 = PRIOR_POTENTIALS["rdp-gamma-eps"]
    w = stir_default_weights(PRIOR_VOXEL_SIZE)
    tail = prior_image((2, ny, nx), 11, np.float32)
    x = cp.zeros((nz, ny, nx), dtype=np.float32)
    x[-2:] = cp.asarray(tail)
    host3 = np.concatenate([np.zeros((1, ny, nx), np.float32), tail])
    assert prior_value(x, w, kind, p1, p2) == pytest.approx(prior_value(host3, w, kind, p1, p2), rel=1e-12)
    g = prior_gradient(x, w, kind, p1, p2)
    assert_within_one_ulp(g[-1], prior_gradient(tail, w, kind, p1, p2)[-1])
    assert_within_one_ulp(g[0], prior_gradient(np.zeros((2, ny, nx), np.float32), w, kind, p1, p2)[0])
    del g, x


def test_kernels_compile_for_every_kind_dtype_and_index_width(cp):
    """Every instantiation priors.cu declares compiles with NVRTC on this device and is found by
    its name (the first use of a kind would otherwise be the first to find out)."""
    dev = cp.cuda.Device().id
    for kind in (QUADRATIC, RELATIVE_DIFFERENCE, LOGCOSH):
        for dtype in ("float32", "float64"):
            for index64 in (False, True):
                for op in ("prior_value_blocks", "prior_gradient", "prior_hessian_times"):
                    assert prior_cuda._kernel(dev, op, kind, dtype, index64) is not None


@pytest.mark.multi_gpu
def test_kernels_refuse_arrays_on_another_device(cp):
    """kappa / out on another GPU than the image: a DeviceError naming the argument."""
    shape, w = PRIOR_CASES["3d-default"]
    x = cp.asarray(prior_image(shape, 1, np.float32))
    with cp.cuda.Device(1):
        other = cp.asarray(prior_image(shape, 2, np.float32))
    with pytest.raises(DeviceError, match="kappa"):
        prior_value(x, w, QUADRATIC, kappa=other)
    with pytest.raises(DeviceError, match="out"):
        prior_gradient(x, w, QUADRATIC, out=other)


def test_an_empty_image_gives_zero_and_launches_nothing(cp):
    w = stir_default_weights(PRIOR_VOXEL_SIZE)
    x = cp.zeros((0, 4, 4), dtype=np.float32)
    assert prior_value(x, w, RELATIVE_DIFFERENCE, 2.0, 0.0) == 0.0
    assert prior_gradient(x, w, RELATIVE_DIFFERENCE, 2.0, 0.0).shape == (0, 4, 4)


@pytest.mark.parametrize("model", ["additive", "multiplicative"])
def test_osl_update_on_the_gpu_is_the_cpu_one(cp, model):
    """OSMAPOSL's One-Step-Late step (prior gradient at x, STIR's denominator, STIR's divide with
    1e-6, x *= update) from the same numerator, sensitivity and estimate: on cupy arrays every step
    stays on the GPU (cupy results) and gives the numpy numbers to float32 rounding: the gradient
    within one ulp, then a few float32 operations, where ``g / K + s`` may cancel down to its
    clamp ``s / 10`` and so magnify that ulp tenfold (hence 1e-5 relative)."""
    info = ImageInfo((9, 21, 19), PRIOR_VOXEL_SIZE)
    prior = RelativeDifferencePrior(0.8, gamma=2.0, epsilon=1e-3)
    prior.set_kappa(prior_image(info.shape, 12, np.float32, zeros=False))
    prior.set_up(info)
    x = prior_image(info.shape, 13, np.float32, zeros=False)
    num = prior_image(info.shape, 14, np.float32)
    sens = prior_image(info.shape, 15, np.float32, zeros=False)

    def step(x, num, sens):
        den = osl_denominator(prior.get_gradient(x), sens, 21, model)
        return x * stir_divide(num.copy(), den, small_num=1e-6)

    want = step(x, num, sens)
    got = step(cp.asarray(x), cp.asarray(num), cp.asarray(sens))
    assert isinstance(got, cp.ndarray)
    np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=0)
