"""TOF CPU kernels with STIR's numerics: libparallelproj 2.0.7's TOF sinogram Joseph projector
(``joseph3d_tof_sino_fwd`` / ``_back``), float32 operation for operation (numba, no fast-math),
on STIR's float32 LOR endpoints computed in the kernel from the chunk's tables (as
:mod:`stirgpu.kernels.joseph.cpu`).  ``docs/tof.md`` has the rules; in short:

* STIR hands libparallelproj its LORs reversed for TOF (``xend`` as the start): the ray is
  walked from STIR's second endpoint to its first, so TOF bin 0 (STIR's lowest timing position)
  lies at that end;
* each LOR is walked once; at every image plane the Joseph sample ``cf * bilinear`` is spread
  over the TOF bins within ``n_sigmas`` sigmas of the plane's TOF coordinate with Gaussian bin
  integrals ``(erf(x + w/2) - erf(x - w/2)) / 2``, normalised by their sum over that window
  (bins outside the data included, then dropped): the TOF bins of a LOR add up to its non-TOF
  projection wherever the window lies inside the data's TOF range.  A window of more than
  ``MAX_NUM_TOF_WEIGHTS`` (64) bins keeps the 64 around the plane's TOF coordinate, as 2.0.7
  clamps it; the plane's TOF coordinate, like its interpolation coordinates, is ``i * a + b``
  recomputed at every plane;
* the back projection gathers the same weights (the exact adjoint), and skips a LOR whose TOF
  values sum to 0, as libparallelproj does.

TOF tables (``tof``, float32): ``(bin width, sigma, n_sigmas, c0)`` in the kernel's units
(STIR's: mm times ``rescale``), ``c0`` the centre of the data's TOF bin 0 in bin widths from the
LOR's midpoint towards the walk's end, ``-(N - 1) / 2`` for N bins: bin ``j`` (STIR's timing
position ``j + min``) is centred at ``(c0 + j) * width``.  A chunk holds the data's bins
``first .. first + nb - 1``; the TOF coordinate is always counted from the data's bin 0, so any
split of the TOF bins gives the same numbers.  Projection values of one part are
``[tof bin][lor]`` (TOF outermost, STIR's order).  Indices are int64.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..jit import cached_njit
from ..joseph.cpu import _endpoints, _frame_scalars, _interp, _interp_adjoint, _plane_coords, _setup, _strides
from ..joseph.workers import chunk_bin
from .api import MAX_NUM_TOF_WEIGHTS, window_size

__all__ = ["forward_tof", "back_tof", "window_size"]

F32 = np.float32


@cached_njit(inline="always", error_model="numpy")
def _kernel_weight(dist, denom, half_width):
    # libparallelproj's effective_gaussian_tof_kernel (erff from a double erf, rounded)
    x1 = F32(F32(dist + half_width) / denom)
    x2 = F32(F32(dist - half_width) / denom)
    return F32(F32(0.5) * F32(F32(math.erf(x1)) - F32(math.erf(x2))))


@cached_njit(inline="always", error_model="numpy")
def _lround(x):
    """C's ``lroundf``: the nearest integer, halves away from zero (exact in float64 for a
    float32 ``x``)."""
    r = np.floor(abs(np.float64(x)) + 0.5)
    return int(r) if x >= 0 else -int(r)


@cached_njit(inline="always", error_model="numpy")
def _weights(it_f, max_diff, width, denom, half_width, buf):
    """Gaussian bin integrals of the window around ``it_f`` into ``buf``: (it_min, count, the
    divisor of the plane's sample: their sum, 1 where that is not positive).  A window of more
    than MAX_NUM_TOF_WEIGHTS bins is clamped to that many around ``it_f`` (2.0.7).
    ``np.floor`` / ``np.ceil``: LLVM's, one instruction each (numba's ``math.floor`` and
    ``math.ceil`` of a float32 are calls of libm's ``floorf`` and ``ceilf``)."""
    it_min = int(np.floor(F32(it_f - max_diff)))
    it_max = int(np.ceil(F32(it_f + max_diff)))
    n = it_max + 1 - it_min
    if n > MAX_NUM_TOF_WEIGHTS:
        it_min = _lround(it_f) - MAX_NUM_TOF_WEIGHTS // 2
        n = MAX_NUM_TOF_WEIGHTS
    total = F32(0)
    for k in range(n):
        dist = F32(abs(F32(F32(it_f - F32(it_min)) - F32(k))) * width)
        buf[k] = _kernel_weight(dist, denom, half_width)
        total = F32(total + buf[k])
    return it_min, n, total if total > 0 else F32(1)


@cached_njit(error_model="numpy")
def _tof_walk(a, b, di, cf, org, vs, tof):
    """libparallelproj's TOF coefficients for the walk a -> b along principal axis ``di``:
    (at, bt: plane i's TOF coordinate is ``i * at + bt``; max bin distance, width,
    denominator, w/2)."""
    width, sigma, n_sigmas, c0 = tof[0], tof[1], tof[2], tof[3]
    costheta = F32(vs[di] / cf)
    max_diff = F32(F32(n_sigmas * sigma) / width)
    sign = F32(1) if b[di] >= a[di] else F32(-1)
    # the centre of the first bin projected on the principal axis (libparallelproj evaluates it
    # in double: 0.5 * (a + b) - sign * (n/2 - 1/2) * (w cos); -(n/2 - 1/2) is c0)
    origin = F32(
        0.5 * np.float64(F32(a[di] + b[di])) + (np.float64(sign) * np.float64(c0)) * np.float64(F32(width * costheta))
    )
    slope = F32(F32(sign * width) * costheta)
    at = F32(F32(sign * cf) / width)
    bt = F32(F32(org[di] - origin) / slope)
    denom = F32(F32(1.414213562373095) * sigma)
    return at, bt, max_diff, width, denom, F32(F32(0.5) * width)


@cached_njit(inline="always", error_model="numpy")
def _forward_tof_one(s, e, img, org, vs, dims, tof, first, nb, out, idx, n_lors, buf):
    # inlined into the parallel loop, with the frame and the TOF table as tuples of scalars:
    # a function of its own increfs and decrefs each array argument per LOR (as the non-TOF kernels')
    a, b = e, s  # STIR passes xend as libparallelproj's start for TOF
    for t in range(nb):
        out[np.int64(t) * n_lors + idx] = F32(0)
    di, istart, iend, cf, a_u, b_u, a_w, b_w = _setup(a, b, org, vs, dims)
    if istart == -1:
        return
    at, bt, max_diff, width, denom, half = _tof_walk(a, b, di, cf, org, vs, tof)
    sd, su, nu, sw, nw = _strides(di, dims[0], dims[1], dims[2])
    for i in range(istart, iend + 1):
        fu, fw = _plane_coords(i, a_u, b_u, a_w, b_w)
        it_f = F32(F32(F32(i) * at) + bt)
        to_add = F32(cf * _interp(img, np.int64(i) * sd, fu, fw, su, nu, sw, nw))
        it_min, n, total = _weights(it_f, max_diff, width, denom, half, buf)
        to_add = F32(to_add / total)
        lo = it_min - first  # the window's first bin, counted in the chunk's bins
        for k in range(max(0, -lo), min(n, nb - lo)):
            j = np.int64(lo + k) * n_lors + idx
            out[j] = F32(out[j] + F32(to_add * buf[k]))


@cached_njit(inline="always", error_model="numpy")
def _back_tof_one(s, e, values, img, org, vs, dims, tof, first, nb, idx, n_lors, buf):
    # inlined, as _forward_tof_one
    a, b = e, s
    di, istart, iend, cf, a_u, b_u, a_w, b_w = _setup(a, b, org, vs, dims)
    if istart == -1:
        return
    at, bt, max_diff, width, denom, half = _tof_walk(a, b, di, cf, org, vs, tof)
    sd, su, nu, sw, nw = _strides(di, dims[0], dims[1], dims[2])
    for i in range(istart, iend + 1):
        fu, fw = _plane_coords(i, a_u, b_u, a_w, b_w)
        it_f = F32(F32(F32(i) * at) + bt)
        it_min, n, total = _weights(it_f, max_diff, width, denom, half, buf)
        gathered = F32(0)
        lo = it_min - first
        for k in range(max(0, -lo), min(n, nb - lo)):
            gathered = F32(gathered + F32(values[np.int64(lo + k) * n_lors + idx] * buf[k]))
        val = F32(cf * F32(gathered / total))
        _interp_adjoint(img, np.int64(i) * sd, fu, fw, su, nu, sw, nw, val)


@cached_njit(error_model="numpy")
def _tof_scalars(tof):
    """The TOF table as a tuple of scalars (as :func:`stirgpu.kernels.joseph.cpu._frame_scalars`)."""
    return tof[0], tof[1], tof[2], tof[3]


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def forward_tof(tables, tof, first, nb, nbuf, img, dims, org, vs, rescale, out, lo, hi):
    """LORs ``[lo, hi)`` of one part: ``out`` (nb * n_lors,) flat [tof bin][view][axial][tang]
    gets STIR's TOF forward projection of the flat float32 image ``img`` (C order, ``dims``)."""
    nt = tables[0].shape[1]
    na = tables[7].shape[0]
    n_lors = np.int64(tables[0].shape[0]) * na * nt
    org3, vs3, dims3 = _frame_scalars(org, vs, dims)
    tof4 = _tof_scalars(tof)
    for idx in prange(np.int64(lo), np.int64(hi)):
        buf = np.empty(nbuf, F32)
        iv, ia, it = chunk_bin(idx, na, nt)
        sz, sy, sx, ez, ey, ex = _endpoints(tables, iv, ia, it, rescale)
        _forward_tof_one((sz, sy, sx), (ez, ey, ex), img, org3, vs3, dims3, tof4, first, nb, out, idx, n_lors, buf)


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def back_tof(tables, tof, first, nb, nbuf, values, out, extra, dims, org, vs, rescale, lo, hi):
    """Add the TOF back projection of LORs ``[lo, hi)`` of one part (``values`` laid out as
    :func:`forward_tof`'s ``out``) into ``out`` (flat image) with 1 + len(extra) race-free
    workers (worker k > 0 adds into ``extra[k - 1]``)."""
    nt = tables[0].shape[1]
    na = tables[7].shape[0]
    n_lors = np.int64(tables[0].shape[0]) * na * nt
    nk = extra.shape[0] + 1
    org3, vs3, dims3 = _frame_scalars(org, vs, dims)
    tof4 = _tof_scalars(tof)
    for k in prange(nk):
        img = out if k == 0 else extra[k - 1]
        buf = np.empty(nbuf, F32)
        for idx in range(np.int64(lo) + k, np.int64(hi), np.int64(nk)):
            total = F32(0)
            for t in range(nb):
                total = F32(total + values[np.int64(t) * n_lors + idx])
            if total == 0:
                continue
            iv, ia, it = chunk_bin(idx, na, nt)
            sz, sy, sx, ez, ey, ex = _endpoints(tables, iv, ia, it, rescale)
            _back_tof_one((sz, sy, sx), (ez, ey, ex), values, img, org3, vs3, dims3, tof4, first, nb, idx, n_lors, buf)
