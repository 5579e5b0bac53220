"""SIRF's Poisson log-likelihood (``make_Poisson_loglikelihood``), on stirgpu's OSMAPOSL objective.

``PoissonLogLikelihoodWithLinearModelForMeanAndProjData`` is STIR's class of that name as SIRF
drives it: measured data ``y`` and an acquisition model ``S (G x + a) + b``, which SIRF hands to
STIR as the normalisation ``f = 1 / S`` and the additive sinogram ``a + b f``
(``set_STIR_obj_fun_from_acq_model``).  The numbers come from
:class:`stirgpu.recon.PoissonLogLikelihood` (mean ``(G x + a + b f) / f``) and the projector's
fused subset calls, so they are those of ``stirgpu osmaposl`` and of STIR's OSMAPOSL:

* ``get_subset_sensitivity(k)`` = ``B_k(1/f)`` (computed for every subset at ``set_up``);
* ``get_backprojection_of_acquisition_ratio(x, k)`` = ``B_k(y / (G x + a'))`` with STIR's
  ``divide_and_truncate`` (``a'`` the additive sinogram above);
* ``get_subset_gradient(x, k)`` = that minus ``s_k`` minus ``grad penalty / K`` (STIR's
  ``compute_sub_gradient``; STIR back projects ``q - 1/f`` at once, here ``B_k q - s_k``: equal up
  to float32 summation order); ``gradient(x)`` (subset -1) the sum over the subsets;
* ``value(x)`` = ``sum(y log ybar - ybar)`` (STIR's truncation) minus the penalty;
* ``multiply_with_Hessian(x, v, k)`` / ``accumulate_Hessian_times_input`` = STIR's
  ``accumulate_sub_Hessian_times_input`` (:mod:`.hessian`) minus the prior's ``H v / K`` (all
  subsets for k = -1, minus ``H v`` once).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from ..arrays import import_cupy, in_namespace
from ..formats import ProjData
from ..geometry import ImageInfo
from ..recon import PoissonLogLikelihood
from ..recon.sensitivity import Sensitivities
from ..recon.views import Product, Sum
from .acquisition_data import AcquisitionData
from .acquisition_model import AcquisitionModelUsingParallelproj
from .containers import _xp_of
from .errors import InputError, InputTypeError, NotSupported, error, translate_class_errors, translate_errors
from .hessian import likelihood_hessian_times
from .image_data import ImageData
from .priors import Prior

__all__ = ["make_Poisson_loglikelihood", "PoissonLogLikelihoodWithLinearModelForMeanAndProjData"]


def stirgpu_objective(acq_data: AcquisitionData, model: AcquisitionModelUsingParallelproj) -> PoissonLogLikelihood:
    """stirgpu's OSMAPOSL objective for data ``acq_data`` under ``model`` (see the module docstring):
    views of the model's stores, nothing copied."""
    model._require_set_up()
    terms = model._terms()
    f = terms.get("multiplicative")
    a = terms.get("additive")
    b = terms.get("background")
    if b is not None:
        b_normalised = b if f is None else Product(b, f)
        a = b_normalised if a is None else Sum(a, b_normalised)
    return PoissonLogLikelihood(acq_data.proj_data, additive=a, normalisation=f)


@dataclasses.dataclass(frozen=True)
class _SetUp:
    """What ``set_up`` made: stirgpu's objective, the sensitivities, the projector, the geometry."""

    objective: PoissonLogLikelihood
    sensitivities: Sensitivities
    projector: Any
    image_info: ImageInfo


@translate_class_errors
class PoissonLogLikelihoodWithLinearModelForMeanAndProjData:
    """SIRF's (and STIR's) Poisson log-likelihood of projection data (module docstring)."""

    def __init__(self):
        self.name = "PoissonLogLikelihoodWithLinearModelForMeanAndProjData"
        self._data: AcquisitionData | None = None
        self._input_filename = None
        self._model: AcquisitionModelUsingParallelproj | None = None
        self.prior: Prior | None = None
        self._num_subsets = 1
        self._ready: _SetUp | None = None

    # -- settings ------------------------------------------------------------------------------
    def set_input_filename(self, name) -> None:
        """The measured data's file (read at :meth:`set_up`)."""
        self._input_filename, self._ready = name, None

    def set_acquisition_data(self, ad) -> None:
        if not isinstance(ad, AcquisitionData):
            raise InputTypeError(f"set_acquisition_data: expected AcquisitionData, not {type(ad).__name__}")
        self._data, self._ready = ad, None

    def set_acquisition_model(self, am) -> None:
        if not isinstance(am, AcquisitionModelUsingParallelproj):
            raise InputTypeError(f"set_acquisition_model: expected an AcquisitionModel, not {type(am).__name__}")
        self._model, self._ready = am, None

    def set_prior(self, prior) -> None:
        if not isinstance(prior, Prior):
            raise InputTypeError(f"set_prior: expected a Prior, not {type(prior).__name__}")
        self.prior = prior

    def get_prior(self) -> Prior | None:
        return self.prior

    def set_num_subsets(self, n) -> None:
        if int(n) < 1:
            raise InputError(f"number of subsets should be positive, not {n}")
        if int(n) != self._num_subsets:
            self._num_subsets, self._ready = int(n), None

    def get_num_subsets(self) -> int:
        return self._num_subsets

    def set_recompute_sensitivity(self, flag) -> None:
        """Accepted for SIRF scripts: sensitivities are computed at every :meth:`set_up`."""

    # -- set up ------------------------------------------------------------------------------------
    def set_up(self, image) -> None:
        """Set up the model (for the data and ``image``'s geometry, if not already) and compute the
        subset sensitivities."""
        image = _image(image, "set_up")
        if self._data is None and self._input_filename is not None:
            self._data = AcquisitionData(self._input_filename)
        if self._data is None:
            raise error(f"{self.name} requires acquisition data")
        if self._model is None:
            raise error(f"{self.name}: set_acquisition_model first")
        m = self._model
        if m.processor is not None:
            raise NotSupported(
                f"{self.name}: an acquisition model with an image data processor (set_image_data_processor): "
                "stirgpu's objective function projects without it"
            )
        if (
            m._projector is None
            or m.img_templ is None
            or m.pdi != self._data.get_proj_data_info()
            or m.img_templ.image_info != image.image_info
        ):
            m.set_up(self._data, image)
        K, nv = self._num_subsets, m.pdi.get_num_views()
        if K > nv:
            raise InputError(f"number of subsets {K}: must be at most the number of views ({nv})")
        objective = stirgpu_objective(self._data, m)
        projector = m.projector
        objective.set_up(projector, image.image_info)
        sensitivities = Sensitivities.compute(
            K,
            True,
            lambda out, k, n: _result(out, objective.subset_sensitivity(projector, out, k, n)),
            lambda: _device_zeros(projector, image.image_info),
        )
        if self.prior is not None:
            self.prior.set_up(image)
        self._ready = _SetUp(objective, sensitivities, projector, image.image_info)

    def _require_set_up(self) -> _SetUp:
        if self._ready is None:
            raise error("Need to call set_up() for objective function first")
        return self._ready

    @property
    def acquisition_model(self) -> AcquisitionModelUsingParallelproj | None:
        return self._model

    @property
    def projector(self):
        """The acquisition model's :class:`~stirgpu.projectors.ProjectorPair` (after set_up)."""
        return self._require_set_up().projector

    @property
    def sensitivities(self) -> Sensitivities:
        """The subset sensitivities on the projector's device (after set_up)."""
        return self._require_set_up().sensitivities

    def stirgpu_objective(self) -> PoissonLogLikelihood:
        """stirgpu's :class:`~stirgpu.recon.PoissonLogLikelihood` of these data and model (after
        set_up): for :class:`stirgpu.recon.OSEM` and the projectors' fused calls."""
        return self._require_set_up().objective

    def prior_is_zero(self) -> bool:
        return self.prior is None or self.prior.is_zero()

    # -- values ------------------------------------------------------------------------------------
    def _checked(self, image, what: str) -> ImageData:
        image = _image(image, what)
        if image.image_info != self._require_set_up().image_info:
            raise InputError(f"{what}: the image's geometry differs from the one of set_up")
        return image

    def value(self, image) -> float:
        """The log-likelihood minus the penalty at ``image``."""
        image = self._checked(image, "value")
        ready = self._require_set_up()
        ll = ready.objective.log_likelihood(ready.projector, image.array)
        return float(ll) - (0.0 if self.prior is None else self.prior.get_value(image))

    def get_value(self, image) -> float:
        return self.value(image)

    def __call__(self, image) -> float:
        return self.value(image)

    def get_subset_sensitivity(self, subset) -> ImageData:
        """``B_k(1/f)`` of subset ``subset``."""
        ready = self._require_set_up()
        return ImageData.from_array(ready.sensitivities[self._subset(subset)].copy(), ready.image_info)

    def _subset(self, subset) -> int:
        k = int(subset)
        if not 0 <= k < self._num_subsets:
            raise InputError(f"subset {k} out of range: there are {self._num_subsets} subsets")
        return k

    def _ratio_backprojection(self, image: ImageData, k: int):
        ready = self._require_set_up()
        out = _device_zeros(ready.projector, ready.image_info)
        return _result(
            out, ready.objective.gradient_plus_sensitivity(ready.projector, image.array, out, k, self._num_subsets)
        )

    def get_backprojection_of_acquisition_ratio(self, image, subset, out=None) -> ImageData:
        """``B_k(y / (G x + a'))``: STIR's gradient plus sensitivity of subset ``subset``."""
        image = self._checked(image, "get_backprojection_of_acquisition_ratio")
        return _into(out, image, self._ratio_backprojection(image, self._subset(subset)))

    def _subset_gradient(self, image: ImageData, k: int):
        g = self._ratio_backprojection(image, k)
        g -= self._require_set_up().sensitivities[k]
        if self.prior is not None and not self.prior.is_zero():
            g -= in_namespace(_xp_of(g), self.prior.get_gradient(image).array) / np.float32(self._num_subsets)
        return g

    def gradient(self, image, subset=-1, out=None) -> ImageData:
        """The gradient of subset ``subset``'s part, or (-1) of the whole objective function."""
        image = self._checked(image, "gradient")
        if int(subset) >= 0:
            return _into(out, image, self._subset_gradient(image, self._subset(subset)))
        total = self._subset_gradient(image, 0)
        for k in range(1, self._num_subsets):
            total += self._subset_gradient(image, k)
        return _into(out, image, total)

    def get_gradient(self, image, out=None) -> ImageData:
        return self.gradient(image, -1, out)

    def get_subset_gradient(self, image, subset, out=None) -> ImageData:
        return self.gradient(image, subset, out)

    # -- Hessian -----------------------------------------------------------------------------------
    def _hessian_times(self, current_estimate, input_, subset, what: str):
        """``H(x) v`` of subset ``subset`` (-1: all) with the prior's term (:mod:`.hessian`), an
        array where ``x`` lives."""
        x, v = self._checked(current_estimate, what), self._checked(input_, f"{what}: input")
        ready, K = self._require_set_up(), self._num_subsets
        subsets = range(K) if int(subset) < 0 else [self._subset(subset)]
        xp = _xp_of(x.array)
        total = xp.zeros(x.array.shape, dtype=np.float32)
        for k in subsets:
            part = likelihood_hessian_times(ready.objective, ready.projector, x.array, v.array, k, K)
            total -= in_namespace(xp, part)
        if self.prior is not None and not self.prior.is_zero():
            prior_term = in_namespace(xp, self.prior.multiply_with_Hessian(x, v).array)
            total -= prior_term if int(subset) < 0 else prior_term / np.float32(K)
        return total

    def accumulate_Hessian_times_input(self, current_estimate, input_, subset=-1, out=None) -> ImageData:
        """``out += H(current_estimate) input_`` for subset ``subset`` (-1: the whole objective
        function), STIR's ``accumulate_sub_Hessian_times_input``; ``out`` None: a new zero image."""
        values = self._hessian_times(current_estimate, input_, subset, "accumulate_Hessian_times_input")
        target = input_.get_uniform_copy(0.0) if out is None else _image(out, "out")
        input_._check_compatible(target, "out")
        target._write(None, target.array + in_namespace(_xp_of(target.array), values))
        return target

    def multiply_with_Hessian(self, current_estimate, input_, subset=-1, out=None) -> ImageData:
        """``H(current_estimate) input_`` for subset ``subset`` (-1: the whole objective function),
        into ``out`` (overwritten) or a new image."""
        values = self._hessian_times(current_estimate, input_, subset, "multiply_with_Hessian")
        return _into(out, input_, values)


def _device_zeros(projector, info: ImageInfo):
    """A zero image where ``projector`` works (numpy, or cupy on the CUDA backend)."""
    xp = import_cupy() if projector.backend == "cuda" else np
    return xp.zeros(info.shape, dtype=np.float32)


def _image(image, what: str) -> ImageData:
    if not isinstance(image, ImageData):
        raise InputTypeError(f"{what}: expected ImageData, not {type(image).__name__}")
    return image


def _result(out, res):
    return out if res is None else res


def _into(out, like: ImageData, values) -> ImageData:
    """``values`` as an ImageData like ``like`` (where it lives), or written into ``out``."""
    target = like._new_like() if out is None else _image(out, "out")
    like._check_compatible(target, "out")
    target._write(None, values)
    return target


@translate_errors
def make_Poisson_loglikelihood(acq_data=None, likelihood_type=None, acq_model=None):
    """SIRF's ``make_Poisson_loglikelihood``: the Poisson log-likelihood of ``acq_data``
    (``likelihood_type`` None or ``'LinearModelForMean'``), with ``acq_model`` if given.

    Deprecated form (stirgpu 0.1): ``make_Poisson_loglikelihood(acq_data, acq_model)`` with the
    model second returns stirgpu's :class:`~stirgpu.recon.PoissonLogLikelihood` for
    :class:`stirgpu.recon.OSEM`, with a DeprecationWarning."""
    if isinstance(likelihood_type, AcquisitionModelUsingParallelproj):
        warnings.warn(
            "make_Poisson_loglikelihood(acq_data, acq_model) is deprecated: SIRF's signature is "
            "make_Poisson_loglikelihood(acq_data, acq_model=acq_model), which returns SIRF's objective function; "
            "its stirgpu_objective() (after set_up) is what this call returned",
            DeprecationWarning,
            stacklevel=3,
        )
        data = AcquisitionData(acq_data) if isinstance(acq_data, ProjData) else acq_data
        return stirgpu_objective(data, likelihood_type)
    if likelihood_type not in (None, "LinearModelForMean"):
        if likelihood_type == "LinearModelForMeanAndListModeDataWithProjMatrixByBin":
            raise NotSupported("make_Poisson_loglikelihood: list-mode data are not supported by stirgpu")
        raise error(f"Poisson_loglikelihood of type {likelihood_type} is not implemented")
    if acq_data is None:
        raise error("PoissonLogLikelihoodWithLinearModelForMeanAndProjData requires acquisition data")
    obj_fun = PoissonLogLikelihoodWithLinearModelForMeanAndProjData()
    obj_fun.set_acquisition_data(acq_data)
    if acq_model is not None:
        obj_fun.set_acquisition_model(acq_model)
    return obj_fun
