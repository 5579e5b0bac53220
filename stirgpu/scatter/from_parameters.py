"""STIR's ``simulate_scatter FILE.par`` as a call: the template, images and settings a scatter
simulation parameter file names (:mod:`stirgpu.parfile.scatter`), simulated and written as STIR
writes them (``<output filename prefix>.hs`` / ``.s``, the template's geometry; with
``attenuation image for scatter points output filename``, the zoomed scatter-point image too).
Every input is read and every check made before the output is created."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..errors import NonFiniteError, ParFileError
from ..formats import ProjDataFromFile, VoxelsOnCartesianGrid, read_image, read_projdata_header, write_image
from ..parfile.scatter import ScatterParameters
from .simulation import ScatterSettings, SingleScatterSimulation
from .template import energy_model_from_header

__all__ = ["ScatterRun", "simulate_from_parameters"]


@dataclasses.dataclass(frozen=True)
class ScatterRun:
    """What a run wrote and found: the output header, the scatter-point image written (or None),
    the number of scatter points and the total scatter (STIR's log's figures)."""

    output: Path
    scatter_point_image: Path | None
    num_scatter_points: int
    total: float


_REQUIRED = {
    "template": "template projdata filename",
    "attenuation_image": "attenuation image filename",
    "activity_image": "activity image filename",
    "output_prefix": "output filename prefix",
}


def _required(p: ScatterParameters) -> tuple[Path, Path, Path, str]:
    """(template, attenuation image, activity image, output prefix), or one error naming every
    missing key."""
    t, a, c, o = p.template, p.attenuation_image, p.activity_image, p.output_prefix
    if t is None or a is None or c is None or o is None:
        missing = [key for field, key in _REQUIRED.items() if getattr(p, field) is None]
        keys = ", ".join(f"'{k}'" for k in missing)
        raise ParFileError(f"simulate_scatter needs {keys}", p.path)
    return t, a, c, o


def _finite_image(path: Path) -> VoxelsOnCartesianGrid:
    image = read_image(path)
    bad = int(np.count_nonzero(~np.isfinite(image.as_array())))
    if bad:
        raise NonFiniteError(str(path), bad, path)
    return image


def simulate_from_parameters(p: ScatterParameters, *, seed: int | None = None, overwrite: bool = False) -> ScatterRun:
    """Run the simulation ``p`` describes (``seed``: the random placement's generator)."""
    template, attenuation_path, activity_path, prefix = _required(p)
    attenuation, activity = _finite_image(attenuation_path), _finite_image(activity_path)
    pdi = read_projdata_header(template).proj_data_info
    energy = energy_model_from_header(template, pdi.get_scanner())
    given = None if p.scatter_point_image is None else _finite_image(p.scatter_point_image)
    sim = SingleScatterSimulation(pdi, energy, attenuation, ScatterSettings.from_parameters(p, seed), given)
    points = sim.scatter_points
    written_points = None
    # nothing appears under the output's name unless everything, the scatter-point image
    # included, was written
    out = ProjDataFromFile.create(prefix, sim.proj_data_info, overwrite=overwrite)
    with out:
        total = sim.simulate_into(activity, out)
        if p.scatter_point_image_output is not None:
            written_points = write_image(p.scatter_point_image_output, points.image, points.info, overwrite=overwrite)
    return ScatterRun(
        output=out.path if out.path is not None else Path(prefix),
        scatter_point_image=written_points,
        num_scatter_points=len(points.mu),
        total=total,
    )
