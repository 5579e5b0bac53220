"""STIR's kernelised image (``KOSMAPOSLReconstruction``): the distance table, the anatomical
images' standard deviations, and the kernel applied to an image (:func:`kernelised_image`),
validated here and computed by :mod:`.cpu` (numba).

A cupy image is kernelised on its device (:mod:`.cuda`, ``cuda/kernelised.cu``), a numpy one on
the host (:mod:`.cpu`, numba): the same numbers to float32 rounding.
"""

from __future__ import annotations

import numpy as np

from ...arrays import array_module, is_cupy
from ...errors import StirGpuError

__all__ = ["distance_table", "standard_deviation", "anatomical_stack", "feature_norms", "kernelised_image"]


def distance_table(num_neighbours: int, only_2d: bool, voxel_size_zyx) -> np.ndarray:
    """STIR's ``precalculate_patch_euclidean_distances``: for offsets ``-h..h`` (``h = (n - 1) // 2``;
    z offsets 0 alone when ``only_2d``), ``|d| / voxel_size_x`` in float32 arithmetic, as STIR's
    ``Array<3,float>``.  Shape (2 hz + 1, 2 h + 1, 2 h + 1)."""
    n = int(num_neighbours)
    if n < 1:
        raise StirGpuError(f"number of neighbours {n}: must be at least 1")
    h = (n - 1) // 2
    hz = 0 if only_2d else h
    f32 = np.float32
    gz, gy, gx = (f32(v) for v in voxel_size_zyx)
    z = (np.arange(-hz, hz + 1, dtype=f32) * gz)[:, None, None]
    y = (np.arange(-h, h + 1, dtype=f32) * gy)[None, :, None]
    x = (np.arange(-h, h + 1, dtype=f32) * gx)[None, None, :]
    return (np.sqrt(x * x + y * y + z * z) / gx).astype(f32)


def standard_deviation(image) -> float:
    """STIR's ``estimate_stand_dev_for_anatomical_image``: the sample standard deviation (n - 1)
    of every voxel, in float64."""
    a = np.asarray(_host(image), dtype=np.float64)
    if a.size < 2:
        raise StirGpuError("an anatomical image needs at least 2 voxels for its standard deviation")
    return float(np.sqrt(((a - a.mean()) ** 2).sum() / (a.size - 1)))


def feature_norms(image, num_non_zero_features: int, num_neighbours: int, only_2d: bool, norms=None) -> np.ndarray:
    """STIR's ``calculate_norm_matrix`` of ``image`` (the norms of differences of feature vectors of
    ``num_non_zero_features`` elements, :mod:`.cpu`), added into ``norms`` ((voxels, n^3 or n^2)
    float32 on the host; new zeros when None, as STIR's at set-up) and returned."""
    from .cpu import accumulate_norms, feature_vectors

    a = np.ascontiguousarray(_host(image), dtype=np.float32)
    n = int(num_neighbours)
    h = (n - 1) // 2
    elements = n * n if only_2d else n * n * n
    if norms is None:
        norms = np.zeros((a.size, elements), np.float32)
    if norms.shape != (a.size, elements):
        raise StirGpuError(f"feature norms: shape {norms.shape}, expected {(a.size, elements)}")
    f = feature_vectors(a, int(num_non_zero_features), 0 if only_2d else h, h, h)
    accumulate_norms(norms, f, int(num_non_zero_features), n, bool(only_2d), a.shape[1], a.shape[2])
    return norms


def anatomical_stack(images, like=None):
    """The anatomical images as one (n, nz, ny, nx) float32 array where ``like`` lives (host
    without it): what :func:`kernelised_image` takes; a caller keeps it for every call."""
    host = [np.ascontiguousarray(_host(m), dtype=np.float32) for m in images]
    shape = host[0].shape if host else (0, 0, 0)
    if any(m.shape != shape for m in host):
        raise StirGpuError("the anatomical images differ in size")
    stack = np.stack(host) if host else np.zeros((0, *shape), np.float32)
    return array_module(like).asarray(stack) if like is not None and is_cupy(like) else stack


def kernelised_image(
    image,
    alpha,
    anatomical,
    sigma_m,
    standard_deviations,
    *,
    sigma_p: float,
    sigma_dp: float,
    sigma_dm: float,
    distance: np.ndarray,
    hybrid: bool,
    anatomical_norms=None,
    emission_norms=None,
):
    """The kernelised ``image`` with the kernel of ``alpha`` and the anatomical images (a new
    float32 array where ``image`` lives: numba on the host, ``kernelised.cu`` on a GPU); see
    :mod:`.cpu` for the formula.  ``anatomical``: :func:`anatomical_stack`'s array (on the image's
    device for a GPU image), or a list of images.

    With ``anatomical_norms`` ((n, voxels, elements), :func:`feature_norms` of each anatomical
    image) STIR's form for feature vectors of more than one element is computed instead, its
    emission part from ``emission_norms`` (hybrid), on the host (a GPU image's result is handed
    back on its device)."""
    shape = tuple(image.shape)
    if len(shape) != 3 or tuple(alpha.shape) != shape:
        raise StirGpuError(f"kernelised image: image {shape} and kernel image {tuple(alpha.shape)} differ")
    on_gpu = is_cupy(image)
    stack = anatomical if getattr(anatomical, "ndim", 0) == 4 else anatomical_stack(anatomical, image)
    n = int(stack.shape[0])
    if n and tuple(stack.shape[1:]) != shape:
        raise StirGpuError("anatomical and emission image have different sizes; make sure they are the same")
    if len(sigma_m) != n or len(standard_deviations) != n:
        raise StirGpuError("one sigma_m and one standard deviation per anatomical image are needed")
    if n == 0 and not hybrid:
        raise StirGpuError("a kernel needs an anatomical image, or the hybrid (emission) part")
    sq_sigma_m = np.asarray([float(v) ** 2 for v in sigma_m], np.float64)
    sq_sd = np.asarray([float(v) ** 2 for v in standard_deviations], np.float64)
    sigmas = (float(sigma_p) ** 2, float(sigma_dp) ** 2, float(sigma_dm) ** 2)
    if anatomical_norms is not None:
        return _from_norms(image, alpha, anatomical_norms, emission_norms, sq_sigma_m, sq_sd, sigmas, distance, hybrid)
    if on_gpu:
        from . import cuda

        xp = array_module(image)
        if not is_cupy(stack):
            stack = xp.asarray(stack)
        return cuda.kernelised_image(image, xp.asarray(alpha), stack, sq_sigma_m, sq_sd, sigmas, distance, hybrid)
    from .cpu import kernelised_image as kernel

    out = np.zeros(shape, np.float32)
    kernel(
        out,
        np.ascontiguousarray(image, dtype=np.float32),
        np.ascontiguousarray(_host(alpha), dtype=np.float32),
        np.ascontiguousarray(_host(stack), dtype=np.float32),
        sq_sigma_m,
        sq_sd,
        *sigmas,
        np.ascontiguousarray(distance, dtype=np.float32),
        bool(hybrid),
    )
    return out


def _from_norms(image, alpha, anatomical_norms, emission_norms, sq_sigma_m, sq_sd, sigmas, distance, hybrid):
    from .cpu import kernelised_image_from_norms

    shape = tuple(image.shape)
    voxels = int(np.prod(shape))
    if anatomical_norms.ndim != 3 or anatomical_norms.shape[1] != voxels:
        raise StirGpuError(f"anatomical feature norms of shape {anatomical_norms.shape} for {voxels} voxels")
    if hybrid and (emission_norms is None or emission_norms.shape != anatomical_norms.shape[1:]):
        raise StirGpuError("a hybrid kernel of more than one feature element needs the emission feature norms")
    emission = emission_norms if emission_norms is not None else np.zeros((voxels, 1), np.float32)
    out = np.zeros(shape, np.float32)
    kernelised_image_from_norms(
        out,
        np.ascontiguousarray(_host(image), dtype=np.float32),
        np.ascontiguousarray(_host(alpha), dtype=np.float32),
        anatomical_norms,
        emission,
        sq_sigma_m,
        sq_sd,
        *sigmas,
        np.ascontiguousarray(distance, dtype=np.float32),
        bool(hybrid),
    )
    return array_module(image).asarray(out) if is_cupy(image) else out


def _host(a) -> np.ndarray:
    return a.get() if is_cupy(a) else np.asarray(a)
