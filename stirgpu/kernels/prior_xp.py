"""Array-generic (numpy / cupy) implementation of STIR's neighbourhood priors.

The same operations and numbers as :mod:`.prior_cpu` (whose docstring states the rules),
written with whole-array operations of the arrays' own namespace ``xp``, so that a cupy
image is computed on its GPU and never leaves it.  It is the path for cupy arrays (a fused
CUDA kernel is later work) and, with numpy, the check of this very code against the numba
kernels on a machine without a GPU.

Memory: the image is processed in slabs of whole planes of at most ``slab_voxels`` voxels;
for one slab and one neighbour offset at a time a few float64 temporaries of the slab's size
exist, so the extra memory is bounded by the slab size, not by the image or the
neighbourhood.  Pair terms are float64, as in the numba kernels.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

from .prior_api import QUADRATIC, RELATIVE_DIFFERENCE

__all__ = ["value", "gradient", "hessian_times", "DEFAULT_SLAB_VOXELS"]

#: voxels of one slab (float64 temporaries of this size: 32 MiB each)
DEFAULT_SLAB_VOXELS = 1 << 22


def _namespace(a):
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np


def _quiet(xp):
    """numpy warns on 0/0 and overflow that the formulas then replace (as STIR's branches do)."""
    return np.errstate(all="ignore") if xp is np else contextlib.nullcontext()


def _slabs(shape, slab_voxels: int):
    nz, ny, nx = shape
    step = max(1, int(slab_voxels) // max(1, ny * nx))
    for z0 in range(0, nz, step):
        yield z0, min(nz, z0 + step)


def _offsets(weights: np.ndarray, skip_zero: bool):
    wz, wy, wx = weights.shape
    for a in range(wz):
        for b in range(wy):
            for c in range(wx):
                w = float(weights[a, b, c])
                if skip_zero and w == 0.0:
                    continue
                yield (a - wz // 2, b - wy // 2, c - wx // 2), w


def _pair_region(shape, z0, z1, d):
    """(slices of j inside the slab's output, slices of j in the image, slices of k = j + d), or
    None where no pair of this offset has both voxels inside the image."""
    lo_hi = []
    for (n, lo, hi), di in zip(((shape[0], z0, z1), (shape[1], 0, shape[1]), (shape[2], 0, shape[2])), d, strict=True):
        a, b = max(lo, -di), min(hi, n - di)
        if a >= b:
            return None
        lo_hi.append((a, b, lo))
    out = tuple(slice(a - lo, b - lo) for a, b, lo in lo_hi)
    j = tuple(slice(a, b) for a, b, _ in lo_hi)
    k = tuple(slice(a + di, b + di) for (a, b, _), di in zip(lo_hi, d, strict=True))
    return out, j, k


def _pair_value(xp, kind, xj, xk, p1, p2):
    d = xj - xk
    if kind == QUADRATIC:
        return d * d / 4.0
    if kind == RELATIVE_DIFFERENCE:
        t = 0.5 * d * d / (xj + xk + p1 * xp.abs(d) + p2)
        return xp.where((xj == 0.0) & (xk == 0.0), 0.0, t) if p2 == 0.0 else t
    t = xp.abs(p1 * d)
    lc = xp.where(t < 30.0, xp.log(xp.cosh(t)), t + math.log(0.5))
    return lc / (p1 * p1) / 2.0


def _pair_d10(xp, kind, xj, xk, p1, p2):
    d = xj - xk
    if kind == QUADRATIC:
        return d
    if kind == RELATIVE_DIFFERENCE:
        den = xj + xk + p1 * xp.abs(d) + p2
        t = d * (p1 * xp.abs(d) + xj + 3.0 * xk + 2.0 * p2) / (den * den)
        return xp.where((xj == 0.0) & (xk == 0.0), 0.0, t) if p2 == 0.0 else t
    return xp.tanh(p1 * d) / p1


def _pair_d20_d11(xp, kind, xj, xk, p1, p2):
    if kind == QUADRATIC:
        return 1.0, -1.0
    if kind == RELATIVE_DIFFERENCE:
        den = xj + xk + p1 * xp.abs(xj - xk) + p2
        den3 = den * den * den
        d20 = 2.0 * (2.0 * xk + p2) ** 2 / den3
        d11 = -2.0 * (2.0 * xj + p2) * (2.0 * xk + p2) / den3
        if p2 > 0.0:
            return d20, d11
        defined = (xj > 0.0) | (xk > 0.0)
        return xp.where(defined, d20, math.inf), xp.where(defined, d11, math.inf)
    s = 1.0 / xp.cosh((xj - xk) * p1)
    return s * s, -(s * s)


def _f64(xp, a):
    return a.astype(xp.float64, copy=False)


def value(image, weights, kind: int, p1: float, p2: float, kappa=None, *, slab_voxels: int = DEFAULT_SLAB_VOXELS):
    """As :func:`.prior_cpu.value`."""
    xp = _namespace(image)
    total = xp.zeros((), dtype=xp.float64)
    with _quiet(xp):
        for z0, z1 in _slabs(image.shape, slab_voxels):
            for d, w in _offsets(weights, skip_zero=False):
                r = _pair_region(image.shape, z0, z1, d)
                if r is None:
                    continue
                _, j, k = r
                t = w * _pair_value(xp, kind, _f64(xp, image[j]), _f64(xp, image[k]), p1, p2)
                if kappa is not None:
                    t = t * (_f64(xp, kappa[j]) * _f64(xp, kappa[k]))
                total += xp.sum(t)
    return float(total)


def gradient(
    image, weights, kind: int, p1: float, p2: float, scale: float, out, kappa=None, *, slab_voxels=DEFAULT_SLAB_VOXELS
):
    """As :func:`.prior_cpu.gradient` (``out`` overwritten)."""
    xp = _namespace(image)
    with _quiet(xp):
        for z0, z1 in _slabs(image.shape, slab_voxels):
            acc = xp.zeros((z1 - z0,) + tuple(image.shape[1:]), dtype=xp.float64)
            for d, w in _offsets(weights, skip_zero=False):
                r = _pair_region(image.shape, z0, z1, d)
                if r is None:
                    continue
                o, j, k = r
                t = w * _pair_d10(xp, kind, _f64(xp, image[j]), _f64(xp, image[k]), p1, p2)
                if kappa is not None:
                    t = t * (_f64(xp, kappa[j]) * _f64(xp, kappa[k]))
                acc[o] += t
            out[z0:z1] = (acc * scale).astype(out.dtype, copy=False)
    return out


def hessian_times(
    image,
    vector,
    weights,
    kind: int,
    p1: float,
    p2: float,
    scale: float,
    out,
    kappa=None,
    *,
    slab_voxels=DEFAULT_SLAB_VOXELS,
):
    """As :func:`.prior_cpu.hessian_times` (accumulated into ``out``)."""
    xp = _namespace(image)
    with _quiet(xp):
        for z0, z1 in _slabs(image.shape, slab_voxels):
            acc = xp.zeros((z1 - z0,) + tuple(image.shape[1:]), dtype=xp.float64)
            for d, w in _offsets(weights, skip_zero=True):
                r = _pair_region(image.shape, z0, z1, d)
                if r is None:
                    continue
                o, j, k = r
                d20, d11 = _pair_d20_d11(xp, kind, _f64(xp, image[j]), _f64(xp, image[k]), p1, p2)
                vj = _f64(xp, vector[j])
                t = w * d20 * vj if d == (0, 0, 0) else w * (d20 * vj + d11 * _f64(xp, vector[k]))
                if kappa is not None:
                    t = t * (_f64(xp, kappa[j]) * _f64(xp, kappa[k]))
                acc[o] += t
            out[z0:z1] += (acc * scale).astype(out.dtype, copy=False)
    return out
