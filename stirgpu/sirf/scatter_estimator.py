"""SIRF's ``ScatterEstimator``: STIR's ``ScatterEstimation`` loop (reconstruct, simulate the
single scatter, upsample and fit it to the tails, reconstruct again), with SIRF's defaults.

What runs, as STIR runs it (``ScatterEstimation::set_up`` and ``process_data``, 2D, iterative):

* the prompts, randoms and attenuation correction factors rebinned to one segment by STIR's SSRB
  (summed; the factors averaged); the normalisation in 2D is ``1 / SSRB(1 / f)`` of the 3D
  normalisation factors ``f`` (``1 / max(., 1e-20)``);
* the tail mask: the attenuation image smoothed by STIR's Gaussian (FWHM 15, 20, 20 mm in z, y, x),
  1 where at least 0.003, forward projected onto the 2D data, plus 1, then
  :func:`stirgpu.scatter.tail_mask_from_acfs` (1.1, margin 4);
* the activity image: STIR's default image of the 2D data, ones, reconstructed first by OSEM
  (SIRF's: 7 subsets, 8 subiterations, a 15 mm Gaussian post-filter) with the background
  (randoms) as additive term and ``norm x ACF`` as normalisation;
* each of the ``num_iterations`` iterations (STIR's default 5): at iteration 2 the activity is the
  mean of the current and the first image; the single scatter simulated on STIR's downsampled 2D
  template (:mod:`stirgpu.scatter`), upsampled and fitted to the prompts less randoms over the
  mask (:func:`stirgpu.scatter.upsample_and_fit`: scale factors in [0.05, 100], half filter
  width 3, the 2D normalisation undone); the 3D estimate (thresholded at 0, the 2D normalisation
  applied, inverse SSRB, the 3D normalisation undone) after the last iteration, and written as
  ``prefix_<n>.hs`` after every iteration where an output prefix is set; then OSEM again from
  the current image with the scaled scatter plus randoms as additive term.

What differs from SIRF (docs/scatter.md): the projector is stirgpu's (STIR's Parallelproj pair)
for the reconstructions and the mask, where SIRF's default is STIR's ray-tracing matrix; STIR's
last reconstruction, after the last estimate, is not run (it changes no output); scatter points
are placed as :class:`~.SingleScatterSimulator` places them (``set_randomly_place_scatter_points``),
once per estimation as in STIR; without ``set_asm`` the efficiencies are 1 (STIR's
``estimate_scatter`` without a normalisation, and SIRF's estimator with it, end in a segmentation
fault: ``ScatterEstimation`` leaves its combined normalisation unset).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ..formats import ProjDataInMemory, VoxelsOnCartesianGrid
from ..scatter import (
    FitSettings,
    ScatterSettings,
    SingleScatterSimulation,
    energy_model_from_header,
    inverse_ssrb,
    tail_mask_from_acfs,
    upsample_and_fit,
)
from .acquisition_data import AcquisitionData
from .acquisition_model import AcquisitionModelUsingParallelproj
from .errors import InputTypeError, error, translate_class_errors
from .image_data import ImageData, _host
from .objective import make_Poisson_loglikelihood
from .processors import SeparableGaussianImageFilter
from .reconstructor import OSMAPOSLReconstructor
from .sensitivity import AcquisitionSensitivityModel

__all__ = ["ScatterEstimator"]

_LOG = logging.getLogger("stirgpu.sirf")
_F = np.float32
#: STIR's ScatterEstimation defaults
_MASK_FWHM = (15.0, 20.0, 20.0)
_MASK_THRESHOLD = 0.003
_TAIL_THRESHOLD, _TAIL_MARGIN = 1.1, 4


@dataclasses.dataclass
class _Setup:
    """What ``set_up`` computes: the 2D data, factors and mask, the simulation, the first image."""

    data_2d: AcquisitionData
    background_2d: AcquisitionData
    data_to_fit: ProjDataInMemory
    norm_3d: np.ndarray  # STIR's normalisation factors of the input (as_array order)
    norm_2d: np.ndarray  # ... and of the 2D data
    sensitivity_2d: AcquisitionSensitivityModel  # 1 / (norm_2d * ACF_2d)
    mask: ProjDataInMemory
    simulation: SingleScatterSimulation


def _check(value, kind, what: str):
    if not isinstance(value, kind):
        raise InputTypeError(f"ScatterEstimator.{what}: expected {kind.__name__}, not {type(value).__name__}")
    return value


def _to_2d(ad: AcquisitionData, mean: bool) -> AcquisitionData:
    """STIR's ``make_2D_projdata_sptr``: every segment rebinned into one (or as is)."""
    n = ad.get_proj_data_info().get_num_segments()
    return ad if n == 1 else ad.rebin(n, do_normalisation=mean)


@translate_class_errors
class ScatterEstimator:
    """SIRF's ``sirf.STIR.ScatterEstimator`` (see the module docstring)."""

    def __init__(self, filename=""):
        if filename:
            raise error(
                "ScatterEstimator(parameter file): STIR's scatter estimation parameter files are not read by "
                "stirgpu; set the estimator up with its setters"
            )
        self.name = "PETScatterEstimator"
        self._input: AcquisitionData | None = None
        self._randoms: AcquisitionData | None = None
        self._acf: AcquisitionData | None = None
        self._asm: AcquisitionSensitivityModel | None = None
        self._mu: ImageData | None = None
        self._num_iterations = 5
        self._subsets, self._subiterations = 7, 8
        self._min_scale, self._max_scale = 0.05, 100.0
        self._prefix = ""
        self._scatter_settings = ScatterSettings(downsample_scanner=True)
        self._setup: _Setup | None = None
        self.output: AcquisitionData | None = None

    # -- SIRF's setters and getters --------------------------------------------------------
    def set_input(self, acq_data) -> None:
        self._input = _check(acq_data, AcquisitionData, "set_input")
        self._setup = None

    def set_randoms(self, acq_data) -> None:
        self._randoms = _check(acq_data, AcquisitionData, "set_randoms")
        self._setup = None

    def set_attenuation_image(self, image) -> None:
        self._mu = _check(image, ImageData, "set_attenuation_image").clone()
        self._setup = None

    def set_attenuation_correction_factors(self, arg) -> None:
        self._acf = _check(arg, AcquisitionData, "set_attenuation_correction_factors")
        self._setup = None

    def set_asm(self, asm) -> None:
        """The detection efficiencies (without attenuation)."""
        self._asm = _check(asm, AcquisitionSensitivityModel, "set_asm")
        self._setup = None

    def set_num_iterations(self, v) -> None:
        self._num_iterations = int(v)

    def get_num_iterations(self) -> int:
        return self._num_iterations

    def set_OSEM_num_subiterations(self, v) -> None:  # noqa: N802 -- SIRF's name
        self._subiterations = int(v)

    def get_OSEM_num_subiterations(self) -> int:  # noqa: N802
        return self._subiterations

    def set_OSEM_num_subsets(self, v) -> None:  # noqa: N802
        self._subsets = int(v)

    def get_OSEM_num_subsets(self) -> int:  # noqa: N802
        return self._subsets

    def set_max_scale_value(self, v) -> None:
        self._max_scale = float(v)

    def set_min_scale_value(self, v) -> None:
        self._min_scale = float(v)

    def set_output_prefix(self, v) -> None:
        """Write ``v_<iteration>.hs`` after each iteration ('' writes nothing)."""
        self._prefix = str(v)

    def set_randomly_place_scatter_points(self, flag) -> None:
        """STIR's setting of the simulation (default True: random within each voxel)."""
        self._scatter_settings = dataclasses.replace(self._scatter_settings, randomly_place_scatter_points=bool(flag))
        self._setup = None

    def set_mask_image(self, image) -> None:
        """Accepted as SIRF accepts it, without effect: STIR recomputes the mask image by default
        and SIRF's Python cannot turn that off."""
        _check(image, ImageData, "set_mask_image")
        _LOG.info("ScatterEstimator: the mask image is recomputed from the attenuation image (as in STIR)")

    def set_mask_acq_data(self, arg) -> None:
        """Accepted as SIRF accepts it, without effect: STIR recomputes the tail mask by default."""
        _check(arg, AcquisitionData, "set_mask_acq_data")
        _LOG.info("ScatterEstimator: the tail mask is recomputed from the attenuation image (as in STIR)")

    # -- set_up -------------------------------------------------------------------------------
    def _check_inputs(self) -> tuple[AcquisitionData, AcquisitionData, ImageData, str]:
        """(input, ACFs, mu-map, input header), or STIR's error for the first one missing."""
        if self._mu is None:
            raise error("ScatterEstimation: No attenuation image has been set. Aborting.")
        if self._input is None:
            raise error("ScatterEstimation: No input proj_data have been set. Aborting.")
        if self._acf is None:
            raise error("ScatterEstimation: need attenuation correction factors to be set (sorry)")
        if self._input.exam_header is None:
            raise error("ScatterEstimator.set_up: the input data have no energy window (read them from a header)")
        return self._input, self._acf, self._mu, self._input.exam_header

    @staticmethod
    def _norm_2d(data: AcquisitionData, f3d: np.ndarray) -> np.ndarray:
        """STIR's 2D normalisation factors: ``1 / SSRB(1 / f)`` (summed), 1e-20 at least."""
        if data.get_proj_data_info().get_num_segments() == 1:
            return f3d
        efficiencies_2d = _to_2d(data.get_uniform_copy(0).fill(1 / f3d), mean=False).as_array()
        return np.asarray(1 / np.maximum(efficiencies_2d, _F(1e-20)), dtype=_F)

    def set_up(self) -> None:
        """Check the inputs and compute the 2D data, normalisation and tail mask (module docstring)."""
        data, acf, mu_image, header = self._check_inputs()
        f3d = self._norm_factors_3d()
        data_2d = _to_2d(data, mean=False)
        norm_2d = self._norm_2d(data, f3d)
        background_2d = data_2d.get_uniform_copy(0) if self._randoms is None else _to_2d(self._randoms, mean=False)
        efficiencies = data_2d.get_uniform_copy(0).fill(1 / (norm_2d * _to_2d(acf, mean=True).as_array()))
        pdi2 = data_2d.get_proj_data_info()
        mu = VoxelsOnCartesianGrid.from_array(_host(mu_image.array), mu_image.image_info)
        energy = energy_model_from_header(header, pdi2.get_scanner())
        self._setup = _Setup(
            data_2d=data_2d,
            background_2d=background_2d,
            data_to_fit=ProjDataInMemory.from_proj_data((data_2d - background_2d).proj_data),
            norm_3d=f3d,
            norm_2d=norm_2d,
            sensitivity_2d=AcquisitionSensitivityModel(efficiencies),
            mask=self._tail_mask(data_2d),
            simulation=SingleScatterSimulation(pdi2, energy, mu, self._scatter_settings),
        )

    def _norm_factors_3d(self) -> np.ndarray:
        """STIR's normalisation factors ``f`` of the input (1 without a model: STIR, and SIRF with
        it, crash there)."""
        assert self._input is not None
        if self._asm is None:
            return np.ones(self._input.dimensions(), dtype=_F)
        self._asm.set_up(self._input)
        ones = self._input.get_uniform_copy(1)
        return np.asarray(1 / self._asm.forward(ones).as_array(), dtype=_F)

    def _tail_mask(self, data_2d: AcquisitionData) -> ProjDataInMemory:
        assert self._mu is not None
        mask = self._mu.clone()
        smooth = SeparableGaussianImageFilter()
        smooth.set_fwhms(_MASK_FWHM)
        smooth.apply(mask)
        mask.fill(np.where(mask.as_array() < _F(_MASK_THRESHOLD), _F(0), _F(1)))
        model = AcquisitionModelUsingParallelproj()
        model.set_up(data_2d, mask)
        projected = model.forward(mask) + 1
        acfs = ProjDataInMemory.from_proj_data(projected.proj_data)
        return tail_mask_from_acfs(acfs, _TAIL_THRESHOLD, _TAIL_MARGIN)

    # -- process ----------------------------------------------------------------------------
    def _reconstruct(self, image: ImageData, background: AcquisitionData) -> None:
        """OSEM (SIRF's settings) on the 2D data from ``image``, in place, then the post-filter."""
        s = self._setup
        assert s is not None
        model = AcquisitionModelUsingParallelproj()
        model.set_acquisition_sensitivity(s.sensitivity_2d)
        model.set_background_term(background)
        model.set_up(s.data_2d, image)
        objective = make_Poisson_loglikelihood(s.data_2d)
        objective.set_acquisition_model(model)
        recon = OSMAPOSLReconstructor()
        recon.set_objective_function(objective)
        recon.set_num_subsets(self._subsets)
        recon.set_num_subiterations(self._subiterations)
        recon.set_up(image)
        recon.reconstruct(image)
        post = SeparableGaussianImageFilter()
        post.set_fwhms((15.0, 15.0, 15.0))
        post.apply(image)

    def _to_3d(self, scaled_2d: ProjDataInMemory) -> AcquisitionData:
        """STIR's 3D estimate: thresholded at 0, the 2D normalisation applied, inverse SSRB, the
        3D normalisation undone."""
        s = self._setup
        assert s is not None and self._input is not None
        x = scaled_2d.as_array().reshape(s.norm_2d.shape)
        x = np.maximum(np.maximum(x, _F(1e-9)) - _F(1e-9), _F(0)) * s.norm_2d
        pdi = self._input.get_proj_data_info()
        direct = x.reshape(-1, pdi.get_num_views(), pdi.get_num_tangential_poss())
        upsampled = inverse_ssrb(direct, pdi, s.data_2d.get_proj_data_info())
        out = self._input.get_uniform_copy(0)
        out.fill(upsampled.as_array().reshape(out.dimensions()) / s.norm_3d)
        return out

    def _fitted_scatter(self, image: ImageData, settings: FitSettings, undo: ProjDataInMemory) -> ProjDataInMemory:
        """The single scatter of ``image`` on the downsampled template, upsampled and fitted (2D)."""
        s = self._setup
        assert s is not None
        activity = VoxelsOnCartesianGrid.from_array(_host(image.array), image.image_info)
        estimate = ProjDataInMemory(s.simulation.proj_data_info)
        for seg, values in s.simulation.simulate(activity).items():
            estimate.set_segment_by_view(values, seg)
        return upsample_and_fit(s.data_to_fit, estimate, s.mask, settings, undo_factors=undo).scatter

    def process(self) -> None:
        """Run the estimation (call :meth:`set_up` first)."""
        if self._setup is None:
            raise error("ScatterEstimation: set_up needs to be called before process_data()")
        s = self._setup
        image = s.data_2d.create_uniform_image(1.0)
        self._reconstruct(image, s.background_2d)
        first = image.clone()
        settings = FitSettings(self._min_scale, self._max_scale, 3, True)
        undo = ProjDataInMemory(s.data_2d.get_proj_data_info(), fill=(1 / s.norm_2d).reshape(s.data_2d.proj_data.shape))
        for iteration in range(1, self._num_iterations + 1):
            if iteration == 2:
                image.fill((image.as_array() + first.as_array()) / _F(2))
            _LOG.info("ScatterEstimator: iteration %d: simulating the scatter", iteration)
            scaled = self._fitted_scatter(image, settings, undo)
            last = iteration == self._num_iterations
            if last or self._prefix:
                result = self._to_3d(scaled)
                if self._prefix:
                    result.write(f"{self._prefix}_{iteration}.hs")
                self.output = result
            if not last:
                additive = s.data_2d.get_uniform_copy(0).fill(scaled.as_array().reshape(s.norm_2d.shape))
                additive = additive + s.background_2d
                self._reconstruct(image, additive)

    def get_output(self) -> AcquisitionData:
        """The last scatter estimate (the input's geometry and units)."""
        if self.output is None:
            raise error("output not yet computed")
        return self.output
