"""SIRF's priors (``QuadraticPrior``, ``LogcoshPrior``, ``RelativeDifferencePrior``, ``PLSPrior``) on stirgpu's own.

Each SIRF prior holds a :mod:`stirgpu.priors` prior (STIR's numbers, parameters and defaults:
penalisation factor 0; RDP gamma 2, epsilon 0; Logcosh scalar 1, as STIR 6.5) and takes SIRF's containers:
``set_up(image)``, ``get_value(image)``, ``get_gradient(image)``, the Hessian products and
``set_kappa(image)`` work on :class:`~.image_data.ImageData` (numpy or cupy: a GPU image stays
there).  The objective function (:mod:`.objective`) subtracts the penalty and its gradient / K,
and the reconstructor hands :attr:`Prior.stirgpu_prior` to :class:`stirgpu.recon.OSEM`, whose
subiteration is STIR's One-Step-Late step (``MAP model := additive``, SIRF's only choice).
"""

from __future__ import annotations

from .. import priors as stirgpu_priors
from .errors import InputTypeError, NotSupported, translate_class_errors
from .image_data import ImageData

__all__ = ["Prior", "QuadraticPrior", "LogcoshPrior", "RelativeDifferencePrior", "PLSPrior"]


def _check_image(image, what: str) -> ImageData:
    if not isinstance(image, ImageData):
        raise InputTypeError(f"{what}: expected ImageData, not {type(image).__name__}")
    return image


@translate_class_errors
class Prior:
    """SIRF's ``Prior``: a penalty ``beta R(x)`` subtracted from the objective function (the base of
    :class:`QuadraticPrior` and :class:`RelativeDifferencePrior`)."""

    def __init__(self, prior: stirgpu_priors.NeighbourhoodPrior):
        self._prior = prior
        self._kappa: ImageData | None = None

    @property
    def stirgpu_prior(self) -> stirgpu_priors.NeighbourhoodPrior:
        """The :mod:`stirgpu.priors` prior doing the work."""
        return self._prior

    def set_penalisation_factor(self, value):
        self._prior.set_penalisation_factor(value)
        return self

    def get_penalisation_factor(self) -> float:
        return self._prior.get_penalisation_factor()

    def is_zero(self) -> bool:
        """STIR's ``prior_is_zero``: a penalisation factor of 0 (the prior does nothing)."""
        return bool(self._prior.is_zero)

    def set_up(self, image) -> None:
        """Prepare for images like ``image`` (STIR's default weights for its voxel sizes)."""
        self._prior.set_up(_check_image(image, "Prior.set_up").image_info)

    def get_value(self, image) -> float:
        """``beta R(image)``."""
        return float(self._prior.get_value(_check_image(image, "Prior.get_value").array))

    def value(self, image) -> float:
        return self.get_value(image)

    def __call__(self, image) -> float:
        return self.get_value(image)

    def get_gradient(self, image, out=None, **kwargs) -> ImageData:
        """``beta grad R(image)``, into ``out`` (an ImageData like ``image``) when given."""
        image = _check_image(image, "Prior.get_gradient")
        target = image._new_like() if out is None else _check_image(out, "Prior.get_gradient: out")
        image._check_compatible(target, "Prior.get_gradient: out")
        self._prior.get_gradient(image.array, out=target.array)
        return target

    def gradient(self, image, out=None, **kwargs) -> ImageData:
        return self.get_gradient(image, out)

    def accumulate_Hessian_times_input(self, current_estimate, input_, out=None) -> ImageData:
        """``out += H(current_estimate) input_`` (a new zero image when ``out`` is None)."""
        x = _check_image(current_estimate, "accumulate_Hessian_times_input")
        v = _check_image(input_, "accumulate_Hessian_times_input: input")
        target = v._new_like() if out is None else _check_image(out, "accumulate_Hessian_times_input: out")
        self._prior.accumulate_Hessian_times_input(x.array, v.array, target.array)
        return target

    def multiply_with_Hessian(self, current_estimate, input_, out=None) -> ImageData:
        """``H(current_estimate) input_``."""
        target = _check_image(input_, "multiply_with_Hessian: input")._new_like() if out is None else out.fill(0.0)
        return self.accumulate_Hessian_times_input(current_estimate, input_, target)

    def set_kappa(self, image) -> None:
        """A spatially varying strength (an image like the reconstructed one; copied)."""
        self._kappa = _check_image(image, "set_kappa").clone()
        self._prior.set_kappa(self._kappa.array)

    def get_kappa(self) -> ImageData:
        if self._kappa is None:
            raise NotSupported("get_kappa: no kappa image has been set")
        return self._kappa.clone()


@translate_class_errors
class QuadraticPrior(Prior):
    """SIRF's ``QuadraticPrior`` (STIR's quadratic Gibbs prior)."""

    def __init__(self):
        super().__init__(stirgpu_priors.QuadraticPrior())


@translate_class_errors
class LogcoshPrior(Prior):
    """SIRF's ``LogcoshPrior`` (STIR's ``LogcoshPrior``: ``log(cosh(s (x_j - x_k))) / (2 s^2)`` per
    pair; the scalar ``s`` is 1 by default, as in STIR)."""

    _logcosh: stirgpu_priors.LogcoshPrior

    def __init__(self):
        self._logcosh = stirgpu_priors.LogcoshPrior()
        super().__init__(self._logcosh)

    def set_scalar(self, v) -> None:
        self._logcosh.set_scalar(v)

    def get_scalar(self) -> float:
        return self._logcosh.get_scalar()


@translate_class_errors
class RelativeDifferencePrior(Prior):
    """SIRF's ``RelativeDifferencePrior`` (STIR's ``RelativeDifferencePrior``)."""

    _rdp: stirgpu_priors.RelativeDifferencePrior

    def __init__(self):
        self._rdp = stirgpu_priors.RelativeDifferencePrior()
        super().__init__(self._rdp)

    def set_gamma(self, v) -> None:
        self._rdp.set_gamma(v)

    def get_gamma(self) -> float:
        return self._rdp.get_gamma()

    def set_epsilon(self, v) -> None:
        self._rdp.set_epsilon(v)

    def get_epsilon(self) -> float:
        return self._rdp.get_epsilon()

    def compute_Hessian_diagonal(self, image) -> ImageData:
        """The diagonal of the prior's Hessian at ``image`` (SIRF's RDP is STIR's
        ``GibbsRelativeDifferencePenalty``, whose ``compute_Hessian_diagonal`` this is)."""
        image = _check_image(image, "compute_Hessian_diagonal")
        return image._new_like().fill(self._prior.compute_Hessian_diagonal(image.array))


@translate_class_errors
class PLSPrior(Prior):
    """SIRF's ``PLSPrior`` (STIR's Parallel Level Sets prior, :class:`stirgpu.priors.PLSPrior`): an
    anatomical image (``set_anatomical_image``) before ``set_up``; alpha and eta 1 by default."""

    _pls: stirgpu_priors.PLSPrior

    def __init__(self):
        self._pls = stirgpu_priors.PLSPrior()
        self._anatomical: ImageData | None = None
        super().__init__(self._pls)  # type: ignore[arg-type]  # (the same methods, another class)

    def set_only_2D(self, tf) -> None:
        self._pls.set_only_2D(bool(tf))

    def get_only_2D(self) -> bool:
        return self._pls.get_only_2D()

    def set_alpha(self, v) -> None:
        self._pls.set_alpha(v)

    def get_alpha(self) -> float:
        return self._pls.get_alpha()

    def set_eta(self, v) -> None:
        self._pls.set_eta(v)

    def get_eta(self) -> float:
        return self._pls.get_eta()

    def set_anatomical_image(self, image) -> None:
        """The anatomical image (like the reconstructed ones; copied)."""
        self._anatomical = _check_image(image, "set_anatomical_image").clone()
        self._pls.set_anatomical_image(self._anatomical.array)

    def get_anatomical_image(self) -> ImageData:
        if self._anatomical is None:
            raise NotSupported("get_anatomical_image: no anatomical image has been set")
        return self._anatomical.clone()

    def set_anatomical_filename(self, filename) -> None:
        self.set_anatomical_image(ImageData(filename))

    def set_kappa_filename(self, filename) -> None:
        self.set_kappa(ImageData(filename))

    def get_anatomical_grad(self, direction, out=None) -> ImageData:
        """The anatomical image's forward difference along ``direction`` (0 z, 1 y, 2 x; after set_up)."""
        d = self._pls.anatomical_parts()[0][int(direction)]
        if d is None:
            raise NotSupported("get_anatomical_grad(0): only_2D has no z differences")
        return self._anatomical_like(d, out)

    def get_norm(self) -> ImageData:
        """``sqrt(|grad anatomical|^2 + eta^2)`` (after set_up)."""
        return self._anatomical_like(self._pls.anatomical_parts()[1], None)

    def _anatomical_like(self, values, out) -> ImageData:
        if self._anatomical is None:
            raise NotSupported("PLSPrior: no anatomical image has been set")
        target = self._anatomical._new_like() if out is None else _check_image(out, "out")
        return target.fill(values)
