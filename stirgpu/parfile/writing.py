"""Writing STIR's OSMAPOSL parameter file for a plain OSEM run.

:func:`osmaposl_par` gives the text of an OSMAPOSL ``.par`` -- the Poisson log-likelihood of
projection data, no prior, STIR's Parallelproj projector pair unless told otherwise -- with
the file names as given (relative names are taken from the working directory by STIR's
``OSMAPOSL`` and by ``stirgpu osmaposl`` alike) and only the keys a user would write; every
other key keeps STIR's default.  ``stirgpu demo`` writes its ``osem.par`` with it; both
programs read the text the same way (``tests/stir_differential/test_osmaposl_vs_stir.py``).

:meth:`OsmaposlSettings.to_par <stirgpu.parfile.OsmaposlSettings.to_par>` is the other writer:
every setting explicit, absolute names, for a file that reads back into equal settings.
"""

from __future__ import annotations

import os

from ..errors import ParFileError
from .grammar import format_value
from .osmaposl import OBJECTIVE_FUNCTION
from .projectors import ProjectorSettings

__all__ = ["osmaposl_par", "PARALLELPROJ_PAIR_LINES"]

#: STIR's Parallelproj projector pair with its defaults (an empty block), as a user writes it
PARALLELPROJ_PAIR_LINES = (
    "projector pair type := Parallelproj",
    "  Projector Pair Using Parallelproj Parameters :=",
    "  End Projector Pair Using Parallelproj Parameters :=",
)

_PathOrName = str | os.PathLike


def osmaposl_par(
    input_file: _PathOrName,
    *,
    output_filename_prefix: _PathOrName = "osem",
    num_subsets: int = 1,
    num_subiterations: int = 1,
    save_interval: int = 1,
    normalisation: _PathOrName | None = None,
    additive_sinogram: _PathOrName | None = None,
    subset_sensitivity_filenames: str | None = None,
    recompute_sensitivity: bool = True,
    zero_end_planes_of_segment_0: bool | None = None,
    projectors: ProjectorSettings | None = None,
    initial_estimate: _PathOrName | None = None,
    start_subiteration_num: int | None = None,
    comment: str | None = None,
) -> str:
    """The text of an OSMAPOSL ``.par`` (STIR's syntax) for OSEM on ``input_file`` (the prompts).

    The arguments are named as :class:`~stirgpu.parfile.OsmaposlSettings`' fields, and
    :func:`~stirgpu.parfile.read_osmaposl_par` reads the text back into them:

    * ``normalisation`` -- correction factors f (``Bin Normalisation type := From ProjData``);
      ``additive_sinogram`` -- STIR's additive sinogram (normalised units: mean = (A x + a) / f);
      None: not written (no such term);
    * ``subset_sensitivity_filenames`` -- a ``%d`` pattern (``sens_%d.hv``): subset sensitivities
      (``use subset sensitivities := 1``) written there, or read with ``recompute_sensitivity=False``;
      None: not written (STIR computes them and keeps them in memory);
    * ``zero_end_planes_of_segment_0`` -- None leaves STIR's default (0) unwritten;
    * ``projectors`` -- the projector pair (:meth:`ProjectorSettings.pair_lines`, e.g. stirgpu's
      block with execution settings); None: STIR's Parallelproj pair, :data:`PARALLELPROJ_PAIR_LINES`;
    * ``initial_estimate`` / ``start_subiteration_num`` -- a restart from a saved estimate;
    * ``comment`` -- lines written as ``;`` comments after the first line.

    A value the grammar would read otherwise (``;``, ``${``, a newline) is refused with a
    :class:`~stirgpu.errors.ParFileError`, as is a count below 1.
    """
    for name, n in (
        ("num_subsets", num_subsets),
        ("num_subiterations", num_subiterations),
        ("save_interval", save_interval),
        ("start_subiteration_num", 1 if start_subiteration_num is None else start_subiteration_num),
    ):
        if int(n) < 1:
            raise ParFileError(f"osmaposl_par: {name} must be at least 1, not {n}")
    pair = PARALLELPROJ_PAIR_LINES if projectors is None else _indented_pair(projectors)
    objective = [f"input file := {format_value(input_file)}"]
    if zero_end_planes_of_segment_0 is not None:
        objective.append(f"zero end planes of segment 0 := {format_value(bool(zero_end_planes_of_segment_0))}")
    objective += pair
    if normalisation is not None:
        objective += [
            "Bin Normalisation type := From ProjData",
            "  Bin Normalisation From ProjData :=",
            f"    normalisation projdata filename := {format_value(normalisation)}",
            "  End Bin Normalisation From ProjData :=",
        ]
    if additive_sinogram is not None:
        objective.append(f"additive sinogram := {format_value(additive_sinogram)}")
    if subset_sensitivity_filenames is not None:
        objective += [
            "use subset sensitivities := 1",
            f"subset sensitivity filenames := {format_value(subset_sensitivity_filenames)}",
        ]
    objective.append(f"recompute sensitivity := {format_value(bool(recompute_sensitivity))}")
    top = [
        f"output filename prefix := {format_value(output_filename_prefix)}",
        f"number of subsets := {int(num_subsets)}",
        f"number of subiterations := {int(num_subiterations)}",
        f"save estimates at subiteration intervals := {int(save_interval)}",
    ]
    if initial_estimate is not None:
        top.append(f"initial estimate := {format_value(initial_estimate)}")
    if start_subiteration_num is not None:
        top.append(f"start at subiteration number := {int(start_subiteration_num)}")
    notes = [f"; {s}".rstrip() for s in comment.splitlines()] if comment else []
    if any(s.endswith("\\") for s in notes):
        raise ParFileError(f"osmaposl_par: a comment line may not end in '\\' (it joins the next line): {comment!r}")
    lines = [
        "OSMAPOSLParameters :=",
        *notes,
        f"objective function type := {OBJECTIVE_FUNCTION}",
        f"{OBJECTIVE_FUNCTION} Parameters :=",
        *("  " + s for s in objective),
        f"End {OBJECTIVE_FUNCTION} Parameters :=",
        *top,
        "END :=",
        "",
    ]
    return "\n".join(lines)


def _indented_pair(projectors: ProjectorSettings) -> list[str]:
    """``projector pair type := ...`` and its block, the block indented under the type."""
    first, *block = projectors.pair_lines()
    return [first, *("  " + s for s in block)]
