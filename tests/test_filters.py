"""stirgpu.filters and the separable convolution kernels, without STIR (the agreement with STIR
is ``stir_differential/test_filters_vs_stir.py``): the numba kernel and the array-generic path
give the same bits, both compute the zero-boundary convolution, the filters' parameters are
checked, and ``apply`` never changes its input."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.filters import SeparableCartesianMetzFilter, SeparableGaussianFilter, gaussian_kernel, metz_kernel
from stirgpu.formats import VoxelsOnCartesianGrid
from stirgpu.geometry import ImageInfo
from stirgpu.kernels.convolution import GENERAL, SYMMETRIC, convolve_axis_numba, convolve_axis_xp


def _reference(x: np.ndarray, full_kernel: np.ndarray, axis: int) -> np.ndarray:
    """Zero-boundary convolution in float64 (kernel centred), the maths both kernels compute."""
    half = full_kernel.size // 2
    v = np.moveaxis(x.astype(np.float64), axis, 0)
    n = v.shape[0]
    padded = np.concatenate([np.zeros((half,) + v.shape[1:]), v, np.zeros((half,) + v.shape[1:])])
    out = np.zeros_like(v)
    for j in range(-half, half + 1):  # out[i] += k[j] x[i - j]
        out += full_kernel[j + half] * padded[half - j : half - j + n]
    return np.moveaxis(out, 0, axis)


@pytest.mark.parametrize("kind", [SYMMETRIC, GENERAL])
@pytest.mark.parametrize("seed", range(6))
def test_numba_and_generic_paths_give_the_same_bits(kind, seed):
    """Random images (axes of 1 to 70 voxels, so kernels longer than a line and tiles of 64
    lines with a remainder) and kernels, every axis: the numba kernel and the numpy run of the
    array-generic path (the code a cupy image takes) agree bit for bit, and both are the
    zero-boundary convolution (float64 reference, to float32 rounding).  Guards the CPU/GPU
    agreement of the filters and the boundary rule."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 71, 3))
    x = rng.standard_normal(shape).astype(np.float32)
    for axis in range(3):
        n = int(rng.integers(1, 40))
        if kind == SYMMETRIC:
            coefficients = rng.standard_normal(n).astype(np.float32)
            full = np.concatenate([coefficients[:0:-1], coefficients])
        else:
            coefficients = full = rng.standard_normal(2 * n + 1).astype(np.float32)
        a, b = x.copy(), x.copy()
        convolve_axis_numba(a, coefficients, axis, kind)
        convolve_axis_xp(b, coefficients, axis, kind)
        assert np.array_equal(a, b), (shape, axis, n)
        ref = _reference(x, full.astype(np.float64), axis)
        assert np.abs(a - ref).max() <= 1e-5 * max(np.abs(ref).max(), 1.0)


def test_convolution_refuses_what_it_cannot_do():
    x = np.zeros((3, 4, 5), np.float32)
    with pytest.raises(StirGpuError, match="odd length"):
        convolve_axis_xp(x, np.ones(4, np.float32), 0, GENERAL)
    with pytest.raises(StirGpuError, match="3-D float32"):
        convolve_axis_numba(np.zeros((3, 4, 5)), np.ones(3, np.float32), 0, SYMMETRIC)
    with pytest.raises(StirGpuError, match="C-contiguous"):
        convolve_axis_numba(np.zeros((5, 4, 3), np.float32).transpose(), np.ones(3, np.float32), 0, SYMMETRIC)
    with pytest.raises(StirGpuError, match="axis"):
        convolve_axis_xp(x, np.ones(3, np.float32), 3, SYMMETRIC)


def test_gaussian_kernel_shape_and_normalisation():
    """STIR's rules: automatic half length ceil(5.26 sd); ``max_kernel_size // 2`` a side otherwise
    (4 gives 5 coefficients); normalised to sum 1; FWHM 0 gives no kernel (no filtering)."""
    sd = 3.0 / np.sqrt(8 * np.log(2))
    k = gaussian_kernel(3.0)
    assert k.size == 2 * int(np.ceil(np.sqrt(-2 * np.log(1e-6)) * sd)) + 1
    assert abs(float(k.astype(np.float64).sum()) - 1) < 1e-6 and np.array_equal(k, k[::-1])
    assert gaussian_kernel(3.0, 4).size == 5 and gaussian_kernel(3.0, 5).size == 5
    assert gaussian_kernel(3.0, 1, normalise=True).tolist() == [1.0]
    assert gaussian_kernel(0.0).size == 0
    with pytest.raises(StirGpuError, match="max_kernel_size 0"):
        gaussian_kernel(3.0, 0)


def test_metz_power_0_of_a_broad_gaussian_is_the_sampled_gaussian():
    """With one fine sample per voxel (a FWHM well above the voxel) STIR's Metz construction has
    no band limit, so power 0 returns the Gaussian sampled at the voxels and normalised on the
    fine grid: its samples sum to 1 (to float32) and follow exp(-x^2 / (2 s2))."""
    k = metz_kernel(20.0, 0.0, 4.0)
    s2 = 20.0**2 / (8 * np.log(2))
    x = 4.0 * np.arange(k.size)
    expected = np.exp(-x * x / (2 * s2)) * 4.0 / np.sqrt(2 * np.pi * s2)
    # (float32 quantisation of 1 - (1 - z) in STIR's Metz step, where the spectrum z is small)
    assert np.abs(k - expected).max() < 5e-5
    assert abs(k[0] + 2 * k[1:].astype(np.float64).sum() - 1) < 1e-4
    assert metz_kernel(0.0, 2.0, 2.0).tolist() == [1.0]
    assert metz_kernel(7.0, 1.0, 2.0, 1).size == 0 and metz_kernel(7.0, 1.0, 2.0, 4).size == 2


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: SeparableGaussianFilter(fwhm=-1.0), "fwhm must be >= 0"),
        (lambda: SeparableGaussianFilter(fwhm=(1, 2)), "one number or three"),
        (lambda: SeparableGaussianFilter(max_kernel_size=0), "-1 \\(automatic\\) or >= 1"),
        (lambda: SeparableCartesianMetzFilter(metz_power=-0.5), "metz_power must be >= 0"),
        (lambda: SeparableCartesianMetzFilter(max_kernel_size=(-2, 3, 3)), "-1 \\(unrestricted\\) or >= 1"),
    ],
)
def test_bad_parameters_are_refused(make, words):
    with pytest.raises(StirGpuError, match=words):
        make()


def test_apply_returns_a_filtered_copy_of_any_image():
    """numpy arrays (with ``voxel_size``; non-contiguous ones too) and VoxelsOnCartesianGrid (its
    own voxel size): a new filtered image, the input untouched; filters are equal by value."""
    rng = np.random.default_rng(1)
    info = ImageInfo(shape=(9, 12, 11), voxel_size=(3.0, 2.0, 2.5))
    x = rng.random(info.shape, dtype=np.float32)
    before = x.copy()
    f = SeparableCartesianMetzFilter(fwhm=(6.0, 5.0, 5.0), metz_power=1.0)
    assert f == SeparableCartesianMetzFilter(fwhm=(6, 5, 5), metz_power=(1, 1, 1), max_kernel_size=-1)
    out = f.apply(x, voxel_size=info.voxel_size)
    assert np.array_equal(x, before) and not np.array_equal(out, x)
    image = VoxelsOnCartesianGrid(info, fill=x)
    filtered = f.apply(image)
    assert isinstance(filtered, VoxelsOnCartesianGrid) and filtered.info == info
    assert np.array_equal(filtered.array, out) and np.array_equal(image.array, before)
    fortran = np.asfortranarray(x)
    assert np.array_equal(f.apply(fortran, voxel_size=info.voxel_size), out)
    with pytest.raises(StirGpuError, match="voxel size is needed"):
        f.apply(x)
    prepared = f.prepare(info.voxel_size)
    y = x.copy()
    assert prepared.apply_in_place(y) is y and np.array_equal(y, out)


def test_trivial_axes_are_left_alone():
    """FWHM 0 in a direction (or a maximum kernel size of 1 for Metz) leaves that direction as it
    is, exactly: filtering z only changes nothing across y and x."""
    rng = np.random.default_rng(2)
    x = rng.random((7, 8, 9), dtype=np.float32)
    for f in (
        SeparableGaussianFilter(fwhm=(5.0, 0.0, 0.0)),
        SeparableCartesianMetzFilter(fwhm=(5.0, 4.0, 4.0), max_kernel_size=(-1, 1, 1)),
    ):
        out = f.apply(x, voxel_size=(2.0, 2.0, 2.0))
        k = f.prepare((2.0, 2.0, 2.0)).kernels
        assert not k[0].trivial and k[1].trivial and k[2].trivial
        ref = x.copy()
        convolve_axis_xp(ref, k[0].coefficients, 0, k[0].kind)
        assert np.array_equal(out, ref)
    assert SeparableGaussianFilter().prepare((1, 1, 1)).trivial
