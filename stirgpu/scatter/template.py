"""The energy information of a template's Interfile header: the scanner's ``Energy resolution``
and ``Reference energy (in keV)`` (kept in stirgpu's ``Scanner``) and the exam's
``energy window lower level[1]`` / ``energy window upper level[1]`` (STIR's ``ExamInfo``)."""

from __future__ import annotations

import os

from ..errors import FormatError
from ..formats import read_header
from ..geometry import Scanner
from .physics import EnergyModel

__all__ = ["energy_model_from_header"]


def energy_model_from_header(path: str | os.PathLike, scanner: Scanner) -> EnergyModel:
    """The :class:`EnergyModel` of the projection-data header at ``path`` (one line naming the
    file and key where one is missing)."""
    hdr = read_header(path)
    for key in ("energy window lower level", "energy window upper level"):
        if not hdr.has(key, 1):
            raise FormatError(f"{path}: '{key}[1]' is missing (the scatter simulation needs the energy window)")
    return EnergyModel(
        low=hdr.get_float("energy window lower level", 1),
        high=hdr.get_float("energy window upper level", 1),
        resolution=scanner.energy_resolution,
        reference_energy=scanner.reference_energy,
    )
