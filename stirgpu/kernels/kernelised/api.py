"""STIR's kernelised image (``KOSMAPOSLReconstruction``): the distance table, the anatomical
images' standard deviations, and the kernel applied to an image (:func:`kernelised_image`),
validated here and computed by :mod:`.cpu` (numba).

A cupy image is computed on the host and handed back on its device (one copy each way per
call): the kernel is a local neighbourhood sum, small beside the projections between two calls.
"""

from __future__ import annotations

import numpy as np

from ...arrays import array_module, is_cupy
from ...errors import StirGpuError

__all__ = ["distance_table", "standard_deviation", "kernelised_image"]


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
):
    """The kernelised ``image`` with the kernel of ``alpha`` and the anatomical images (a new
    float32 array where ``image`` lives); see :mod:`.cpu` for the formula."""
    shape = tuple(image.shape)
    if len(shape) != 3 or tuple(alpha.shape) != shape:
        raise StirGpuError(f"kernelised image: image {shape} and kernel image {tuple(alpha.shape)} differ")
    anatomical = [np.ascontiguousarray(_host(m), dtype=np.float32) for m in anatomical]
    if any(m.shape != shape for m in anatomical):
        raise StirGpuError("anatomical and emission image have different sizes; make sure they are the same")
    if len(sigma_m) != len(anatomical) or len(standard_deviations) != len(anatomical):
        raise StirGpuError("one sigma_m and one standard deviation per anatomical image are needed")
    if not anatomical and not hybrid:
        raise StirGpuError("a kernel needs an anatomical image, or the hybrid (emission) part")
    from .cpu import kernelised_image as kernel

    stack = np.stack(anatomical) if anatomical else np.zeros((0, *shape), np.float32)
    out = np.zeros(shape, np.float32)
    kernel(
        out,
        np.ascontiguousarray(_host(image), dtype=np.float32),
        np.ascontiguousarray(_host(alpha), dtype=np.float32),
        stack,
        np.asarray([float(s) ** 2 for s in sigma_m], np.float64),
        np.asarray([float(s) ** 2 for s in standard_deviations], np.float64),
        float(sigma_p) ** 2,
        float(sigma_dp) ** 2,
        float(sigma_dm) ** 2,
        np.ascontiguousarray(distance, dtype=np.float32),
        bool(hybrid),
    )
    if is_cupy(image):
        return array_module(image).asarray(out)
    return out


def _host(a) -> np.ndarray:
    return a.get() if is_cupy(a) else np.asarray(a)
