"""CPU kernels (numba) of STIR's neighbourhood priors: value, gradient, Hessian times a vector.

One kernel per operation serves the three potentials STIR registers (``docs/priors.md``
states the formulas): Quadratic, Relative Difference and Logcosh, chosen by ``kind``
(``api.QUADRATIC``, ``RELATIVE_DIFFERENCE``, ``LOGCOSH``).  For voxel ``j`` and
each neighbour ``k = j + d`` with weight ``w[d]`` (a (wz, wy, wx) array, offsets
``d - w.shape // 2``) that lies inside the image -- pairs reaching outside are left out,
as in STIR -- the pair term is multiplied by ``kappa_j kappa_k`` when a kappa image is
given.

Memory: nothing image-sized is allocated; each output voxel is computed from its
neighbourhood in registers.  Loops run over planes in parallel (``prange``) and release
the GIL; every index is int64, so images are limited only by memory.

Precision: pair terms and sums are float64 (STIR sums in double; a few of its pair terms
round to float32 first, a difference of ~1e-7 relative); results are stored in the output's
dtype (float32 or float64).  The value is summed per plane and the planes in order, so it
does not depend on the number of threads.

Nothing compiles at import (``cached_njit`` without signatures).
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..jit import cached_njit
from .api import QUADRATIC, RELATIVE_DIFFERENCE

__all__ = ["value", "gradient", "hessian_times"]

# STIR's LogcoshPrior::logcosh switches to |d| + log(1/2) from |d| = 30 on
_LOGCOSH_LINEAR_FROM = 30.0


@cached_njit(fastmath=False, inline="always")
def _pair_value(kind, xj, xk, p1, p2):
    """One ordered pair's term of the value (before weight, kappa and penalisation factor)."""
    d = xj - xk
    if kind == QUADRATIC:
        return d * d / 4.0
    if kind == RELATIVE_DIFFERENCE:  # p1 = gamma, p2 = epsilon
        if p2 == 0.0 and xj == 0.0 and xk == 0.0:
            return 0.0
        return 0.5 * d * d / (xj + xk + p1 * abs(d) + p2)
    # LOGCOSH, p1 = scalar; STIR halves the whole sum
    t = abs(p1 * d)
    lc = math.log(math.cosh(t)) if t < _LOGCOSH_LINEAR_FROM else t + math.log(0.5)
    return lc / (p1 * p1) / 2.0


@cached_njit(fastmath=False, inline="always")
def _pair_d10(kind, xj, xk, p1, p2):
    """The derivative of the pair's (unhalved) potential with respect to ``xj``."""
    d = xj - xk
    if kind == QUADRATIC:
        return d
    if kind == RELATIVE_DIFFERENCE:
        if p2 == 0.0 and xj == 0.0 and xk == 0.0:
            return 0.0
        den = xj + xk + p1 * abs(d) + p2
        return d * (p1 * abs(d) + xj + 3.0 * xk + 2.0 * p2) / (den * den)
    return math.tanh(p1 * d) / p1


@cached_njit(fastmath=False, inline="always")
def _pair_d20_d11(kind, xj, xk, p1, p2):
    """(second derivative in ``xj``, mixed derivative in ``xj`` and ``xk``) of the pair."""
    if kind == QUADRATIC:
        return 1.0, -1.0
    if kind == RELATIVE_DIFFERENCE:
        if xj > 0.0 or xk > 0.0 or p2 > 0.0:
            den = xj + xk + p1 * abs(xj - xk) + p2
            den3 = den * den * den
            return 2.0 * (2.0 * xk + p2) ** 2 / den3, -2.0 * (2.0 * xj + p2) * (2.0 * xk + p2) / den3
        return math.inf, math.inf  # STIR returns INFINITY for both at xj = xk = 0 without epsilon
    s = 1.0 / math.cosh((xj - xk) * p1)
    return s * s, -s * s


@cached_njit(parallel=True, nogil=True, fastmath=False)
def _value_planes(image, kappa, has_kappa, weights, kind, p1, p2, planes):
    nz, ny, nx = image.shape
    wz, wy, wx = weights.shape
    hz, hy, hx = wz // 2, wy // 2, wx // 2
    for z in prange(nz):
        acc = 0.0
        for y in range(ny):
            for x in range(nx):
                xj = np.float64(image[z, y, x])
                kj = np.float64(kappa[z, y, x]) if has_kappa else 1.0
                for a in range(wz):
                    zk = z + a - hz
                    if zk < 0 or zk >= nz:
                        continue
                    for b in range(wy):
                        yk = y + b - hy
                        if yk < 0 or yk >= ny:
                            continue
                        for c in range(wx):
                            xk_ = x + c - hx
                            if xk_ < 0 or xk_ >= nx:
                                continue
                            t = np.float64(weights[a, b, c]) * _pair_value(
                                kind, xj, np.float64(image[zk, yk, xk_]), p1, p2
                            )
                            if has_kappa:
                                t *= kj * np.float64(kappa[zk, yk, xk_])
                            acc += t
        planes[z] = acc


@cached_njit(parallel=True, nogil=True, fastmath=False)
def _gradient(image, kappa, has_kappa, weights, kind, p1, p2, scale, out):
    nz, ny, nx = image.shape
    wz, wy, wx = weights.shape
    hz, hy, hx = wz // 2, wy // 2, wx // 2
    for z in prange(nz):
        for y in range(ny):
            for x in range(nx):
                xj = np.float64(image[z, y, x])
                kj = np.float64(kappa[z, y, x]) if has_kappa else 1.0
                acc = 0.0
                for a in range(wz):
                    zk = z + a - hz
                    if zk < 0 or zk >= nz:
                        continue
                    for b in range(wy):
                        yk = y + b - hy
                        if yk < 0 or yk >= ny:
                            continue
                        for c in range(wx):
                            xk_ = x + c - hx
                            if xk_ < 0 or xk_ >= nx:
                                continue
                            t = np.float64(weights[a, b, c]) * _pair_d10(
                                kind, xj, np.float64(image[zk, yk, xk_]), p1, p2
                            )
                            if has_kappa:
                                t *= kj * np.float64(kappa[zk, yk, xk_])
                            acc += t
                out[z, y, x] = acc * scale


@cached_njit(parallel=True, nogil=True, fastmath=False)
def _hessian_times(image, vector, kappa, has_kappa, weights, kind, p1, p2, scale, out):
    nz, ny, nx = image.shape
    wz, wy, wx = weights.shape
    hz, hy, hx = wz // 2, wy // 2, wx // 2
    for z in prange(nz):
        for y in range(ny):
            for x in range(nx):
                xj = np.float64(image[z, y, x])
                vj = np.float64(vector[z, y, x])
                kj = np.float64(kappa[z, y, x]) if has_kappa else 1.0
                acc = 0.0
                for a in range(wz):
                    zk = z + a - hz
                    if zk < 0 or zk >= nz:
                        continue
                    for b in range(wy):
                        yk = y + b - hy
                        if yk < 0 or yk >= ny:
                            continue
                        for c in range(wx):
                            xk_ = x + c - hx
                            if xk_ < 0 or xk_ >= nx:
                                continue
                            w = np.float64(weights[a, b, c])
                            if w == 0.0:  # STIR skips zero weights here (not in value or gradient)
                                continue
                            d20, d11 = _pair_d20_d11(kind, xj, np.float64(image[zk, yk, xk_]), p1, p2)
                            if a == hz and b == hy and c == hx:
                                t = w * d20 * vj  # a non-zero centre weight: STIR's diagonal-only term
                            else:
                                t = w * (d20 * vj + d11 * np.float64(vector[zk, yk, xk_]))
                            if has_kappa:
                                t *= kj * np.float64(kappa[zk, yk, xk_])
                            acc += t
                out[z, y, x] += acc * scale


def _kappa_args(kappa, image):
    if kappa is None:
        return np.ones((1, 1, 1), dtype=image.dtype), False
    return kappa, True


def value(image, weights, kind: int, p1: float, p2: float, kappa=None) -> float:
    """The prior's value at ``image`` for a penalisation factor of 1 (float64)."""
    k, has = _kappa_args(kappa, image)
    planes = np.zeros(image.shape[0], dtype=np.float64)
    _value_planes(image, k, has, weights, int(kind), float(p1), float(p2), planes)
    return _ordered_sum(planes)


def _ordered_sum(planes: np.ndarray) -> float:
    total = 0.0
    for v in planes.tolist():  # plane order, independent of the thread count
        total += v
    return total


def gradient(image, weights, kind: int, p1: float, p2: float, scale: float, out, kappa=None):
    """``out = scale * gradient`` (overwritten)."""
    k, has = _kappa_args(kappa, image)
    _gradient(image, k, has, weights, int(kind), float(p1), float(p2), float(scale), out)
    return out


def hessian_times(image, vector, weights, kind: int, p1: float, p2: float, scale: float, out, kappa=None):
    """``out += scale * H(image) vector`` (accumulated, as STIR's ``accumulate_Hessian_times_input``)."""
    k, has = _kappa_args(kappa, image)
    _hessian_times(image, vector, k, has, weights, int(kind), float(p1), float(p2), float(scale), out)
    return out
