"""The diagonal of a neighbourhood prior's Hessian (STIR's ``GibbsPenalty::compute_Hessian_diagonal``).

For voxel ``j``: ``beta * sum_d w_d phi''(x_j, x_{j+d}) kappa_j kappa_{j+d}`` over the offsets
``d != 0`` of the weights whose neighbour lies inside the image, ``phi''`` the second derivative
in ``x_j`` of the pair's potential as the Hessian-times-vector kernels use it
(:mod:`stirgpu.kernels.priors.cpu`): 1 for Quadratic, ``2 (2 x_k + eps)^2 / den^3`` for the
Relative Difference potential (``den = x_j + x_k + gamma |x_j - x_k| + eps``; infinite where both
are 0 without epsilon, as STIR), ``sech^2(s (x_j - x_k))`` for Logcosh.  STIR leaves the centre
weight out here.  Computed offset by offset on whole arrays (numpy or cupy, float64 sums),
stored in the image's dtype.
"""

from __future__ import annotations

import numpy as np

from ..errors import StirGpuError
from ..kernels.priors import LOGCOSH, QUADRATIC, RELATIVE_DIFFERENCE

__all__ = ["hessian_diagonal"]


def hessian_diagonal(image, weights: np.ndarray, kind: int, p1: float, p2: float, beta: float, kappa=None):
    """The diagonal described in the module docstring, a new array like ``image``."""
    xp = _module_of(image)
    x = image.astype(np.float64)
    k = None if kappa is None else xp.asarray(kappa).astype(np.float64)
    total = xp.zeros(x.shape, dtype=np.float64)
    centre = [n // 2 for n in weights.shape]
    for idx in np.ndindex(*weights.shape):
        d = [i - c for i, c in zip(idx, centre, strict=True)]
        w = float(weights[idx])
        if not any(d) or w == 0.0:
            continue
        here = tuple(slice(max(0, -o), n - max(0, o)) for o, n in zip(d, x.shape, strict=True))
        there = tuple(slice(max(0, o), n + min(0, o)) for o, n in zip(d, x.shape, strict=True))
        term = w * _second_derivative(xp, kind, x[here], x[there], p1, p2)
        if k is not None:
            term = term * (k[here] * k[there])
        total[here] += term
    return (total * float(beta)).astype(image.dtype)


def _second_derivative(xp, kind: int, xj, xk, p1: float, p2: float):
    if kind == QUADRATIC:
        return xp.ones_like(xj)
    if kind == RELATIVE_DIFFERENCE:  # p1 gamma, p2 epsilon; infinite where STIR's is (both 0, no epsilon)
        defined = (xj > 0.0) | (xk > 0.0) | (p2 > 0.0)
        den = xp.where(defined, xj + xk + p1 * xp.abs(xj - xk) + p2, 1.0)
        return xp.where(defined, 2.0 * (2.0 * xk + p2) ** 2 / den**3, xp.inf)
    if kind == LOGCOSH:  # p1 the scalar
        return 1.0 / xp.cosh(p1 * (xj - xk)) ** 2
    raise StirGpuError(f"hessian_diagonal: unknown potential kind {kind}")


def _module_of(a):
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np
