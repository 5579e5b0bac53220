"""STIR's KOSMAPOSL kernel and run (``stirgpu.recon.kernel_method``, ``stirgpu.recon.KOSMAPOSL``)
without STIR: the numba kernel against a plain Python transcription of the documented formula
(STIR's numbers are checked in tests/stir_differential/test_kosmaposl_vs_stir.py), its special
cases, and the refusals."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.geometry import ImageInfo
from stirgpu.kernels.kernelised import distance_table
from stirgpu.recon import KernelSettings

INFO = ImageInfo(shape=(3, 5, 6), voxel_size=(4.0, 2.0, 2.5))


def reference(image, alpha, anatomical, s: KernelSettings, sds, distance):
    """The kernelised image, voxel by voxel in float64 (the formula of kernels/kernelised/cpu.py)."""
    nz, ny, nx = image.shape
    hz, hy, hx = (n // 2 for n in distance.shape)
    out = np.zeros(image.shape)
    for z, y, x in np.ndindex(image.shape):
        a = float(alpha[z, y, x])
        if s.hybrid and a == 0:
            continue
        acc = total = 0.0
        for dz in range(max(-hz, -z), min(hz, nz - 1 - z) + 1):
            for dy in range(max(-hy, -y), min(hy, ny - 1 - y) + 1):
                for dx in range(max(-hx, -x), min(hx, nx - 1 - x) + 1):
                    d2 = float(distance[dz + hz, dy + hy, dx + hx]) ** 2
                    k = 1.0
                    if s.hybrid:
                        diff = a - float(alpha[z + dz, y + dy, x + dx])
                        k = math.exp(-(diff**2) / (2 * s.sigma_p**2 * a * a) - d2 / (2 * s.sigma_dp**2))
                    for m, sm, sd in zip(anatomical, s.sigma_m, sds, strict=True):
                        diff = float(m[z, y, x]) - float(m[z + dz, y + dy, x + dx])
                        k *= math.exp(-(diff**2) / (2 * sm**2 * sd**2) - d2 / (2 * s.sigma_dm**2))
                    acc += k * float(image[z + dz, y + dy, x + dx])
                    total += k
        out[z, y, x] = acc if a == 0 else acc / total
    return out


def _images(seed=0):
    rng = np.random.default_rng(seed)
    image = rng.random(INFO.shape).astype(np.float32) + 0.5
    alpha = rng.random(INFO.shape).astype(np.float32) + 0.2
    alpha[1, 2, 3] = 0.0  # STIR's special case
    mr = rng.random(INFO.shape).astype(np.float32)
    ct = rng.random(INFO.shape).astype(np.float32) * 3
    return image, alpha, mr, ct


@pytest.mark.parametrize(
    "settings, n_anatomical",
    [
        (KernelSettings(hybrid=True, sigma_m=(0.8,), sigma_p=0.5, sigma_dp=2.0, sigma_dm=3.0), 1),
        (KernelSettings(num_neighbours=5, only_2d=True, sigma_m=(1.5,), sigma_dm=4.0), 1),
        (KernelSettings(num_neighbours=4, hybrid=True, sigma_m=(0.5, 2.0), sigma_p=2.0, sigma_dm=2.0), 2),
        (KernelSettings(hybrid=True, sigma_p=0.3, sigma_dp=1.0), 0),
    ],
    ids=["hybrid-3d", "anatomical-2d-5", "even-4-two-images", "hybrid-alone"],
)
def test_kernel_is_the_formula(settings, n_anatomical):
    """The numba kernel equals the formula to float32 rounding (1e-6 relative) everywhere: at the
    edges (the neighbourhood cut), at a zero of alpha (hybrid: 0; else the undivided sum) and for
    an even number of neighbours (STIR's (n - 1) / 2 half width)."""
    image, alpha, mr, ct = _images()
    anatomical = [mr, ct][:n_anatomical]
    kernel = settings.prepare(INFO, anatomical)
    got = kernel.apply(image, alpha)
    want = reference(image, alpha, anatomical, settings, kernel.standard_deviations, kernel.distance)
    assert got.dtype == np.float32 and got.shape == INFO.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert (got[1, 2, 3] == 0) == settings.hybrid


def test_distance_table_and_standard_deviation():
    """STIR's distances are in units of the x voxel size, z offsets 0 alone with only_2D; the
    standard deviation divides by n - 1."""
    d = distance_table(3, False, (4.0, 2.0, 2.5))
    assert d.shape == (3, 3, 3) and d.dtype == np.float32
    assert d[1, 1, 2] == 1.0 and d[1, 2, 1] == np.float32(0.8) and d[2, 1, 1] == np.float32(1.6)
    assert distance_table(4, True, (4.0, 2.0, 2.5)).shape == (1, 3, 3)
    _, _, mr, _ = _images()
    kernel = KernelSettings(sigma_m=(1.0,)).prepare(INFO, [mr])
    assert kernel.standard_deviations[0] == pytest.approx(float(np.std(mr.astype(np.float64), ddof=1)), rel=1e-12)


def test_wide_anatomical_kernel_is_a_mean_filter():
    """sigmas far larger than any difference: every kernel value is 1, so the kernelised image is
    the mean over the in-image neighbourhood (a physical check independent of the formula's code)."""
    image, alpha, mr, _ = _images()
    out = KernelSettings(sigma_m=(1e6,), sigma_dm=1e6).prepare(INFO, [mr]).apply(image, alpha + 1)
    assert out[1, 2, 2] == pytest.approx(float(image[0:3, 1:4, 1:4].mean()), rel=1e-6)
    assert out[0, 0, 0] == pytest.approx(float(image[0:2, 0:2, 0:2].mean()), rel=1e-6)


@pytest.mark.parametrize(
    "settings, images, words",
    [
        (KernelSettings(sigma_m=()), 0, "anatomical image has not been set"),
        (KernelSettings(sigma_m=(1.0,)), 2, "number of sigma_m parameters"),
        (KernelSettings(sigma_m=(1.0,), num_non_zero_features=0), 1, "number of non-zero feature elements 0"),
        (KernelSettings(sigma_m=(1.0,), num_neighbours=0), 1, "number of neighbours 0"),
        (KernelSettings(sigma_m=(1.0,), freeze_at_subiteration=0), 1, "cannot be frozen at subiteration 0"),
    ],
)
def test_refusals(settings, images, words):
    _, _, mr, ct = _images()
    with pytest.raises(StirGpuError, match=words):
        settings.prepare(INFO, [mr, ct][:images])


def test_refuses_anatomical_images_that_leave_the_kernel_undefined():
    with pytest.raises(StirGpuError, match="differs from the emission image"):
        KernelSettings(sigma_m=(1.0,)).prepare(INFO, [np.ones((3, 5, 5), np.float32)])
    with pytest.raises(StirGpuError, match="is constant"):
        KernelSettings(sigma_m=(1.0,)).prepare(INFO, [np.ones(INFO.shape, np.float32)])
    bad = np.ones(INFO.shape, np.float32)
    bad[0, 0, 0] = np.nan
    with pytest.raises(StirGpuError, match="NaN or infinite"):
        KernelSettings(sigma_m=(1.0,)).prepare(INFO, [bad])


# -- the run -------------------------------------------------------------------------------------


def _kosmaposl(problem, tmp_path, settings, anatomical, **kw):
    from helpers import osem_objective

    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon import KOSMAPOSL

    _, info, _, sim = problem
    return KOSMAPOSL(
        osem_objective(sim),
        ProjectorPair(backend="cpu"),
        info,
        num_subsets=4,
        num_subiterations=4,
        save_interval=2,
        kernel=settings,
        anatomical_images=anatomical,
        kernelised_output_filename_prefix=tmp_path / "kout",
        **kw,
    )


def test_one_neighbour_is_osem(osem_problem, tmp_path):
    """With one neighbour the kernel is the identity (STIR's test pack checks KOSMAPOSL this way):
    the coefficients and the emission images are OSEM's estimates, to float32 rounding; the
    emission images are written at the save points whether or not estimates are."""
    from helpers import make_osem

    _, info, phantom, _ = osem_problem
    mr = phantom.activity(info)
    run = _kosmaposl(osem_problem, tmp_path, KernelSettings(num_neighbours=1, sigma_m=(1.0,)), [mr])
    result = run.reconstruct()
    osem = make_osem(osem_problem, num_subsets=4, num_subiterations=4).reconstruct()
    scale = float(osem.image.max())
    assert np.abs(result.image - osem.image).max() <= 1e-5 * scale
    assert np.abs(run.kernelised_image - osem.image).max() <= 1e-5 * scale
    assert run.kernelised_files == [tmp_path / "kout_2.hv", tmp_path / "kout_4.hv"]
    assert all(p.is_file() for p in run.kernelised_files) and result.saved == []


def test_kernel_smooths_and_freezes(osem_problem, tmp_path):
    """A hybrid kernel frozen at subiteration 2 keeps the kernel image of subiteration 2's start:
    the run equals the unfrozen one up to subiteration 2 and differs after it; a run starting
    after the freeze is refused (STIR would have no frozen kernel)."""
    _, info, phantom, _ = osem_problem
    mr = phantom.activity(info)
    hybrid = KernelSettings(hybrid=True, sigma_m=(1.0,), sigma_p=0.5, sigma_dp=3.0, sigma_dm=3.0)
    free = _kosmaposl(osem_problem, tmp_path / "free", hybrid, [mr])
    frozen = _kosmaposl(osem_problem, tmp_path / "frozen", dataclasses.replace(hybrid, freeze_at_subiteration=2), [mr])
    after = {}
    for name, run in (("free", free), ("frozen", frozen)):
        (tmp_path / name).mkdir()
        run.reconstruct(callback=lambda rec, x, name=name: after.setdefault((name, rec.subiteration), x.copy()))
    assert np.array_equal(after["free", 2], after["frozen", 2])
    assert not np.array_equal(after["free", 3], after["frozen", 3])
    with pytest.raises(StirGpuError, match="the frozen kernel would never be made"):
        _kosmaposl(
            osem_problem,
            tmp_path,
            dataclasses.replace(hybrid, freeze_at_subiteration=2),
            [mr],
            start_subiteration_num=3,
        )


@pytest.mark.gpu
def test_cuda_run_is_the_cpus(osem_problem, tmp_path):
    """KOSMAPOSL on the CUDA backend (estimate, sensitivities, update and kernel on the GPU:
    kernelised.cu) gives the CPU backend's coefficients and emission image to float32 summation
    order of the projections (1e-5 of the maximum), the emission image a cupy array on the device."""
    import cupy
    from helpers import osem_objective

    from stirgpu.projectors import ProjectorPair
    from stirgpu.recon import KOSMAPOSL

    _, info, phantom, sim = osem_problem
    settings = KernelSettings(hybrid=True, sigma_m=(1.0,), sigma_p=0.5, sigma_dp=3.0, sigma_dm=3.0)
    runs = {}
    for backend in ("cpu", "cuda"):
        run = KOSMAPOSL(
            osem_objective(sim),
            ProjectorPair(backend=backend),
            info,
            num_subsets=4,
            num_subiterations=4,
            kernel=settings,
            anatomical_images=[phantom.activity(info)],
        )
        runs[backend] = (run.reconstruct().image, run.kernelised_image)
    (alpha_cpu, emission_cpu), (alpha_gpu, emission_gpu) = runs["cpu"], runs["cuda"]
    assert isinstance(emission_gpu, cupy.ndarray)
    for cpu, gpu in ((alpha_cpu, alpha_gpu), (emission_cpu, emission_gpu)):
        assert np.abs(cupy.asnumpy(gpu) - cpu).max() <= 1e-5 * cpu.max()


def test_feature_norms_accumulate_while_the_kernel_is_updated():
    """More than one feature element: the anatomical norms are made once, at set-up; the emission
    norms start at 0 and every kernelisation of a hybrid kernel that is still updated adds its
    kernel image's (STIR never resets them: the same image twice, its norms added twice), a frozen
    one adds nothing; the kernelised image depends on them."""
    from stirgpu.kernels.kernelised import feature_norms

    image, alpha, mr, _ = _images()
    settings = KernelSettings(num_non_zero_features=2, hybrid=True, sigma_m=(1.0,), sigma_p=0.5)
    kernel = settings.prepare(INFO, [mr])
    once = feature_norms(alpha, 2, 3, False)
    np.testing.assert_array_equal(kernel.feature_norms["anatomical"][0], feature_norms(mr, 2, 3, False))
    assert not kernel.feature_norms["emission"].any() and once.any()
    first = kernel.apply(image, alpha)
    np.testing.assert_array_equal(kernel.feature_norms["emission"], once)
    second = kernel.apply(image, alpha)
    twice = feature_norms(alpha, 2, 3, False, once.copy())
    np.testing.assert_array_equal(kernel.feature_norms["emission"], twice)
    assert np.allclose(twice, 2 * once, rtol=1e-6)
    frozen = kernel.apply(image, alpha, updating=False)
    np.testing.assert_array_equal(kernel.feature_norms["emission"], twice)
    np.testing.assert_array_equal(frozen, second)
    assert not np.array_equal(first, second)
    assert not feature_norms(alpha, 2, 3, False)[-1].any()  # (STIR leaves the last voxel's at 0)
