"""Element-wise steps of OSEM on one chunk, with STIR's rules; numpy or cupy.

* :func:`poisson_quotient` -- STIR's ``divide_and_truncate`` quotient and
  ``accumulate_loglikelihood`` (the rules, and the kernels that apply them, are in
  :mod:`stirgpu.kernels.poisson`); this is its projector-level form, with the arrays' namespace
  ``xp`` first, as callers of stirgpu 0.1 wrote it;
* :func:`inverse_factors` -- ``1 / f`` where ``f != 0``, else 0 (the sensitivity's values).
"""

from __future__ import annotations

import numpy as np

from ..arrays import array_module
from ..errors import StirGpuError, renamed_arguments
from ..kernels import poisson as _kernels
from ..kernels.poisson import MAX_QUOTIENT, SMALL_FRACTION

__all__ = ["SMALL_FRACTION", "MAX_QUOTIENT", "poisson_quotient", "inverse_factors"]

#: what a call with the old name of ``background`` is told
BACKGROUND_RENAMED = (
    "the term in measured units, added after the factors (ybar = A x / f + b), is "
    "'background' now; STIR's additive sinogram a (ybar = (A x + a) / f) is background = a / f"
)

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


def inverse_factors(xp, f, out):
    """``out = 1 / f`` where f != 0, else 0 (float32)."""
    ok = f != _F0
    out[...] = xp.where(ok, xp.reciprocal(xp.where(ok, f, _F1)), _F0)
    return out


@renamed_arguments(additive=BACKGROUND_RENAMED)
def poisson_quotient(xp, fwd, y, background=None, multiplicative=None, out=None, loglik=None, parts=None):
    """STIR's OSEM quotient for one chunk: ``out = divide_and_truncate(y, ybar) / f``, by
    :func:`stirgpu.kernels.poisson.poisson_quotient` (see there); ``xp`` is the arrays'
    namespace (numpy or cupy), checked against ``fwd``."""
    if xp is not array_module(fwd):
        raise StirGpuError(f"poisson_quotient: xp is {xp.__name__} but fwd is a {type(fwd).__name__}")
    return _kernels.poisson_quotient(fwd, y, background, multiplicative, out=out, loglik=loglik, parts=parts)
