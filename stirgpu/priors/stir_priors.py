"""STIR's three neighbourhood priors, with STIR's registered names, parameters and defaults.

=============================  ============================  ====================================
STIR (``prior type :=``)       stirgpu                       parameters (STIR's defaults)
=============================  ============================  ====================================
``Quadratic``                  :class:`QuadraticPrior`       --
``Relative Difference Prior``  :class:`RelativeDifferencePrior`  ``gamma`` (2), ``epsilon`` (0)
``Logcosh``                    :class:`LogcoshPrior`         ``scalar`` (1)
=============================  ============================  ====================================

All take ``penalisation_factor`` (0), ``only_2D`` (False), ``kappa``, ``weights`` and
``gradient_filename_prefix`` (:class:`~.base.NeighbourhoodPrior`).  :func:`make_prior` builds
one from STIR's registered name.
"""

from __future__ import annotations

from ..errors import StirGpuError
from ..kernels.priors import LOGCOSH, QUADRATIC, RELATIVE_DIFFERENCE
from .base import NeighbourhoodPrior, float32_parameter
from .filter_root import FilterRootPrior
from .neighbourhood import curvature_sum, logcosh_surrogate

__all__ = [
    "QuadraticPrior",
    "RelativeDifferencePrior",
    "LogcoshPrior",
    "GibbsQuadraticPenalty",
    "GibbsRelativeDifferencePenalty",
    "FilterRootPrior",
    "PRIORS",
    "make_prior",
]


class QuadraticPrior(NeighbourhoodPrior):
    """STIR's ``QuadraticPrior``: ``phi(x_j, x_k) = (x_j - x_k)^2 / 4`` per ordered pair."""

    registered_name = "Quadratic"
    _kind = QUADRATIC
    #: STIR's ``parabolic_surrogate_curvature_depends_on_argument``: not for this prior (OSSPS
    #: computes the curvature once)
    parabolic_surrogate_curvature_depends_on_argument = False

    def parabolic_surrogate_curvature(self, image):
        """STIR's ``QuadraticPrior::parabolic_surrogate_curvature`` (OSSPS's prior term): at each
        voxel ``beta * sum_d w_d kappa_j kappa_{j+d}`` over the offsets ``d`` whose neighbour is
        inside the image (kappa 1 without a kappa image), float32 summed in STIR's order; an
        array like ``image`` (numpy or cupy)."""
        w = self._ready()
        x = self._array(image)
        return curvature_sum(w, x, self._kappa_like(x), self._beta)


class RelativeDifferencePrior(NeighbourhoodPrior):
    """STIR's ``RelativeDifferencePrior``: ``phi = (x_j - x_k)^2 / (2 (x_j + x_k + gamma |x_j - x_k| +
    epsilon))`` per ordered pair; 0 (and a zero gradient) where ``x_j = x_k = 0`` and ``epsilon = 0``."""

    registered_name = "Relative Difference Prior"
    _kind = RELATIVE_DIFFERENCE

    def __init__(self, penalisation_factor: float = 0.0, *, gamma: float = 2.0, epsilon: float = 0.0, **kw):
        super().__init__(penalisation_factor, **kw)
        self.set_gamma(gamma)
        self.set_epsilon(epsilon)

    def get_gamma(self) -> float:
        return self._gamma

    def set_gamma(self, value: float) -> None:
        g = float32_parameter(value, "gamma value")
        if g < 0:
            raise StirGpuError(f"gamma value {value!r}: must be >= 0 (the Relative Difference Prior's edge parameter)")
        self._gamma = g

    def get_epsilon(self) -> float:
        return self._epsilon

    def set_epsilon(self, value: float) -> None:
        e = float32_parameter(value, "epsilon value")
        if e < 0:
            raise StirGpuError(f"epsilon value {value!r}: must be >= 0 (STIR: 'a small non-negative value')")
        self._epsilon = e

    def _potential(self) -> tuple[float, float]:
        return self._gamma, self._epsilon


class LogcoshPrior(NeighbourhoodPrior):
    """STIR's ``LogcoshPrior``: ``phi = log(cosh(s (x_j - x_k))) / (2 s^2)`` per ordered pair,
    ``s`` the ``scalar``."""

    registered_name = "Logcosh"
    _kind = LOGCOSH
    #: STIR 6.5 says False although the curvature depends on the image: OSSPS computes it once,
    #: at the first subiteration's estimate
    parabolic_surrogate_curvature_depends_on_argument = False

    def parabolic_surrogate_curvature(self, image):
        """STIR's ``LogcoshPrior::parabolic_surrogate_curvature``: at each voxel ``beta * sum_d w_d
        tanh(s t) / (s t)`` with ``t = x_j - x_{j+d}`` (``1 - (s t)^2 / 3`` where ``|s t| < 0.01``)
        over the in-image neighbours, times ``kappa_j kappa_{j+d}`` with a kappa image."""
        w = self._ready()
        x = self._array(image)
        scalar = self._scalar
        return curvature_sum(w, x, self._kappa_like(x), self._beta, lambda t: logcosh_surrogate(t, scalar))

    def __init__(self, penalisation_factor: float = 0.0, *, scalar: float = 1.0, **kw):
        super().__init__(penalisation_factor, **kw)
        self.set_scalar(scalar)

    def get_scalar(self) -> float:
        return self._scalar

    def set_scalar(self, value: float) -> None:
        s = float32_parameter(value, "scalar")
        if s <= 0:
            raise StirGpuError(f"scalar {value!r}: must be > 0 (the Logcosh prior divides by it)")
        self._scalar = s

    def _potential(self) -> tuple[float, float]:
        return self._scalar, 0.0


class GibbsQuadraticPenalty(QuadraticPrior):
    """STIR 6.3's ``GibbsQuadraticPenalty`` (``Gibbs Quadratic``): the potential ``(x_j - x_k)^2 / 4``
    of :class:`QuadraticPrior`, the same value and gradient; STIR parses its ``gradient filename
    prefix`` and writes no gradient files, and neither does stirgpu."""

    registered_name = "Gibbs Quadratic"
    _writes_gradients = False


class GibbsRelativeDifferencePenalty(RelativeDifferencePrior):
    """STIR 6.3's ``GibbsRelativeDifferencePenalty`` (``Gibbs Relative Difference``): the
    potential of :class:`RelativeDifferencePrior` with STIR's defaults gamma 2, epsilon 1e-7.
    STIR's has no rule for two neighbours that are both 0 (0/0 with epsilon 0: NaN gradients),
    so epsilon must be positive; no gradient files (as STIR)."""

    registered_name = "Gibbs Relative Difference"
    _writes_gradients = False

    def __init__(self, penalisation_factor: float = 0.0, *, gamma: float = 2.0, epsilon: float = 1e-7, **kw):
        super().__init__(penalisation_factor, gamma=gamma, epsilon=epsilon, **kw)

    def set_epsilon(self, value: float) -> None:
        if float(value) <= 0:
            raise StirGpuError(
                f"epsilon value {value!r}: must be > 0 for STIR's Gibbs Relative Difference penalty (with 0 it "
                "divides 0 by 0 where two neighbours are 0); 'Relative Difference Prior' takes 0"
            )
        super().set_epsilon(value)


#: STIR's registered names -> classes
PRIORS = {
    cls.registered_name: cls
    for cls in (
        QuadraticPrior,
        RelativeDifferencePrior,
        LogcoshPrior,
        GibbsQuadraticPenalty,
        GibbsRelativeDifferencePenalty,
        FilterRootPrior,
    )
}


def make_prior(registered_name: str, **parameters) -> NeighbourhoodPrior | FilterRootPrior:
    """The prior STIR registers as ``registered_name`` (exact spelling, as in :data:`PRIORS`)."""
    try:
        cls = PRIORS[registered_name]
    except KeyError:
        raise StirGpuError(f"prior {registered_name!r}: stirgpu has {', '.join(map(repr, PRIORS))}") from None
    return cls(**parameters)
