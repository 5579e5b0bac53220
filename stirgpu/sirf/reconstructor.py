"""SIRF's ``OSMAPOSLReconstructor``: STIR's OSMAPOSL driven step by step from Python.

A subiteration is :meth:`stirgpu.recon.OSEM.update`: the subset's fused forward-ratio-back
projection, STIR's division by the subset sensitivity -- with a prior (a non-zero penalisation
factor) STIR's One-Step-Late denominator, ``MAP model := additive`` (SIRF's only choice) -- and,
from subiteration 2 on, STIR's clipping of the multiplicative update.

SIRF's sequence (``sirf/STIR.py``, ``cstir.cpp``): ``set_up(image)`` sets up the objective
function (sensitivities), applies STIR's initial positivity threshold to ``image`` in place and
sets the subiteration number to 1; ``update(image)`` applies one subiteration to ``image`` (in
place) with subset ``(n - 1) % K`` and then saves it if asked to; ``reconstruct(image)`` runs
subiterations 1 .. ``num_subiterations`` on ``image`` in place.  Output is off until
``set_save_interval`` (with a prefix): estimates go to ``prefix_N.hv`` after multiples of the
interval and the last subiteration, as STIR's.  Progress is logged on the ``stirgpu.sirf`` logger
(INFO; :class:`~.messages.MessageRedirector` routes it), never printed.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from ..formats import VoxelsOnCartesianGrid, write_image
from ..recon import OSEM
from ..recon.arrays import FLOAT32_MAX, threshold_min_to_small_positive
from ..recon.naming import estimate_filename
from .containers import _xp_of
from .errors import InputError, InputTypeError, NotSupported, error, translate_class_errors
from .image_data import ImageData
from .objective import PoissonLogLikelihoodWithLinearModelForMeanAndProjData

__all__ = ["OSMAPOSLReconstructor"]

_LOG = logging.getLogger("stirgpu.sirf")


@translate_class_errors
class OSMAPOSLReconstructor:
    """SIRF's ``OSMAPOSLReconstructor`` (module docstring).  Defaults are STIR's: 1 subset,
    1 subiteration, no output."""

    def __init__(self, filename=""):
        if filename:
            raise NotSupported(
                "OSMAPOSLReconstructor(parameter file): run the .par with stirgpu.recon.run_osmaposl "
                "(or 'stirgpu osmaposl'), or set the reconstructor up with its setters"
            )
        self.name = "OSMAPOSL"
        self.image: ImageData | None = None
        self.subset = 0
        self._objective: PoissonLogLikelihoodWithLinearModelForMeanAndProjData | None = None
        self._input = None
        self._num_subsets = 1
        self._num_subiterations = 1
        self._save_interval = 1
        self._output = False
        self._prefix = ""
        self._min_change = 0.0
        self._max_change = FLOAT32_MAX
        self._osem: OSEM | None = None
        self._subiteration = 1

    # -- settings -----------------------------------------------------------------------------------
    def set_objective_function(self, obj) -> None:
        if not isinstance(obj, PoissonLogLikelihoodWithLinearModelForMeanAndProjData):
            raise InputTypeError(
                "set_objective_function: OSMAPOSL works with a PoissonLogLikelihoodWithLinearModelForMeanAndProjData "
                f"(make_Poisson_loglikelihood), not {type(obj).__name__}"
            )
        self._objective, self._osem = obj, None

    def get_objective_function(self) -> PoissonLogLikelihoodWithLinearModelForMeanAndProjData:
        if self._objective is None:
            raise error("You have to specify an objective function")
        return self._objective

    def set_input(self, input_data) -> None:
        """The measured data (given to the objective function at :meth:`set_up`)."""
        self._input, self._osem = input_data, None

    def set_num_subsets(self, n) -> None:
        self._num_subsets, self._osem = int(n), None

    def get_num_subsets(self) -> int:
        return self._num_subsets

    def set_num_subiterations(self, n) -> None:
        self._num_subiterations = int(n)

    def get_num_subiterations(self) -> int:
        return self._num_subiterations

    def get_subiteration_num(self) -> int:
        """The number of the next subiteration (1 after set_up)."""
        return self._subiteration

    def set_save_interval(self, n) -> None:
        """Save estimates every ``n`` subiterations (and after the last); ``n <= 0`` turns output off."""
        self._save_interval = int(n)
        self._output = self._save_interval > 0

    def set_output_filename_prefix(self, prefix) -> None:
        self._prefix = os.fspath(prefix)

    def disable_output(self) -> None:
        self._output = False

    def enable_output(self) -> None:
        self._output = True

    def set_maximum_relative_change(self, value) -> None:
        self._max_change = float(value)

    def set_minimum_relative_change(self, value) -> None:
        self._min_change = float(value)

    # -- set up ------------------------------------------------------------------------------------------
    def set_up(self, image) -> None:
        """Set up the objective function for ``image``'s geometry (sensitivities) and apply STIR's
        initial positivity threshold to ``image`` (in place)."""
        image = _image(image, "set_up")
        obj = self.get_objective_function()
        if self._num_subsets < 1:
            raise InputError(f"number of subsets should be positive, not {self._num_subsets}")
        if self._num_subiterations < 1:
            raise InputError("Range error in number of subiterations (has to be >= 1)")
        if self._output:
            if not self._prefix:
                raise InputError("output is on (set_save_interval) but there is no set_output_filename_prefix")
            if self._save_interval > self._num_subiterations:
                raise InputError(
                    f"Range error in iteration save interval {self._save_interval} (has to be between 1 and "
                    f"the number of subiterations, {self._num_subiterations})"
                )
        if self._input is not None:
            obj.set_acquisition_data(self._input)
        obj.set_num_subsets(self._num_subsets)
        obj.set_up(image)
        self._osem = self._algorithm(obj, image)
        self._initial_positivity(image)
        self._subiteration = 1
        _LOG.info("%s set up: %d subsets, %d subiterations", self.name, self._num_subsets, self._num_subiterations)

    def _algorithm(self, obj, image) -> OSEM:
        """The subiterations' engine for the set-up objective function ``obj``."""
        osem = OSEM(
            obj.stirgpu_objective(),
            obj.projector,
            image.image_info,
            num_subsets=self._num_subsets,
            num_subiterations=max(self._num_subiterations, 1),
            minimum_relative_change=self._min_change,
            maximum_relative_change=self._max_change,
            enforce_initial_positivity=False,
            prior=None if obj.prior is None else obj.prior.stirgpu_prior,  # set up by the objective function
        )
        osem.sensitivities = obj.sensitivities  # computed by the objective function's set_up
        return osem

    def _initial_positivity(self, image) -> None:
        """OSMAPOSL's default ``enforce initial positivity condition`` (on), in place."""
        threshold_min_to_small_positive(image.array)

    def _require_set_up(self) -> OSEM:
        if self._osem is None:
            raise error("OSMAPOSLReconstructor: call set_up(image) first")
        return self._osem

    # -- subiterations -----------------------------------------------------------------------------------
    def _on_device(self, image: ImageData):
        """The array the subiterations update: the image's own where it is on the projector's device,
        else a copy there (written back by :meth:`_finish`)."""
        arr, osem = image.array, self._require_set_up()
        on_gpu = osem.projector.backend == "cuda"
        if (_xp_of(arr) is not np) == on_gpu:
            return arr
        return osem.to_device(arr) if on_gpu else arr.get()

    @staticmethod
    def _finish(image: ImageData, work) -> None:
        if work is not image.array:
            image._write(None, work)

    def _subiterate(self, image: ImageData, work) -> None:
        n, osem = self._subiteration, self._require_set_up()
        osem.update(work, n)
        if self._output and (n % self._save_interval == 0 or n == self._num_subiterations):
            path = estimate_filename(self._prefix, n)
            self._finish(image, work)
            with osem.comm.together(f"writing {path}"):
                if osem.comm.is_root:  # (under MPI every rank holds the same estimate; rank 0 writes it)
                    write_image(path, VoxelsOnCartesianGrid(image.image_info, fill=image.as_array()), overwrite=True)
                    _LOG.info("%s: wrote %s", self.name, path)
        _LOG.info("%s subiteration #%d completed (subset %d)", self.name, n, osem.subset_num(n))
        self._subiteration += 1

    def update(self, image) -> ImageData:
        """One subiteration applied to ``image`` (in place); returns ``image``."""
        self.image = _image(image, "update")
        self.update_current_estimate()
        return image

    def update_current_estimate(self) -> None:
        """One subiteration of the current estimate (in place)."""
        self._require_set_up()
        if self.image is None:
            raise error("current estimate not set")
        work = self._on_device(self.image)
        self._subiterate(self.image, work)
        self._finish(self.image, work)

    def reconstruct(self, image) -> None:
        """Subiterations 1 .. num_subiterations on ``image``, in place (it stays where it is: a GPU
        image is updated there, a host image once at the end and at each save)."""
        self._require_set_up().num_subiterations = self._num_subiterations
        image = _image(image, "reconstruct")
        work = self._on_device(image)
        self._subiteration = 1
        try:
            while self._subiteration <= self._num_subiterations:
                self._subiterate(image, work)
        finally:
            self._finish(image, work)
        self.image = image

    def process(self) -> None:
        """:meth:`reconstruct` of the current estimate."""
        if self.image is None:
            raise error("current estimate not set.")
        self.reconstruct(self.image)

    # -- estimates ---------------------------------------------------------------------------------------
    def set_current_estimate(self, image) -> None:
        """The estimate further subiterations update (a copy of ``image``)."""
        self.image = _image(image, "set_current_estimate").clone()

    def get_current_estimate(self) -> ImageData:
        if self.image is None:
            raise error("current estimate not set.")
        return self.image.clone()

    def get_output(self) -> ImageData:
        if self.image is None:
            raise error("current estimate not set. Did you run a reconstruction already?")
        return self.image.clone()

    def set_current_subset_num(self, subset) -> None:
        self.subset = int(subset)

    def get_subset_sensitivity(self) -> ImageData:
        return self.get_objective_function().get_subset_sensitivity(self.subset)


def _image(image, what: str) -> ImageData:
    if not isinstance(image, ImageData):
        raise InputTypeError(f"{what}: expected ImageData, not {type(image).__name__}")
    return image
