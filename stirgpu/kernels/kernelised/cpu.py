"""CPU kernels (numba) of STIR's kernelised image (``KOSMAPOSLReconstruction::compute_kernelised_image``):
its "compact" form (one non-zero feature element) first, its full form (norms of feature vectors)
at the end of this module.

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


# -- STIR's full form: feature vectors of more than one element ------------------------------------
#
# Facts from KOSMAPOSLReconstruction.cxx (calculate_norm_matrix and compute_kernelised_image), kept
# as STIR computes them, its indexing included:
#
# * the feature vector of voxel l holds, at element m (0 <= m < nnz), the image at the neighbour
#   (dz, dy, dx) of l's edge-cut box for which m = dz * wx * wy + dy * wx + dx (wx, wy the cut box's
#   widths; the last such neighbour in (dz, dy, dx) order), 0 where none;
# * the norms: for each voxel q but the last, each offset (n, k, j) of the full box (n = 0 with
#   only_2D) and each element i, norms[q, p] += (f[q, i] - f[o, i])^2 in float32, with p the
#   offset's place in the full box and o = q + j + k nx + n nx ny (one further where q starts a row
#   and that offset reaches past the row's end; skipped where it reaches further still, and where
#   o is the last voxel or outside the image);
# * the kernel of voxel j and its neighbour at place m of j's edge-cut box (its own (dz, dy, dx)
#   order): exp(-(norms[j, m] / a_j^2 / sigma_p^2 + D^2 / sigma_dp^2 / 2)) for the emission part,
#   exp(-(norms_i[j, m] / sd_i^2 / sigma_m,i^2 + D^2 / sigma_dm^2 / 2)) for anatomical image i.


@cached_njit(nogil=True, fastmath=False)
def feature_vectors(image, nnz, hz, hy, hx):
    """STIR's feature vectors (float32, one row per voxel and one more, zeros where unset)."""
    nz, ny, nx = image.shape
    f = np.zeros((nz * ny * nx + 1, nnz), np.float32)
    for z in range(nz):
        for y in range(ny):
            for x in range(nx):
                voxel = (z * ny + y) * nx + x
                dz0, dz1 = max(-hz, -z), min(hz, nz - 1 - z)
                dy0, dy1 = max(-hy, -y), min(hy, ny - 1 - y)
                dx0, dx1 = max(-hx, -x), min(hx, nx - 1 - x)
                wy, wx = dy1 - dy0 + 1, dx1 - dx0 + 1
                for dz in range(dz0, dz1 + 1):
                    for dy in range(dy0, dy1 + 1):
                        for dx in range(dx0, dx1 + 1):
                            m = dz * wx * wy + dy * wx + dx
                            if 0 <= m < nnz:
                                f[voxel, m] = image[z + dz, y + dy, x + dx]
    return f


@cached_njit(parallel=True, nogil=True, fastmath=False)
def accumulate_norms(norms, f, nnz, num_neighbours, only_2d, ny, nx):
    """``norms[q, p] += (f[q, i] - f[o, i])^2`` as STIR's ``calculate_norm_matrix`` (see above);
    ``norms``: (voxels, elements of the full box) float32, accumulated in place."""
    rows = norms.shape[0]
    h = (num_neighbours - 1) // 2
    hn = 0 if only_2d else h
    centre = (norms.shape[1] - 1) // 2
    for qu in prange(rows - 1):  # (STIR skips the last voxel)
        q = np.int64(qu)
        for n in range(-hn, hn + 1):
            for k in range(-h, h + 1):
                for j in range(-h, h + 1):
                    p = j + k * num_neighbours + n * num_neighbours * num_neighbours + centre
                    off = j + k * nx + n * nx * ny
                    if q % nx == 0 and off >= nx - 1:
                        if off >= nx + h:
                            continue
                        o = q + off + 1
                    else:
                        o = q + off
                    if o >= rows - 1 or o < 0:
                        continue
                    for i in range(nnz):
                        d = np.float32(f[q, i] - f[o, i])
                        norms[q, p] = np.float32(norms[q, p] + d * d)


@cached_njit(nogil=True, fastmath=False)
def _voxel_from_norms(
    z,
    y,
    x,
    image,
    alpha,
    anatomical_norms,
    emission_norms,
    sq_sigma_m,
    sq_sd,
    sq_sigma_p,
    sq_sigma_dp,
    sq_sigma_dm,
    distance,
    hybrid,
):
    """One voxel of STIR's kernelised image from the norms (see above), in float32."""
    nz, ny, nx = image.shape
    hz, hy, hx = distance.shape[0] // 2, distance.shape[1] // 2, distance.shape[2] // 2
    a_j = np.float64(alpha[z, y, x])
    if hybrid and a_j == 0.0:
        return np.float32(0.0)
    voxel = (z * ny + y) * nx + x
    dz0, dz1 = max(-hz, -z), min(hz, nz - 1 - z)
    dy0, dy1 = max(-hy, -y), min(hy, ny - 1 - y)
    dx0, dx1 = max(-hx, -x), min(hx, nx - 1 - x)
    wy, wx = dy1 - dy0 + 1, dx1 - dx0 + 1
    acc = np.float32(0.0)
    kernel_sum = 0.0
    for dz in range(dz0, dz1 + 1):
        for dy in range(dy0, dy1 + 1):
            for dx in range(dx0, dx1 + 1):
                d = np.float64(distance[dz + hz, dy + hy, dx + hx])
                sq_d = d * d
                m = (dz - dz0) * wx * wy + (dy - dy0) * wx + (dx - dx0)
                emission = 1.0
                if hybrid:
                    norm = np.float64(emission_norms[voxel, m])
                    emission = math.exp(-(norm / (a_j * a_j) / sq_sigma_p + sq_d / sq_sigma_dp / 2.0))
                anatomical_kernel = 1.0
                for i in range(anatomical_norms.shape[0]):
                    norm = np.float64(anatomical_norms[i, voxel, m])
                    anatomical_kernel *= math.exp(-(norm / sq_sd[i] / sq_sigma_m[i] + sq_d / sq_sigma_dm / 2.0))
                kernel = anatomical_kernel * emission
                acc = np.float32(np.float64(acc) + kernel * np.float64(image[z + dz, y + dy, x + dx]))
                kernel_sum += kernel
    if a_j == 0.0:
        return acc
    return np.float32(np.float64(acc) / kernel_sum)


@cached_njit(parallel=True, nogil=True, fastmath=False)
def kernelised_image_from_norms(
    out,
    image,
    alpha,
    anatomical_norms,
    emission_norms,
    sq_sigma_m,
    sq_sd,
    sq_sigma_p,
    sq_sigma_dp,
    sq_sigma_dm,
    distance,
    hybrid,
):
    """``out`` (float32) = STIR's kernelised ``image`` of feature vectors of more than one element:
    ``anatomical_norms`` (n, voxels, elements), ``emission_norms`` (voxels, elements; read when
    ``hybrid``), both as :func:`accumulate_norms` made them."""
    nz, ny, nx = image.shape
    for zu in prange(nz):
        z = np.int64(zu)
        for y in range(ny):
            for x in range(nx):
                out[z, y, x] = _voxel_from_norms(
                    z,
                    y,
                    x,
                    image,
                    alpha,
                    anatomical_norms,
                    emission_norms,
                    sq_sigma_m,
                    sq_sd,
                    sq_sigma_p,
                    sq_sigma_dp,
                    sq_sigma_dm,
                    distance,
                    hybrid,
                )
