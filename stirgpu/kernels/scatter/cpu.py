"""The single scatter simulation's two numba kernels (:mod:`.api` says what they compute).

The ray tracer is STIR's ``RayTraceVoxelsOnCartesianGrid`` step for step (whole voxels from the
one holding the start point to the one holding the stop point; a ray lying in a plane between
voxels traced twice, half a voxel to each side, with half weight), in float64 where STIR uses
float32: the lengths differ by rounding only.  Parallel over scatter points (tables) and bins
(the estimate); each output element is written by one thread.
"""

from __future__ import annotations

import math

from numba import prange

from ..jit import cached_njit

__all__ = ["activity_table_cpu", "attenuation_table_cpu", "single_scatter_cpu"]

#: STIR's "the ray is parallel to this axis" bound, in voxels
_SMALL_DIFFERENCE = 1.0e-4
#: STIR's "start and stop coincide" bound, in voxels
_SAME_POINT = 1.0e-5


@cached_njit(inline="always")
def _stir_round(x):  # pragma: no cover
    """STIR's ``round``: half away from zero."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


@cached_njit(inline="always")
def _is_half_integer(a):  # pragma: no cover
    return abs(math.floor(a) + 0.5 - a) < 1.0e-4


@cached_njit(inline="always")
def _plane_crossing(diff, d12):  # pragma: no cover
    """(sign, a-increment per voxel) along one axis; a huge increment for a parallel ray."""
    sign = 1 if diff >= 0 else -1
    if abs(diff) <= _SMALL_DIFFERENCE:
        return sign, d12 * 1.0e6
    return sign, d12 / abs(diff)


@cached_njit()
def _trace(image, mins, sz, sy, sx, ez, ey, ex, vz, vy, vx, weight):  # pragma: no cover
    """Sum of ``image`` along the ray from (sz, sy, sx) to (ez, ey, ex) (STIR's index
    coordinates: array index + ``mins``, so that rounding is STIR's), each voxel's length in
    x-voxel units times ``weight`` (one pass of STIR's tracer; no ray in a plane between voxels)."""
    dz, dy, dx = ez - sz, ey - sy, ex - sx
    d12 = math.sqrt((dz * vz) ** 2 + (dy * vy) ** 2 + (dx * vx) ** 2) / vx
    sign_z, inc_z = _plane_crossing(dz, d12)
    sign_y, inc_y = _plane_crossing(dy, d12)
    sign_x, inc_x = _plane_crossing(dx, d12)
    par_z, par_y, par_x = abs(dz) <= _SMALL_DIFFERENCE, abs(dy) <= _SMALL_DIFFERENCE, abs(dx) <= _SMALL_DIFFERENCE
    # a at the far planes of the stop voxel, a little short of them (STIR's .9999)
    az_end = d12 * 1.0e6 if par_z else (_stir_round(ez) + sign_z * 0.5 - sz) * inc_z * sign_z * 0.9999
    ay_end = d12 * 1.0e6 if par_y else (_stir_round(ey) + sign_y * 0.5 - sy) * inc_y * sign_y * 0.9999
    ax_end = d12 * 1.0e6 if par_x else (_stir_round(ex) + sign_x * 0.5 - sx) * inc_x * sign_x * 0.9999
    a_max = min(ax_end, min(ay_end, az_end))
    cz, cy, cx = _stir_round(sz), _stir_round(sy), _stir_round(sx)
    # a at the near planes of the start voxel: the walk starts at the start voxel's edge
    az = -inc_z if par_z else ((cz - sz) - sign_z * 0.5) * inc_z * sign_z
    ay = -inc_y if par_y else ((cy - sy) - sign_y * 0.5) * inc_y * sign_y
    ax = -inc_x if par_x else ((cx - sx) - sign_x * 0.5) * inc_x * sign_x
    a = max(ax, max(ay, az))
    az = az_end if par_z else az + inc_z
    ay = ay_end if par_y else ay + inc_y
    ax = ax_end if par_x else ax + inc_x
    nz, ny, nx = image.shape
    total = 0.0
    while a < a_max:
        kz, ky, kx = cz, cy, cx
        if ax < ay and ax < az:
            length = ax - a
            a = ax
            ax += inc_x
            cx += sign_x
        elif ax >= ay and ay < az:
            length = ay - a
            a = ay
            ay += inc_y
            cy += sign_y
        else:
            length = az - a
            a = az
            az += inc_z
            cz += sign_z
        kz -= mins[0]
        ky -= mins[1]
        kx -= mins[2]
        if 0 <= kz < nz and 0 <= ky < ny and 0 <= kx < nx:
            total += image[kz, ky, kx] * (length * weight)
    return total


@cached_njit()
def _line_integral(image, mins, start, stop, voxel):  # pragma: no cover
    """STIR's ``integral_between_2_points`` (STIR's index coordinates): rays in planes between voxels
    split into 2, 4 or 8 rays half a voxel aside, as STIR's recursion does."""
    sz, sy, sx = start[0], start[1], start[2]
    ez, ey, ex = stop[0], stop[1], stop[2]
    if math.sqrt((ez - sz) ** 2 + (ey - sy) ** 2 + (ex - sx) ** 2) <= _SAME_POINT:
        return 0.0
    split_z = abs(ez - sz) <= _SMALL_DIFFERENCE and _is_half_integer(sz)
    split_y = abs(ey - sy) <= _SMALL_DIFFERENCE and _is_half_integer(sy)
    split_x = abs(ex - sx) <= _SMALL_DIFFERENCE and _is_half_integer(sx)
    n_rays = (2 if split_z else 1) * (2 if split_y else 1) * (2 if split_x else 1)
    weight = 1.0 / n_rays
    total = 0.0
    for r in range(n_rays):
        bits = r
        oz = oy = ox = 0.0
        if split_z:
            oz = 0.5 if bits & 1 else -0.5
            bits >>= 1
        if split_y:
            oy = 0.5 if bits & 1 else -0.5
            bits >>= 1
        if split_x:
            ox = 0.5 if bits & 1 else -0.5
        total += _trace(
            image, mins, sz + oz, sy + oy, sx + ox, ez + oz, ey + oy, ex + ox, voxel[0], voxel[1], voxel[2], weight
        )
    return total


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def activity_table_cpu(image, mins, points, dets, voxel, points_mm, dets_mm, out):  # pragma: no cover
    """``out[p, d]``: the activity integral from scatter point p to detector d times STIR's
    solid-angle factor ``min(pi/2, 1/r^2)`` (r in mm)."""
    n_points, n_dets = out.shape
    for p in prange(n_points):
        for d in range(n_dets):
            r2 = 0.0
            for k in range(3):
                r2 += (points_mm[p, k] - dets_mm[d, k]) ** 2
            out[p, d] = min(math.pi / 2, 1.0 / r2) * _line_integral(image, mins, points[p], dets[d], voxel)


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def attenuation_table_cpu(image, mins, points, dets, voxel, out):  # pragma: no cover
    """``out[p, d]``: ``exp(-integral of mu)`` from scatter point p to detector d, mu in cm^-1
    and lengths in cm (x-voxel units times the x voxel size in cm)."""
    n_points, n_dets = out.shape
    rescale = voxel[2] / 10.0
    for p in prange(n_points):
        for d in range(n_dets):
            out[p, d] = math.exp(-rescale * _line_integral(image, mins, points[p], dets[d], voxel))


@cached_njit(inline="always")
def _cos_angle(az, ay, ax, bz, by, bx):  # pragma: no cover
    return (az * bz + ay * by + ax * bx) / math.sqrt((az * az + ay * ay + ax * ax) * (bz * bz + by * by + bx * bx))


@cached_njit(inline="always")
def _detection_efficiency(energy, low, high, reference_energy, resolution):  # pragma: no cover
    sigma_sqrt2 = math.sqrt(2.0 * energy * reference_energy) * resolution / 2.35482
    return 0.5 * (math.erf((high - energy) / sigma_sqrt2) - math.erf((low - energy) / sigma_sqrt2))


@cached_njit(inline="always")
def _dif_compton_cross_section_511(cos_theta):  # pragma: no cover
    re = 2.818e-13
    p = 1.0 / (1.0 + (1.0 - cos_theta))
    return (re * re / 2) * p * (1 - p * (1 - cos_theta * cos_theta) + p * p)


@cached_njit(inline="always")
def _total_compton_relative_to_511(energy):  # pragma: no cover
    a = energy / 511.0
    prefactor = 9.0 / (-40 + 27 * math.log(3.0))
    first = (-4 - a * (16 + a * (18 + 2 * a))) / (1 + 2 * a) ** 2
    second = ((2 + (2 - a) * a) * math.log(1 + 2 * a)) / a
    return prefactor * (first + second) / (a * a)


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def single_scatter_cpu(
    det_pairs, points_mm, mu_at_points, dets_mm, act_table, att_table, physics, out
):  # pragma: no cover
    """``out[b]``: STIR's single scatter estimate of the detector pair ``det_pairs[b]``, summed
    over scatter points and normalised as STIR normalises it (see :mod:`.api`)."""
    max_cos, low, high, ref_energy, resolution, eff_511, scatter_volume, sigma_511 = (
        physics[0],
        physics[1],
        physics[2],
        physics[3],
        physics[4],
        physics[5],
        physics[6],
        physics[7],
    )
    for b in prange(det_pairs.shape[0]):
        da, db = det_pairs[b, 0], det_pairs[b, 1]
        az, ay, ax = dets_mm[da, 0], dets_mm[da, 1], dets_mm[da, 2]
        bz, by, bx = dets_mm[db, 0], dets_mm[db, 1], dets_mm[db, 2]
        total = 0.0
        for p in range(points_mm.shape[0]):
            sz, sy, sx = points_mm[p, 0], points_mm[p, 1], points_mm[p, 2]
            cos_theta = -_cos_angle(az - sz, ay - sy, ax - sx, bz - sz, by - sy, bx - sx)
            if max_cos > cos_theta:
                continue
            energy = 511.0 / (2.0 - cos_theta)
            efficiency = _detection_efficiency(energy, low, high, ref_energy, resolution)
            if efficiency == 0:
                continue
            emis_a, emis_b = act_table[p, da], act_table[p, db]
            if emis_a == 0 and emis_b == 0:
                continue
            att_a, att_b = att_table[p, da], att_table[p, db]
            ra2 = (sz - az) ** 2 + (sy - ay) ** 2 + (sx - ax) ** 2
            rb2 = (sz - bz) ** 2 + (sy - by) ** 2 + (sx - bx) ** 2
            power = _total_compton_relative_to_511(energy) - 1
            ratio = (emis_a / rb2 * att_b**power + emis_b / ra2 * att_a**power) * att_a * att_b
            ratio *= mu_at_points[p] * efficiency
            # incidence on each detector: the angle with the direction to the scanner's axis
            cos_a = _cos_angle(sz - az, sy - ay, sx - ax, 0.0, -ay, -ax)
            cos_b = _cos_angle(sz - bz, sy - by, sx - bx, 0.0, -by, -bx)
            total += ratio * cos_a * cos_b * _dif_compton_cross_section_511(cos_theta)
        rab2 = (az - bz) ** 2 + (ay - by) ** 2 + (ax - bx) ** 2
        cos_ab = _cos_angle(bz - az, by - ay, bx - ax, 0.0, -ay, -ax)
        cos_ba = _cos_angle(az - bz, ay - by, ax - bx, 0.0, -by, -bx)
        # STIR's efficiency of the pair for unscattered photons (0.75: its pyramid volume)
        unscattered = 1.0 / (0.75 / 2.0 / math.pi * rab2 / eff_511 / (cos_ab * cos_ba))
        out[b] = total / unscattered * scatter_volume / sigma_511
