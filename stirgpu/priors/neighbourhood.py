"""The neighbourhood weights of STIR's priors.

* :func:`stir_default_weights` -- what STIR's ``compute_weights`` fills in when no weights are
  given: a 3x3x3 neighbourhood (1x3x3 with ``only 2D``), weight ``vx / |d|`` for the offset
  ``d`` in mm (``vx`` the x voxel size, so the in-plane x neighbours weigh 1 whatever the
  voxel size), 0 at the centre, all in float32 arithmetic as STIR (bit for bit).
* :func:`centred_weights` -- weights as a user gives them (``weights := {{{...}}}`` or
  ``set_weights``): STIR puts index 0 of each axis at ``-(n // 2)``, so an even size ``n``
  reaches one voxel less far forward than back; this appends that missing zero, giving the odd,
  centred array the kernels take.
"""

from __future__ import annotations

import numpy as np

from ..errors import GeometryError

__all__ = ["stir_default_weights", "centred_weights", "curvature_sum", "logcosh_surrogate"]


def stir_default_weights(voxel_size, only_2d: bool = False) -> np.ndarray:
    """STIR's default weights for voxel sizes ``(vz, vy, vx)`` mm: shape (3, 3, 3), or (1, 3, 3)
    with ``only_2d``; float32."""
    vz, vy, vx = (np.float32(v) for v in voxel_size)
    dzs = (0,) if only_2d else (-1, 0, 1)
    w = np.zeros((len(dzs), 3, 3), dtype=np.float32)
    for a, dz in enumerate(dzs):
        for b, dy in enumerate((-1, 0, 1)):
            for c, dx in enumerate((-1, 0, 1)):
                if dz == dy == dx == 0:
                    continue
                # float32 throughout, as STIR's float CartesianCoordinate3D arithmetic
                sq = (np.float32(dx) * vx) ** 2 + (np.float32(dy) * vy) ** 2 + (np.float32(dz) * vz) ** 2
                w[a, b, c] = vx / np.sqrt(np.float32(sq))
    return w


def centred_weights(weights) -> np.ndarray:
    """User weights (a regular nested sequence or array, (z, y, x)) as an odd-sized centred float32
    array (STIR's index convention, see the module docstring)."""
    try:
        w = np.asarray(weights, dtype=np.float32)
    except (ValueError, TypeError):
        raise GeometryError("weights: expected a regular 3-D array of numbers (every row of the same length)") from None
    if w.ndim != 3 or w.size == 0:
        raise GeometryError(f"weights: expected a non-empty 3-D (z, y, x) array, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise GeometryError("weights: every weight must be a finite number")
    pad = [(0, 1 - n % 2) for n in w.shape]
    return np.ascontiguousarray(np.pad(w, pad))


def curvature_sum(weights: np.ndarray, image, kappa, beta: float, surrogate=None):
    """``beta * sum_d w_d s(x_j - x_{j+d}) kappa_j kappa_{j+d}`` for every voxel ``j`` of
    ``image``, over the offsets ``d`` of the centred ``weights`` whose neighbour ``j + d`` is
    inside the image (``kappa`` None: 1; ``surrogate`` None: ``s = 1``, else ``s(difference)``
    on float32 arrays), accumulated in float32 offset by offset in (z, y, x) order, as STIR's
    ``parabolic_surrogate_curvature`` (Quadratic, Logcosh); an array of ``image``'s module."""
    xp = _module_of(image)
    f32 = np.float32
    shape = image.shape
    total = xp.zeros(shape, dtype=f32)
    centre = [n // 2 for n in weights.shape]
    for idx in np.ndindex(*weights.shape):
        d = [i - c for i, c in zip(idx, centre, strict=True)]
        inner = tuple(slice(max(0, -o), n - max(0, o)) for o, n in zip(d, shape, strict=True))
        shifted = tuple(slice(max(0, o), n + min(0, o)) for o, n in zip(d, shape, strict=True))
        term = f32(weights[idx])
        if surrogate is not None:
            term = term * surrogate(image[inner] - image[shifted])
        if kappa is not None:
            term = term * (kappa[inner] * kappa[shifted])
        total[inner] += term
    return total * f32(beta)


def logcosh_surrogate(difference, scalar: float):
    """STIR's ``LogcoshPrior::surrogate`` of float32 differences ``t``: ``tanh(s t) / (s t)``,
    ``1 - (s t)^2 / 3`` where ``|s t| < 0.01`` (no division by 0)."""
    xp = _module_of(difference)
    f32 = np.float32
    t = difference * f32(scalar)
    small = xp.abs(t) < f32(0.01)
    safe = xp.where(small, f32(1), t)
    return xp.where(small, f32(1) - t * t / f32(3), xp.tanh(safe) / safe).astype(f32)


def _module_of(a):
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return np
