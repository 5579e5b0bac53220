"""SIRF's ``SingleScatterSimulator``: STIR's single scatter simulation (:mod:`stirgpu.scatter`).

SIRF's calls: ``SingleScatterSimulator(filename='')`` (a file: STIR's ``PET Single Scatter
Simulation Parameters`` keys), ``set_attenuation_image(image)``, ``set_up(acq_template,
img_template)`` (the activity image is ``img_template``, as in SIRF, and the attenuation image
must be set first), ``forward(image, out=None)``.  The output has the template's geometry (SIRF
does not downsample the scanner).  The energy window comes from the header the template was read
from (STIR's ``ExamInfo``); data made from a scanner name have none, which STIR refuses too.

What differs from SIRF: ``forward(image)`` simulates ``image`` (SIRF's documented behaviour; its
C++ ignores the argument and uses the image given to ``set_up``); scatter points are placed at
random within their voxels as STIR's default does, but from a numpy generator (STIR seeds C's
``rand()`` with the time, so no two runs of either agree); ``set_randomly_place_scatter_points``
and ``set_attenuation_threshold`` (STIR's setters, not in SIRF's Python) choose otherwise.
"""

from __future__ import annotations

import dataclasses

from ..formats import VoxelsOnCartesianGrid
from ..scatter import ScatterSettings, SingleScatterSimulation, energy_model_from_header
from .acquisition_data import AcquisitionData
from .errors import InputTypeError, error, translate_class_errors
from .image_data import ImageData, _host

__all__ = ["SingleScatterSimulator"]


def _voxels(image: ImageData) -> VoxelsOnCartesianGrid:
    return VoxelsOnCartesianGrid.from_array(_host(image.array), image.image_info)


@translate_class_errors
class SingleScatterSimulator:
    """SIRF's ``sirf.STIR.SingleScatterSimulator`` (see the module docstring)."""

    def __init__(self, filename=""):
        self.name = "PETSingleScatterSimulator"
        self.filename = filename
        self._settings = ScatterSettings()
        self._attenuation: ImageData | None = None
        self._scatter_point_image: ImageData | None = None
        self._activity: ImageData | None = None
        self._template: AcquisitionData | None = None
        self._simulation: SingleScatterSimulation | None = None
        if filename:
            from ..parfile.scatter import read_scatter_par

            parsed = read_scatter_par(filename)
            self._settings = ScatterSettings.from_parameters(parsed)
            if parsed.attenuation_image is not None:
                self._attenuation = ImageData(str(parsed.attenuation_image))
            if parsed.scatter_point_image is not None:
                self._scatter_point_image = ImageData(str(parsed.scatter_point_image))

    def set_attenuation_image(self, image) -> None:
        """The mu-map (cm^-1); call before :meth:`set_up`."""
        if not isinstance(image, ImageData):
            raise InputTypeError(f"set_attenuation_image: expected ImageData, not {type(image).__name__}")
        self._attenuation = image.clone()
        self._simulation = None

    def set_randomly_place_scatter_points(self, flag: bool) -> None:
        """STIR's ``set_randomly_place_scatter_points`` (default True: random within each voxel)."""
        self._settings = dataclasses.replace(self._settings, randomly_place_scatter_points=bool(flag))
        self._simulation = None

    def set_attenuation_threshold(self, value: float) -> None:
        """STIR's ``set_attenuation_threshold`` (cm^-1; default 0.01)."""
        self._settings = dataclasses.replace(self._settings, attenuation_threshold=float(value))
        self._simulation = None

    def set_up(self, acq_templ, img_templ) -> None:
        """Prepare for :meth:`forward`: the template's geometry and energy window, the scatter
        points of the attenuation image (set first), ``img_templ`` as the activity image."""
        if not isinstance(acq_templ, AcquisitionData):
            raise InputTypeError(f"set_up: acq_templ must be AcquisitionData, not {type(acq_templ).__name__}")
        if not isinstance(img_templ, ImageData):
            raise InputTypeError(f"set_up: img_templ must be ImageData, not {type(img_templ).__name__}")
        if self._attenuation is None:
            raise error("Fatal error in PETSingleScatterSimulator::set_up: attenuation_image has not been set")
        if acq_templ.exam_header is None:
            raise error(
                "SingleScatterSimulator.set_up: the template has no energy window (STIR's exam information comes "
                "from the header a template is read from; data made from a scanner name have none)"
            )
        pdi = acq_templ.get_proj_data_info()
        energy = energy_model_from_header(acq_templ.exam_header, pdi.get_scanner())
        given = None if self._scatter_point_image is None else _voxels(self._scatter_point_image)
        simulation = SingleScatterSimulation(pdi, energy, _voxels(self._attenuation), self._settings, given)
        simulation.scatter_points  # noqa: B018 -- sampled at set-up, as STIR does
        self._template, self._activity, self._simulation = acq_templ, img_templ.clone(), simulation

    def forward(self, image, out=None):
        """The scatter estimate of the activity ``image``: new acquisition data of the template's
        geometry, or written into ``out`` (then None is returned, as SIRF's)."""
        if not isinstance(image, ImageData):
            raise InputTypeError(f"forward: expected ImageData, not {type(image).__name__}")
        if self._simulation is None or self._template is None:
            raise error("Fatal error in PETSingleScatterSimulator::forward: acquisition template not set")
        result = self._template.get_uniform_copy(0) if out is None else out
        if not isinstance(result, AcquisitionData):
            raise InputTypeError(f"forward: out must be AcquisitionData, not {type(result).__name__}")
        holder = result._result_holder()
        holder._check_writable()
        self._simulation.simulate_into(_voxels(image), holder.proj_data)
        result._keep_result(holder)
        return result if out is None else None
