"""Templates for the scatter simulation tests: projection-data headers that carry what STIR's
scatter simulation reads besides the geometry -- the scanner's energy resolution (in the
scanner) and the energy window (STIR's ``ExamInfo``: ``energy window lower/upper level[1]``,
which stirgpu's header writer does not write) -- with a data file of zeros, as STIR needs one."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from stirgpu.formats import format_projdata_header
from stirgpu.geometry import ProjDataInfo, Scanner


def scatter_scanner(rings: int, dets: int, tilt_degrees: float = 0.0, resolution: float = 0.15) -> Scanner:
    """A small cylindrical scanner (radius 300 mm + 7 mm depth of interaction, 16 mm rings)."""
    return Scanner(
        name="scatter test",
        num_rings=rings,
        num_detectors_per_ring=dets,
        inner_ring_radius=300.0,
        average_depth_of_interaction=7.0,
        ring_spacing=16.0,
        intrinsic_azimuthal_tilt=float(np.deg2rad(tilt_degrees)),
        max_num_non_arccorrected_bins=dets // 2 + 1,
        energy_resolution=resolution,
        reference_energy=511.0,
    )


def write_scatter_template(folder: Path, pdi: ProjDataInfo, window=(425.0, 650.0), name: str = "template") -> Path:
    """``folder/<name>.hs`` (+ ``.s``): ``pdi`` with the energy window ``window`` (keV)."""
    text = format_projdata_header(pdi, f"{name}.s")
    energy = (
        "number of energy windows := 1\n"
        f"energy window lower level[1] := {window[0]}\n"
        f"energy window upper level[1] := {window[1]}\n"
    )
    end = text.lower().rindex("!end of interfile")
    header = folder / f"{name}.hs"
    header.write_text(text[:end] + energy + text[end:])
    np.zeros(pdi.total_num_bins, dtype=np.float32).tofile(folder / f"{name}.s")
    return header
