"""CPU kernel (numba) of STIR's kernelised image (``KOSMAPOSLReconstruction::compute_kernelised_image``,
its "compact" form: one non-zero feature element).

For voxel ``j`` and each neighbour ``l = j + d`` of the ``distance`` table's box that lies inside
the image (the box is cut at the image's edges, as STIR's), in (dz, dy, dx) order::

    k_jl = k_p(j, l) * prod_i k_m,i(j, l)
    k_p  = exp(-(a_j - a_l)^2 / (2 sigma_p^2 a_j^2) - D_d^2 / (2 sigma_dp^2))     (hybrid, else 1)
    k_m,i = exp(-(m_ij - m_il)^2 / (2 sigma_m,i^2 sd_i^2) - D_d^2 / (2 sigma_dm^2))
    out_j = sum_l k_jl image_l / sum_l k_jl

with ``a`` the kernel image (STIR's "current alpha estimate"), ``m_i`` the anatomical images with
their standard deviations ``sd_i`` and ``D_d`` the distance table's entry (float32, in units of
the x voxel size).  STIR's special cases are kept: where ``a_j`` is 0, a hybrid kernel leaves
``out_j`` at 0 (every neighbour is skipped) and a non-hybrid one leaves the sum undivided.

Precision as STIR's: each kernel value in float64; ``out_j`` accumulates in the output's float32
(STIR's ``+=`` into a float image), the division by the float64 sum rounded once more.

Voxels are independent: planes run in parallel (``prange``), the GIL released.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..jit import cached_njit

__all__ = ["kernelised_image"]


@cached_njit(fastmath=False, inline="always")
def _gaussian(diff, sq_sigma_int, sq_denominator, sq_distance, sq_sigma_dist):
    """STIR's ``calc_kernel_compact``: the intensity and the distance term, in float64."""
    norm_sq = (diff / sq_denominator / sq_sigma_int) * (diff / 2.0) + sq_distance / sq_sigma_dist / 2.0
    return math.exp(-norm_sq)


@cached_njit(nogil=True, fastmath=False)
def _voxel(
    z, y, x, image, alpha, anatomical, sq_sigma_m, sq_sd, sq_sigma_p, sq_sigma_dp, sq_sigma_dm, distance, hybrid
):
    """One voxel of the kernelised image (module docstring), in float32."""
    nz, ny, nx = image.shape
    hz, hy, hx = distance.shape[0] // 2, distance.shape[1] // 2, distance.shape[2] // 2
    a_j = np.float64(alpha[z, y, x])
    if hybrid and a_j == 0.0:
        return np.float32(0.0)  # STIR skips every neighbour
    acc = np.float32(0.0)
    kernel_sum = 0.0
    for dz in range(max(-hz, -z), min(hz, nz - 1 - z) + 1):
        for dy in range(max(-hy, -y), min(hy, ny - 1 - y) + 1):
            for dx in range(max(-hx, -x), min(hx, nx - 1 - x) + 1):
                d = np.float64(distance[dz + hz, dy + hy, dx + hx])
                sq_d = d * d
                emission = 1.0
                if hybrid:
                    diff = a_j - np.float64(alpha[z + dz, y + dy, x + dx])
                    emission = _gaussian(diff, sq_sigma_p, a_j * a_j, sq_d, sq_sigma_dp)
                anatomical_kernel = 1.0
                for i in range(anatomical.shape[0]):
                    diff = np.float64(anatomical[i, z, y, x]) - np.float64(anatomical[i, z + dz, y + dy, x + dx])
                    anatomical_kernel *= _gaussian(diff, sq_sigma_m[i], sq_sd[i], sq_d, sq_sigma_dm)
                kernel = anatomical_kernel * emission
                acc = np.float32(np.float64(acc) + kernel * np.float64(image[z + dz, y + dy, x + dx]))
                kernel_sum += kernel
    if a_j == 0.0:
        return acc  # (non-hybrid) STIR does not divide here
    return np.float32(np.float64(acc) / kernel_sum)


@cached_njit(parallel=True, nogil=True, fastmath=False)
def kernelised_image(
    out, image, alpha, anatomical, sq_sigma_m, sq_sd, sq_sigma_p, sq_sigma_dp, sq_sigma_dm, distance, hybrid
):
    """``out`` (float32) = the kernelised ``image`` (module docstring).

    ``anatomical``: (n, nz, ny, nx) float32 (n may be 0); ``sq_sigma_m``, ``sq_sd``: (n,) float64;
    ``distance``: (2 hz + 1, 2 hy + 1, 2 hx + 1) float32, centred.  Planes run in parallel; each
    voxel's sum is its own (:func:`_voxel`)."""
    nz, ny, nx = image.shape
    for zu in prange(nz):
        z = np.int64(zu)  # (a prange index may be unsigned: -z in _voxel must be negative)
        for y in range(ny):
            for x in range(nx):
                out[z, y, x] = _voxel(
                    z,
                    y,
                    x,
                    image,
                    alpha,
                    anatomical,
                    sq_sigma_m,
                    sq_sd,
                    sq_sigma_p,
                    sq_sigma_dp,
                    sq_sigma_dm,
                    distance,
                    hybrid,
                )
