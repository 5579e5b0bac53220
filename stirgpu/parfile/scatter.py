"""STIR's scatter simulation parameter files (``simulate_scatter``'s ``Scatter Simulation
Parameters`` with ``Scatter Simulation type := PET Single Scatter Simulation``, or the bare
``PET Single Scatter Simulation Parameters`` block SIRF's ``SingleScatterSimulator(filename)``
reads), the keys of STIR's ``ScatterSimulation::initialise_keymap``.

The downsampled scanner's sizes are read and, as in STIR, have no effect while
``downsample scanner`` is 0.  ``use cache`` changes nothing in STIR's
numbers; stirgpu always computes the integrals once.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from .grammar import Block, canonical_key, parse_par_file
from .keymap import Choice, Context, Key, TypeKey, as_bool, as_float, as_int, as_path, as_str, read_block

__all__ = ["ScatterParameters", "read_scatter_par", "scatter_parameters_from_block"]

_BLOCK = "PET Single Scatter Simulation Parameters"


@dataclasses.dataclass(frozen=True)
class ScatterParameters:
    """What a scatter simulation file says (names resolved against the working folder, as STIR
    opens them); defaults are STIR's."""

    path: Path | None = None
    template: Path | None = None
    attenuation_image: Path | None = None
    activity_image: Path | None = None
    output_prefix: str | None = None
    scatter_point_image: Path | None = None
    scatter_point_image_output: Path | None = None
    attenuation_threshold: float = 0.01
    randomly_place_scatter_points: bool = True
    use_cache: bool = True
    downsample_scanner: bool = False
    zoom_xy: float = -1.0
    zoom_z: float = -1.0
    size_xy: int = -1
    size_z: int = -1
    downsampled_rings: int = -1
    downsampled_detectors: int = -1


_KEYS = (
    Key("template projdata filename", "template", as_path),
    Key("attenuation image filename", "attenuation_image", as_path),
    Key("activity image filename", "activity_image", as_path),
    Key("output filename prefix", "output_prefix", as_str),
    Key("attenuation image for scatter points filename", "scatter_point_image", as_path),
    Key("attenuation image for scatter points output filename", "scatter_point_image_output", as_path),
    Key("zoom XY for attenuation image for scatter points", "zoom_xy", as_float),
    Key("zoom Z for attenuation image for scatter points", "zoom_z", as_float),
    Key("XY size of downsampled image for scatter points", "size_xy", as_int),
    Key("Z size of downsampled image for scatter points", "size_z", as_int),
    Key("downsampled scanner number of detectors per ring", "downsampled_detectors", as_int),
    Key("downsampled scanner number of rings", "downsampled_rings", as_int),
    Key("attenuation threshold", "attenuation_threshold", as_float),
    Key("downsample scanner", "downsample_scanner", as_bool),
    Key("randomly place scatter points", "randomly_place_scatter_points", as_bool),
    Key("use cache", "use_cache", as_bool),
)


def _read_simulation(block: Block, ctx: Context) -> dict:
    found = read_block(block, _KEYS, ctx)
    return {k: f.value for k, f in found.items()}


_TYPE = TypeKey(
    "Scatter Simulation type",
    "simulation",
    (Choice("PET Single Scatter Simulation", block=_BLOCK, read=_read_simulation),),
)


def scatter_parameters_from_block(root: Block, base_dir: str | os.PathLike | None = None) -> ScatterParameters:
    """:class:`ScatterParameters` from a parsed file; every problem at once (one
    :class:`~stirgpu.errors.ParFileProblems`, each with the file and line)."""
    ctx = Context(root.path, Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd())))
    values: dict = {}
    if root.key == canonical_key(_BLOCK):
        values = _read_simulation(root, ctx)
    elif root.key == canonical_key("Scatter Simulation Parameters"):
        top = read_block(root, (_TYPE,), ctx)
        if "simulation" in top:
            values = top["simulation"].value
        elif "simulation" not in ctx.failed:
            ctx.report(f"'{root.raw_key}' needs 'Scatter Simulation type := PET Single Scatter Simulation'", root.line)
    else:
        ctx.report(
            f"not a scatter simulation file: it starts with '{root.raw_key} :=' instead of "
            f"'Scatter Simulation Parameters :=' or '{_BLOCK} :='",
            root.line,
        )
    ctx.check()
    return ScatterParameters(path=None if root.path is None else Path(root.path), **values)


def read_scatter_par(
    path: str | os.PathLike, *, base_dir: str | os.PathLike | None = None, env: Mapping[str, str] | None = None
) -> ScatterParameters:
    """Read a scatter simulation parameter file (see the module docstring)."""
    return scatter_parameters_from_block(parse_par_file(path, env=env), base_dir=base_dir)
