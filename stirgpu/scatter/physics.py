"""The physics of STIR's scatter simulation (``ScatterSimulation.inl``,
``scatter_detection_modelling.cxx``): Compton cross sections, the energy-window efficiency and
the largest scattering angle STIR considers.  Energies in keV."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import GeometryError
from ..kernels.scatter import PHYSICS_FIELDS

__all__ = ["EnergyModel", "total_compton_cross_section", "max_cos_angle"]

#: STIR's FWHM -> sigma factor (2 sqrt(2 ln 2), as STIR writes it)
_FWHM_PER_SIGMA = 2.35482


def total_compton_cross_section(energy: float) -> float:
    """Klein-Nishina total cross section (cm^2), STIR's ``total_Compton_cross_section``, as the
    float STIR stores."""
    a = energy / 511.0
    log = math.log(1.0 + 2.0 * a)
    sigma0 = 6.65e-25
    value = (
        0.75
        * sigma0
        * (
            (1.0 + a) / (a * a) * (2.0 * (1.0 + a) / (1.0 + 2.0 * a) - log / a)
            + log / (2.0 * a)
            - (1.0 + 3.0 * a) / (1.0 + 2.0 * a) / (1.0 + 2.0 * a)
        )
    )
    return float(np.float32(value))


def max_cos_angle(low: float, approx: float, resolution_at_511: float) -> float:
    """STIR's ``max_cos_angle``: scattering with a smaller cosine is not simulated (the
    scattered photon would lie ``approx`` FWHMs below the window's lower level)."""
    r2 = (approx * resolution_at_511) ** 2
    ln2 = math.log(2.0)
    root = math.sqrt(511.0) * math.sqrt(511.0 + (32.0 * low * ln2) / r2)
    value = 2.0 - (8176.0 * ln2) / (r2 * (511.0 + (16.0 * low * ln2) / r2 - root))
    return float(np.float32(value))


@dataclasses.dataclass(frozen=True)
class EnergyModel:
    """The scanner's energy resolution (FWHM fraction at ``reference_energy``) and the energy
    window [``low``, ``high``] (STIR's ``ExamInfo``).  STIR's efficiency at energy E: a Gaussian of
    FWHM ``resolution * sqrt(E * reference_energy)`` integrated over the window."""

    low: float
    high: float
    resolution: float
    reference_energy: float

    def __post_init__(self) -> None:
        if not (self.low > 0 and self.high > self.low):
            raise GeometryError(
                f"scatter simulation: the energy window [{self.low}, {self.high}] keV is not set "
                "(the template's 'energy window lower level[1]' / 'upper level[1]')"
            )
        if not (self.resolution > 0 and self.reference_energy > 0):
            raise GeometryError(
                "scatter simulation: the scanner's energy resolution is not set "
                "(the template's 'Energy resolution' and 'Reference energy (in keV)')"
            )

    def detection_efficiency(self, energy: float) -> float:
        """STIR's ``detection_efficiency`` at ``energy``."""
        sigma_sqrt2 = math.sqrt(2.0 * energy * self.reference_energy) * self.resolution / _FWHM_PER_SIGMA
        return 0.5 * (math.erf((self.high - energy) / sigma_sqrt2) - math.erf((self.low - energy) / sigma_sqrt2))

    def efficiency_at_511(self) -> float:
        """STIR's efficiency for unscattered photons (1 where the window misses 511 keV)."""
        eff = float(np.float32(self.detection_efficiency(511.0)))
        return eff if eff > 0 else 1.0

    def physics_vector(self, scatter_volume: float) -> np.ndarray:
        """The kernels' ``physics`` argument (:data:`stirgpu.kernels.scatter.PHYSICS_FIELDS`)."""
        values = {
            "max_cos_angle": max_cos_angle(self.low, 2.0, self.resolution),
            "low_energy": self.low,
            "high_energy": self.high,
            "reference_energy": self.reference_energy,
            "energy_resolution": self.resolution,
            "efficiency_at_511": self.efficiency_at_511(),
            "scatter_volume": scatter_volume,
            "total_cross_section_511": total_compton_cross_section(511.0),
        }
        return np.array([values[k] for k in PHYSICS_FIELDS], dtype=np.float64)
