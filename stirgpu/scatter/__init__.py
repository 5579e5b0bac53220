"""STIR's single scatter simulation (Watson's SSS as STIR's ``SingleScatterSimulation`` computes
it): see ``README.md`` and ``docs/scatter.md``.  Importing it compiles nothing."""

from .detectors import DetectorPairs, detector_pairs
from .fit import FitSettings, ScatterFit, inverse_ssrb, scale_factors_per_sinogram, upsample_and_fit
from .from_parameters import ScatterRun, simulate_from_parameters
from .interpolate import interpolate_segment_zero
from .physics import EnergyModel, max_cos_angle, total_compton_cross_section
from .points import ScatterPoints, ZoomSettings, sample_scatter_points, scatter_point_image_info
from .simulation import ScatterSettings, SingleScatterSimulation
from .tail_mask import tail_mask_from_acfs, tail_mask_lines
from .template import energy_model_from_header

__all__ = [
    "SingleScatterSimulation",
    "ScatterSettings",
    "ZoomSettings",
    "EnergyModel",
    "ScatterPoints",
    "DetectorPairs",
    "detector_pairs",
    "sample_scatter_points",
    "scatter_point_image_info",
    "energy_model_from_header",
    "simulate_from_parameters",
    "ScatterRun",
    "max_cos_angle",
    "total_compton_cross_section",
    "tail_mask_from_acfs",
    "tail_mask_lines",
    "upsample_and_fit",
    "FitSettings",
    "ScatterFit",
    "inverse_ssrb",
    "scale_factors_per_sinogram",
    "interpolate_segment_zero",
]
