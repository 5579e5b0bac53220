"""STIR's filters on GPU-resident images: the cupy path of the separable convolution against
the numba kernel, the filter objects on cupy arrays, and OSEM with an inter-update, an
inter-iteration and a post-filter on the CUDA backend against the CPU (to float32 rounding:
the convolution's sums in the same order, the reconstruction's projections in another)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_osem

from stirgpu.filters import SeparableCartesianMetzFilter, SeparableGaussianFilter
from stirgpu.kernels.convolution import GENERAL, SYMMETRIC, convolve_axis_numba, convolve_axis_xp
from stirgpu.recon import FilterSchedule

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", [SYMMETRIC, GENERAL])
@pytest.mark.parametrize("seed", range(3))
def test_convolution_on_a_gpu_is_the_numba_kernels(cp, kind, seed):
    """Random images and kernels (kernels longer than a line included), every axis."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 71, 3))
    x = rng.standard_normal(shape).astype(np.float32)
    for axis in range(3):
        n = int(rng.integers(1, 40))
        size = n if kind == SYMMETRIC else 2 * n + 1
        coefficients = rng.standard_normal(size).astype(np.float32)
        cpu = x.copy()
        convolve_axis_numba(cpu, coefficients, axis, kind)
        gpu = cp.asarray(x)
        convolve_axis_xp(gpu, coefficients, axis, kind)
        assert isinstance(gpu, cp.ndarray)
        np.testing.assert_allclose(gpu.get(), cpu, rtol=0, atol=1e-6 * max(float(np.abs(cpu).max()), 1.0))


@pytest.mark.parametrize(
    "filt",
    [SeparableCartesianMetzFilter(fwhm=(6.0, 5.0, 5.0), metz_power=(0.0, 1.0, 2.0)), SeparableGaussianFilter(fwhm=5.0)],
    ids=["metz", "gaussian"],
)
def test_filters_on_cupy_images(cp, filt):
    """apply: a filtered cupy copy, the input untouched; apply_in_place: the same array."""
    voxel_size = (3.0, 2.0, 2.5)
    x = np.random.default_rng(1).random((19, 33, 31), dtype=np.float32)
    expected = filt.apply(x, voxel_size=voxel_size)
    image = cp.asarray(x)
    out = filt.apply(image, voxel_size=voxel_size)
    assert isinstance(out, cp.ndarray) and out.data.ptr != image.data.ptr
    np.testing.assert_array_equal(image.get(), x)
    tol = 1e-6 * float(np.abs(expected).max())
    np.testing.assert_allclose(out.get(), expected, rtol=0, atol=tol)
    prepared = filt.prepare(voxel_size)
    assert prepared.apply_in_place(image) is image
    np.testing.assert_allclose(image.get(), expected, rtol=0, atol=tol)


def test_osem_with_filters_on_a_gpu_is_the_cpus(osem_problem):
    """Inter-update (Metz), inter-iteration (Gaussian) and post-filter (Gaussian) on the CUDA
    backend: the estimate stays a cupy array and equals the CPU run's."""
    import cupy

    schedule = FilterSchedule(
        inter_update=SeparableCartesianMetzFilter(fwhm=(5.0, 4.0, 4.0), metz_power=1.0),
        inter_update_interval=1,
        inter_iteration=SeparableGaussianFilter(fwhm=(4.0, 4.0, 4.0)),
        inter_iteration_interval=2,
        post=SeparableGaussianFilter(fwhm=(5.0, 4.0, 4.0)),
    )
    images = {}
    for backend in ("cpu", "cuda"):
        osem = make_osem(osem_problem, backend, num_subsets=4, num_subiterations=4, filters=schedule)
        images[backend] = osem.reconstruct().image
    assert isinstance(images["cuda"], cupy.ndarray)
    cpu = np.asarray(images["cpu"])
    assert float(np.abs(images["cuda"].get() - cpu).max()) <= 1e-5 * float(cpu.max())
