"""STIR's priors (penalties) for OSMAPOSL and SIRF-style loops.

* :class:`QuadraticPrior`, :class:`RelativeDifferencePrior`, :class:`LogcoshPrior` -- STIR's
  ``Quadratic``, ``Relative Difference Prior`` and ``Logcosh`` with STIR's parameters, defaults
  and numbers (``docs/priors.md``);
* :class:`GibbsQuadraticPenalty`, :class:`GibbsRelativeDifferencePenalty` -- STIR 6.3's
  ``Gibbs Quadratic`` and ``Gibbs Relative Difference`` penalties;
* :class:`FilterRootPrior` -- STIR's ``FilterRootPrior`` with its ``Median`` filter (MRP);
* :class:`PLSPrior` -- STIR's ``PLS`` (Parallel Level Sets with an anatomical image), for SIRF's
  ``PLSPrior`` (not among :data:`PRIORS`: parameter files with it run through the plugin);
* :func:`make_prior` / :data:`PRIORS` -- by STIR's registered name;
* :func:`stir_default_weights` -- STIR's default 3x3x3 (or 1x3x3) neighbourhood weights.

Nothing happens at import: the kernels compile on first use.
"""

from .base import NeighbourhoodPrior
from .filter_root import FilterRootPrior
from .neighbourhood import centred_weights, stir_default_weights
from .pls import PLSPrior
from .stir_priors import (
    PRIORS,
    GibbsQuadraticPenalty,
    GibbsRelativeDifferencePenalty,
    LogcoshPrior,
    QuadraticPrior,
    RelativeDifferencePrior,
    make_prior,
)

__all__ = [
    "NeighbourhoodPrior",
    "QuadraticPrior",
    "RelativeDifferencePrior",
    "LogcoshPrior",
    "GibbsQuadraticPenalty",
    "GibbsRelativeDifferencePenalty",
    "FilterRootPrior",
    "PLSPrior",
    "PRIORS",
    "make_prior",
    "stir_default_weights",
    "centred_weights",
]
