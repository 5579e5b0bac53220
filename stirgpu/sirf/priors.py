"""SIRF's priors (``QuadraticPrior``, ``RelativeDifferencePrior``): their settings, and the one
place where they will be connected to stirgpu's own priors.

stirgpu has no prior implementation yet (they are being added on its ``priors`` branch).  Until
then these classes hold SIRF's settings with STIR's defaults (penalisation factor 0; RDP gamma 2,
epsilon 1e-7) and do what STIR does with a zero penalisation factor (value 0, gradient 0, a
reconstruction without penalty: STIR's ``prior_is_zero``).  With any other factor, every use --
value, gradient, Hessian, an OSL reconstruction -- raises :class:`PriorNotAvailable`, naming the
prior and what is missing.

To connect stirgpu's priors, change :func:`_implementation` only: it returns the object that
computes ``value(array)`` and ``gradient(array)`` for a prior's settings (numpy or cupy arrays,
(z, y, x)); everything else here, in :mod:`.objective` and :mod:`.reconstructor` goes through it.
"""

from __future__ import annotations

import numpy as np

from .errors import InputTypeError, NotSupported, translate_class_errors
from .image_data import ImageData

__all__ = ["Prior", "QuadraticPrior", "RelativeDifferencePrior", "PriorNotAvailable", "missing_implementation"]


class PriorNotAvailable(NotSupported):
    """A prior with a non-zero penalisation factor was used, and stirgpu has no implementation of it."""


def missing_implementation(prior: Prior) -> str | None:
    """Why ``prior`` cannot be computed with its current settings, or None when it can."""
    if prior.get_penalisation_factor() == 0:
        return None
    try:
        _implementation(prior)
    except PriorNotAvailable as exc:
        return str(exc)
    return None


def _implementation(prior: Prior):
    """The computation of ``prior`` (see the module docstring).  The one hook for stirgpu's priors."""
    raise PriorNotAvailable(
        f"{type(prior).__name__} with penalisation factor {prior.get_penalisation_factor():g}: stirgpu has no "
        "implementation of this prior yet (priors are being added to stirgpu; until then only a penalisation "
        "factor of 0 -- OSEM -- can be reconstructed); missing: its value and gradient"
    )


def _check_image(image, what: str) -> ImageData:
    if not isinstance(image, ImageData):
        raise InputTypeError(f"{what}: expected ImageData, not {type(image).__name__}")
    return image


@translate_class_errors
class Prior:
    """SIRF's ``Prior``: a penalty ``beta R(x)`` subtracted from the objective function."""

    def __init__(self):
        self._penalisation_factor = 0.0  # STIR's default
        self._image_info = None

    def set_penalisation_factor(self, value):
        self._penalisation_factor = float(value)
        return self

    def get_penalisation_factor(self) -> float:
        return self._penalisation_factor

    def set_up(self, image) -> None:
        self._image_info = _check_image(image, "Prior.set_up").image_info

    def is_zero(self) -> bool:
        """STIR's ``prior_is_zero``: a penalisation factor of 0 (the prior does nothing)."""
        return self._penalisation_factor == 0

    def get_value(self, image) -> float:
        """``beta R(image)``."""
        image = _check_image(image, "Prior.get_value")
        if self.is_zero():
            return 0.0
        return float(_implementation(self).value(image.array))

    def value(self, image) -> float:
        return self.get_value(image)

    def __call__(self, image) -> float:
        return self.get_value(image)

    def get_gradient(self, image, out=None, **kwargs) -> ImageData:
        """``beta grad R(image)`` (into ``out`` when given)."""
        image = _check_image(image, "Prior.get_gradient")
        target = image.get_uniform_copy(0.0) if out is None else _check_image(out, "Prior.get_gradient: out")
        if self.is_zero():
            target.fill(0.0)
        else:
            target.fill(_implementation(self).gradient(image.array))
        return target

    def gradient(self, image, out=None, **kwargs) -> ImageData:
        return self.get_gradient(image, out)

    def accumulate_Hessian_times_input(self, current_estimate, input_, out=None):
        target = input_.get_uniform_copy(0.0) if out is None else out
        if not self.is_zero():
            target += _implementation(self).hessian_times(current_estimate.array, input_.array)
        return target

    def multiply_with_Hessian(self, current_estimate, input_, out=None):
        target = input_.get_uniform_copy(0.0) if out is None else out.fill(0.0)
        return self.accumulate_Hessian_times_input(current_estimate, input_, target)


class _KappaPrior(Prior):
    def __init__(self):
        super().__init__()
        self._kappa = None

    def set_kappa(self, image) -> None:
        """A spatially varying strength (an image like the reconstructed one)."""
        self._kappa = _check_image(image, "set_kappa").clone()

    def get_kappa(self) -> ImageData:
        if self._kappa is None:
            raise NotSupported("get_kappa: no kappa image has been set")
        return self._kappa.clone()


@translate_class_errors
class QuadraticPrior(_KappaPrior):
    """SIRF's ``QuadraticPrior`` (STIR's quadratic Gibbs prior)."""


@translate_class_errors
class RelativeDifferencePrior(_KappaPrior):
    """SIRF's ``RelativeDifferencePrior`` (STIR's ``GibbsRelativeDifferencePenalty``)."""

    def __init__(self):
        super().__init__()
        self._gamma = np.float32(2.0)
        self._epsilon = np.float32(1e-7)

    def set_gamma(self, v) -> None:
        self._gamma = np.float32(v)

    def get_gamma(self) -> float:
        return float(self._gamma)

    def set_epsilon(self, v) -> None:
        self._epsilon = np.float32(v)

    def get_epsilon(self) -> float:
        return float(self._epsilon)

    def compute_Hessian_diagonal(self, image) -> ImageData:
        image = _check_image(image, "compute_Hessian_diagonal")
        if self.is_zero():
            return image.get_uniform_copy(0.0)
        return image.get_uniform_copy(0.0).fill(_implementation(self).hessian_diagonal(image.array))
