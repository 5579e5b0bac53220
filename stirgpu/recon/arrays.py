"""Image arithmetic of OSMAPOSL, written once for numpy and cupy arrays.

The estimate, the sensitivities and the update image live where the projector
works (numpy on the CPU backend, cupy on a GPU), so that nothing crosses the bus
between subiterations.  cupy is only imported when a cupy array is passed in.

STIR's rules reproduced here (facts from ``OSMAPOSLReconstruction.cxx``,
``numerics/divide.inl`` and ``thresholding.h``):

* :func:`stir_divide` -- STIR's ``divide``: with ``small = max(max(numerator) * small_num, 0)``,
  a voxel where both ``|numerator| <= small`` and ``|denominator| <= small`` becomes 0 (0/0),
  every other voxel is ``numerator / denominator``.  OSMAPOSL without a prior divides the
  update by the sensitivity with ``small_num = 0`` (only exact 0/0 gives 0); 1e-6 is STIR's
  value with a prior;
* :func:`threshold_min_to_small_positive` -- ``enforce initial positivity condition``:
  values below ``(smallest positive value) * 1e-6`` are raised to it; if no value is
  positive, all become ``1e-6``;
* :func:`clip_update` -- from the second subiteration on, the multiplicative update is
  clipped to ``[minimum relative change, maximum relative change]`` (0 and the largest
  float32 by default, which only removes negative or infinite factors);
* :func:`osl_denominator` -- the One-Step-Late denominator of OSMAPOSL with a prior, for its
  two ``MAP model`` values (``update_estimate``, in float32 as STIR): *additive*
  ``clamp(g / K + s, s / 10, 10 s)``, *multiplicative* ``clamp(g + 1, 0.1, 10) s``, with ``g``
  the prior's gradient at the current estimate, ``s`` the subset sensitivity and ``K`` the
  number of subsets (the multiplicative model does not divide ``g`` by ``K``).
"""

from __future__ import annotations

import numpy as np

from ..arrays import array_module, ignoring_float_errors, is_cupy
from ..parfile.osmaposl import FLOAT32_MAX  # STIR's default 'maximum relative change'

__all__ = [
    "array_module",
    "is_gpu_array",
    "to_numpy",
    "stir_divide",
    "threshold_min_to_small_positive",
    "clip_update",
    "osl_denominator",
    "MAP_MODELS",
    "SMALL_NUM",
    "FLOAT32_MAX",
]

#: STIR's ``small_num`` of OSMAPOSL's divisions and positivity threshold
SMALL_NUM = 1e-6
#: OSMAPOSL's ``MAP model`` values
MAP_MODELS = ("additive", "multiplicative")


def is_gpu_array(a) -> bool:
    return is_cupy(a)


def to_numpy(a) -> np.ndarray:
    """A host numpy copy (or ``a`` itself when it is already numpy)."""
    if is_gpu_array(a):
        return a.get()
    return np.asarray(a)


def stir_divide(numerator, denominator, small_num: float = SMALL_NUM):
    """``numerator / denominator`` in place in ``numerator``, with STIR's 0/0 rule."""
    xp = array_module(numerator)
    small = max(float(numerator.max()) * small_num, 0.0) if numerator.size else 0.0
    zero = (xp.abs(numerator) <= small) & (xp.abs(denominator) <= small)
    with ignoring_float_errors(xp, divide="ignore", invalid="ignore"):
        xp.divide(numerator, denominator, out=numerator)
    numerator[zero] = 0
    return numerator


def threshold_min_to_small_positive(image, small_num: float = SMALL_NUM):
    """STIR's ``threshold_min_to_small_positive_value`` in place."""
    xp = array_module(image)
    pos = image[image > 0]
    if pos.size == 0:
        image[...] = small_num
        return image
    floor = image.dtype.type(float(pos.min()) * small_num)
    xp.maximum(image, floor, out=image)
    return image


def clip_update(update, minimum: float = 0.0, maximum: float = FLOAT32_MAX):
    """STIR's ``threshold_upper_lower`` of the multiplicative update, in place."""
    xp = array_module(update)
    xp.clip(update, update.dtype.type(minimum), update.dtype.type(maximum), out=update)
    return update


def osl_denominator(prior_gradient, sensitivity, num_subsets: int, map_model: str):
    """STIR's OSL denominator, computed in place in ``prior_gradient`` (float32, see the module
    docstring) and returned."""
    xp = array_module(prior_gradient)
    f32 = np.float32
    d, s = prior_gradient, sensitivity
    if map_model == "additive":
        d /= f32(num_subsets)
        d += s
        xp.minimum(d, s * f32(10), out=d)
        xp.maximum(d, s / f32(10), out=d)
    elif map_model == "multiplicative":
        d += f32(1)
        xp.clip(d, f32(1) / f32(10), f32(10), out=d)
        d *= s
    else:
        raise ValueError(f"MAP model {map_model!r}: expected one of {MAP_MODELS}")
    return d
