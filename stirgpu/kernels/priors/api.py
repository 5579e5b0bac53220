"""Entry points of the prior kernels: validate, then dispatch by where the arrays live.

The maths of STIR's Quadratic, Relative Difference and Logcosh priors over a weighted
neighbourhood (``docs/priors.md``): :func:`prior_value`, :func:`prior_gradient` and
:func:`prior_hessian_times`.  ``kind`` is :data:`QUADRATIC`, :data:`RELATIVE_DIFFERENCE`
(``p1`` = gamma, ``p2`` = epsilon) or :data:`LOGCOSH` (``p1`` = scalar).  ``weights`` is a
host (numpy) array of odd sizes (wz, wy, wx), centred; ``kappa`` (optional) an image like
``image``.  Images are C-ordered (z, y, x), float32 or float64.

numpy arrays go to the numba kernels (:mod:`.cpu`), cupy arrays to the CUDA kernels
(:mod:`.cuda`), so a GPU image stays on its device; each is loaded on first use.
"""

from __future__ import annotations

import numpy as np

from ...arrays import is_cupy
from ...errors import GeometryError, StirGpuError

__all__ = [
    "QUADRATIC",
    "RELATIVE_DIFFERENCE",
    "LOGCOSH",
    "KINDS",
    "prior_value",
    "prior_gradient",
    "prior_hessian_times",
]

QUADRATIC = 0
RELATIVE_DIFFERENCE = 1
LOGCOSH = 2
KINDS = {QUADRATIC: "Quadratic", RELATIVE_DIFFERENCE: "Relative Difference Prior", LOGCOSH: "Logcosh"}


def _is_gpu(a) -> bool:
    return is_cupy(a)


def _check_image(name: str, a, shape=None, gpu=None):
    nd = getattr(a, "ndim", None)
    if nd != 3:
        raise GeometryError(f"{name}: expected a 3-D (z, y, x) array, got {type(a).__name__} with ndim {nd}")
    if str(a.dtype) not in ("float32", "float64"):
        raise GeometryError(f"{name}: expected float32 or float64, got {a.dtype}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise GeometryError(f"{name}: shape {tuple(a.shape)} differs from the image's {tuple(shape)}")
    if gpu is not None and _is_gpu(a) != gpu:
        raise StirGpuError(f"{name}: must live where the image lives ({'GPU' if gpu else 'host'})")
    if not a.flags.c_contiguous:
        raise GeometryError(f"{name}: must be C-contiguous")


def _check_weights(weights) -> np.ndarray:
    w = np.asarray(weights)
    if w.ndim != 3 or any(n % 2 == 0 for n in w.shape) or w.size == 0:
        raise GeometryError(f"weights: expected a 3-D array of odd sizes, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise GeometryError("weights: must be finite")
    return np.ascontiguousarray(w, dtype=np.float32)


def _check(image, weights, kind, kappa, extra=()):
    if kind not in KINDS:
        raise StirGpuError(f"prior kind {kind!r}: expected one of {sorted(KINDS)}")
    _check_image("image", image)
    gpu = _is_gpu(image)
    if kappa is not None:
        _check_image("kappa", kappa, image.shape, gpu)
    for name, a in extra:
        _check_image(name, a, image.shape, gpu)
    return _check_weights(weights), gpu


def _module(gpu: bool):
    if gpu:
        from . import cuda as prior_cuda

        return prior_cuda
    from . import cpu as prior_cpu

    return prior_cpu


def _output(out, image, inputs, zero: bool):
    """``out`` checked, or a new array where the image lives (zero, or left to be overwritten)."""
    if out is None:
        if _is_gpu(image):
            import cupy

            with cupy.cuda.Device(image.device.id):  # on the image's device, not the current one
                return (cupy.zeros if zero else cupy.empty)(image.shape, dtype=image.dtype)
        return np.zeros(image.shape, dtype=image.dtype)
    _check_image("out", out, image.shape, _is_gpu(image))
    if out.dtype != image.dtype:
        raise GeometryError(f"out: dtype {out.dtype} differs from the image's {image.dtype}")
    for name, a in inputs:
        if a is out:  # each output voxel reads its neighbours' inputs: in place would corrupt them
            raise StirGpuError(f"out: must not be the {name} array")
    return out


def prior_value(image, weights, kind: int, p1: float = 0.0, p2: float = 0.0, *, kappa=None) -> float:
    """The prior's value at ``image`` for a penalisation factor of 1 (float64 sum)."""
    w, gpu = _check(image, weights, kind, kappa)
    return _module(gpu).value(image, w, kind, float(p1), float(p2), kappa)


def prior_gradient(image, weights, kind: int, p1: float = 0.0, p2: float = 0.0, *, scale=1.0, out=None, kappa=None):
    """``scale`` times the prior's gradient at ``image``, into ``out`` (overwritten; new if None)."""
    w, gpu = _check(image, weights, kind, kappa)
    out = _output(out, image, (("image", image), ("kappa", kappa)), zero=False)
    return _module(gpu).gradient(image, w, kind, float(p1), float(p2), float(scale), out, kappa)


def prior_hessian_times(
    image, vector, weights, kind: int, p1: float = 0.0, p2: float = 0.0, *, scale=1.0, out=None, kappa=None
):
    """``out += scale * H(image) vector`` (STIR's ``accumulate_Hessian_times_input``; ``out`` new
    and zero if None)."""
    w, gpu = _check(image, weights, kind, kappa, extra=(("vector", vector),))
    out = _output(out, image, (("image", image), ("vector", vector), ("kappa", kappa)), zero=True)
    return _module(gpu).hessian_times(image, vector, w, kind, float(p1), float(p2), float(scale), out, kappa)
