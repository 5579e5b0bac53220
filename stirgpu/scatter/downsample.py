"""STIR's downsampled scanner for the scatter simulation (``ScatterSimulation::downsample_scanner``,
cylindrical scanners; ``downsample scanner := 1``): the scatter is simulated, and written, on a
coarser template of the same scanner length and radius.

* rings: the ``downsampled scanner number of rings`` if above 1, else about one per 2 cm
  (``round(length / 20 mm + 1/2)``, at least 2), spaced ``length / rings`` apart;
* detectors per ring: the ``downsampled scanner number of detectors per ring`` if positive,
  else 64;
* tangential positions: ``ceil(old positions * new / old detectors) + 1``; all views; span 1,
  every ring difference unless the template has one segment (then segment 0 only);
* the default bin size ``R pi / detectors`` (R: the effective radius).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import GeometryError
from ..geometry import ProjDataInfo

__all__ = ["downsampled_proj_data_info"]

_F = np.float32
#: STIR's default number of detectors per ring of the downsampled scanner
DEFAULT_DETECTORS = 64


def _stir_round(x: float) -> int:
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def downsampled_proj_data_info(pdi: ProjDataInfo, rings: int = -1, detectors: int = -1) -> ProjDataInfo:
    """The template STIR simulates on with ``downsample scanner := 1`` (module docstring)."""
    sc = pdi.get_scanner()
    if sc.scanner_geometry != "Cylindrical":
        raise GeometryError(f"scatter simulation: downsampling a {sc.scanner_geometry} scanner is not supported")
    length = _F(_F(sc.num_rings) * _F(sc.ring_spacing))
    if rings <= 1:
        rings = max(_stir_round(float(_F(length / _F(20)) + _F(0.5))), 2)
    if detectors <= 0:
        detectors = DEFAULT_DETECTORS
    if detectors % 2:
        raise GeometryError(
            f"scatter simulation: {detectors} detectors per ring for the downsampled scanner (must be even)"
        )
    bins = math.ceil(float(_F(pdi.get_num_tangential_poss()) * _F(detectors) / _F(sc.num_detectors_per_ring))) + 1
    scanner = dataclasses.replace(
        sc,
        num_rings=rings,
        num_detectors_per_ring=detectors,
        ring_spacing=float(_F(length / _F(rings))),
        max_num_non_arccorrected_bins=bins,
        default_bin_size=float(_F(float(_F(sc.effective_ring_radius)) * math.pi / detectors)),  # in double
    )
    max_ring_diff = 0 if pdi.get_num_segments() == 1 else rings - 1
    return ProjDataInfo.construct(scanner, 1, max_ring_diff, detectors // 2, bins, arc_corrected=False)
