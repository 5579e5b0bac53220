"""SIRF's ``OSSPSReconstructor``: STIR's OSSPS driven step by step from Python.

SIRF's class is its ``IterativeReconstructor`` (the calls of :class:`~.reconstructor.OSMAPOSLReconstructor`:
subsets, subiterations, ``set_up``, ``update``, ``reconstruct``, output) plus
``set_relaxation_parameter``, ``set_relaxation_gamma``, ``set_upper_bound`` and their getters;
output is off until asked for, as in SIRF.  A subiteration is
:meth:`stirgpu.recon.OSSPS.update` (STIR's OSSPS update, ``docs/parameter-files.md``, "OSSPS
files").  ``set_up(image)`` sets up the objective function (sensitivities) and computes the
precomputed denominator; as STIR's OSSPS by default, the image is not made positive.  The
denominator is kept in memory (STIR also writes it as ``<prefix>_precomputed_denominator``); a
prior must be SIRF's ``QuadraticPrior`` (STIR's OSSPS takes priors with a parabolic surrogate).
"""

from __future__ import annotations

import numpy as np

from ..recon import OSSPS
from ..recon.arrays import FLOAT32_MAX
from .errors import InputError, NotSupported, translate_class_errors
from .reconstructor import OSMAPOSLReconstructor

__all__ = ["OSSPSReconstructor"]


@translate_class_errors
class OSSPSReconstructor(OSMAPOSLReconstructor):
    """SIRF's ``OSSPSReconstructor`` (module docstring).  Defaults are STIR's: 1 subset,
    1 subiteration, relaxation parameter 1, relaxation gamma 0.1, no upper bound, no output."""

    def __init__(self, filename=""):
        if filename:
            raise NotSupported(
                "OSSPSReconstructor(parameter file): run the .par with stirgpu.recon.run_ossps "
                "(or 'stirgpu ossps'), or set the reconstructor up with its setters"
            )
        super().__init__()
        self.name = "OSSPS"
        self._relaxation_parameter = 1.0
        self._relaxation_gamma = 0.1
        self._upper_bound = float(FLOAT32_MAX)

    def set_relaxation_parameter(self, value) -> None:
        """STIR's ``relaxation parameter`` (must be positive; checked at set-up)."""
        self._relaxation_parameter, self._osem = float(value), None

    def set_relaxation_gamma(self, value) -> None:
        """STIR's ``relaxation gamma``: subiteration n's step is the relaxation parameter over
        ``1 + gamma * (n // num_subsets)`` (must be >= 0; checked at set-up)."""
        self._relaxation_gamma, self._osem = float(value), None

    def set_upper_bound(self, value) -> None:
        """STIR's ``upper bound``: each update is clipped to ``[0, upper bound]``."""
        self._upper_bound, self._osem = float(value), None

    def get_relaxation_parameter(self) -> float:
        return float(np.float32(self._relaxation_parameter))  # a float parameter in SIRF

    def get_relaxation_gamma(self) -> float:
        return float(np.float32(self._relaxation_gamma))  # a float parameter in SIRF

    def get_upper_bound(self) -> float:
        return self._upper_bound  # a double parameter in SIRF

    def set_maximum_relative_change(self, value) -> None:
        raise NotSupported("OSSPSReconstructor: the maximum relative change is an OSMAPOSL setting")

    def set_minimum_relative_change(self, value) -> None:
        raise NotSupported("OSSPSReconstructor: the minimum relative change is an OSMAPOSL setting")

    def _algorithm(self, obj, image) -> OSSPS:
        if self._relaxation_parameter <= 0:
            raise InputError(f"OSSPS: relaxation parameter should be positive but is {self._relaxation_parameter:g}")
        ossps = OSSPS(
            obj.stirgpu_objective(),
            obj.projector,
            image.image_info,
            num_subsets=self._num_subsets,
            num_subiterations=max(self._num_subiterations, 1),
            relaxation_parameter=self._relaxation_parameter,
            relaxation_gamma=self._relaxation_gamma,
            upper_bound=self._upper_bound,
            prior=None if obj.prior is None else obj.prior.stirgpu_prior,  # set up by the objective function
        )
        ossps.sensitivities = obj.sensitivities  # computed by the objective function's set_up
        ossps.prepare_denominator()
        return ossps

    def _initial_positivity(self, image) -> None:
        """OSSPS's default ``enforce initial positivity condition`` is off: nothing to do."""
