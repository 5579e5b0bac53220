"""STIR's neighbourhood priors (Quadratic, Relative Difference, Logcosh): value, gradient and
Hessian times a vector (:mod:`.api`; :mod:`.cpu`: numba; :mod:`.cuda`: ``priors.cu``).  Importing
it compiles nothing."""

from .api import (
    KINDS,
    LOGCOSH,
    QUADRATIC,
    RELATIVE_DIFFERENCE,
    prior_gradient,
    prior_hessian_times,
    prior_value,
)

__all__ = [
    "QUADRATIC",
    "RELATIVE_DIFFERENCE",
    "LOGCOSH",
    "KINDS",
    "prior_value",
    "prior_gradient",
    "prior_hessian_times",
]
