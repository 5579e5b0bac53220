"""OSMAPOSL parameter files -> :class:`OsmaposlSettings` (typed, validated, STIR's defaults).

The accepted keys are those of STIR's ``OSMAPOSLReconstruction``, ``IterativeReconstruction``,
``Reconstruction`` and ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData`` (and its
``PoissonLogLikelihoodWithLinearModelForMean`` / ``GeneralisedObjectiveFunction`` bases), with
STIR's defaults; ``prior type`` and its block are read by :mod:`.priors` (STIR's Quadratic,
Relative Difference and Logcosh priors), the filters by :mod:`.filters` (STIR's ``Separable
Cartesian Metz`` and ``Separable Gaussian``).  What stirgpu cannot reproduce is refused with the
file and line *before any work*: other objective functions, other priors, filters of other
types (an inter-update / inter-iteration filter only where its interval enables it),
projectors other than Parallelproj/stirgpu, normalisations other than ``From ProjData`` and
``From ECAT8`` (:mod:`.normalisation`), random
subset order, update images, non-float output.  Keys that do not
change the result (``verbosity``, ``disable output``, ``report objective function values
interval``) are accepted.

File names: STIR opens them as written, i.e. relative to the current directory of the
process (not to the parameter file); :func:`read_osmaposl_par` does the same unless
``base_dir`` is given.  They are stored as absolute paths.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ParFileError
from ..filters import SeparableImageFilter
from .filters import check_filter_intervals, filter_par_lines
from .grammar import Block, Entry, canonical_key, format_value, parse_par_file
from .keymap import (
    Context,
    Found,
    read_block,
)
from .normalisation import Ecat8Normalisation, normalisation_par_lines
from .osmaposl_keys import _TOP_HINTS, _TOP_KEYS
from .patterns import FLOAT32_MAX, OBJECTIVE_FUNCTION, FilenamePattern
from .priors import PriorSettings
from .projectors import ProjectorOptions, ProjectorSettings
from .refusals import plugin_hint
from .run_files import input_files, missing_inputs, output_folders, raise_all, unwritable

__all__ = [
    "OsmaposlSettings",
    "FilenamePattern",
    "read_osmaposl_par",
    "osmaposl_settings_from_block",
    "OBJECTIVE_FUNCTION",
]


@dataclasses.dataclass(frozen=True)
class OsmaposlSettings:
    """Everything an OSMAPOSL (OSEM) run needs, with STIR's defaults and STIR's meaning.

    File names are absolute :class:`~pathlib.Path` objects.  ``lines`` records the line each
    field was read from (use :meth:`line`, :meth:`where`, :meth:`error`); ``path`` is the file.
    Neither takes part in comparisons.  Instances are immutable and picklable.
    """

    # --- the objective function (PoissonLogLikelihoodWithLinearModelForMeanAndProjData) ---
    input_file: Path
    #: default: STIR's Parallelproj pair (a file must say so explicitly, see read_osmaposl_par)
    projectors: ProjectorSettings = dataclasses.field(
        default_factory=lambda: ProjectorSettings("pair", ProjectorOptions(), ProjectorOptions(), "Parallelproj")
    )
    #: STIR's 'additive sinogram' a, in *normalised* units: mean = (A x + a) / f (STIR's model,
    #: reproduced on the osem953 fixture; docs/reconstruction.md). None: no term
    additive_sinogram: Path | None = None
    #: 'Bin Normalisation type := From ProjData' file of correction factors f (mean = (A x + a) / f),
    #: or 'From ECAT8' (a Siemens norm file, its f computed for the data: .normalisation);
    #: None: 'Bin Normalisation type := None' (the default)
    normalisation: Path | Ecat8Normalisation | None = None
    #: None: all segments (STIR's -1)
    max_segment_num_to_process: int | None = None
    zero_end_planes_of_segment_0: bool = False
    zoom: float = 1.0
    xy_output_image_size: int | None = None  #: None: STIR's default size (its -1)
    z_output_image_size: int | None = None
    z_offset_mm: float = 0.0  #: STIR's 'Z offset (in mm)': the image origin's z
    time_frame_definition_filename: Path | None = None
    time_frame_number: int = 1
    #: 'sensitivity filename' (read when not recomputing and not using subset sensitivities,
    #: else written if given)
    sensitivity_filename: Path | None = None
    subset_sensitivity_filenames: FilenamePattern | None = None
    recompute_sensitivity: bool = False
    #: STIR 6.5's default is 1 (``PoissonLogLikelihoodWithLinearModelForMean::set_defaults``)
    use_subset_sensitivities: bool = True
    #: 'use time-of-flight sensitivities': with TOF data, back project the sensitivity over all
    #: timing positions even without a TOF normalisation (STIR's default 0: without TOF, unless
    #: the normalisation is TOF; docs/tof.md)
    use_tof_sensitivities: bool = False
    #: 'prior type' and its block; None: 'prior type := None' (OSEM)
    prior: PriorSettings | None = None
    # --- the iterations (IterativeReconstruction, OSMAPOSLReconstruction) ---
    num_subsets: int = 1
    num_subiterations: int = 1
    start_subiteration_num: int = 1
    start_subset_num: int = 0
    save_interval: int = 1
    #: an image file, or STIR's constants: 1.0 (``initial estimate := 1``, the default) or 0.0
    initial_estimate: Path | float = 1.0
    enforce_initial_positivity: bool = True
    map_model: str = "additive"
    #: the multiplicative update is clipped into [minimum, maximum] from subiteration 2 on (STIR)
    maximum_relative_change: float = FLOAT32_MAX
    minimum_relative_change: float = 0.0
    # --- filters (STIR's OSMAPOSLReconstruction, IterativeReconstruction, Reconstruction) ---
    #: applied to the estimate before the update multiplies it, at subiterations that are
    #: multiples of the interval (0: never)
    inter_update_filter: SeparableImageFilter | None = None
    inter_update_filter_interval: int = 0
    #: applied after the update, at subiterations that are multiples of the interval (0: never)
    inter_iteration_filter: SeparableImageFilter | None = None
    inter_iteration_filter_interval: int = 0
    #: applied to the estimate after the last subiteration (before it is written)
    post_filter: SeparableImageFilter | None = None
    # --- output and reporting (Reconstruction) ---
    output_filename_prefix: Path | None = None
    disable_output: bool = False
    verbosity: int | None = None  #: None: not given (STIR's -1: leave as is)
    report_objective_function_values_interval: int = 0
    objective_function: str = OBJECTIVE_FUNCTION
    path: Path | None = dataclasses.field(default=None, compare=False)
    #: ``((field, line), ...)`` for the keys given in the file (a mapping is accepted too)
    lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        items = self.lines.items() if isinstance(self.lines, Mapping) else self.lines
        object.__setattr__(self, "lines", tuple(sorted((str(k), int(v)) for k, v in items)))
        # the reader reports these with file and line; this guards settings built in code
        checks = [
            (self.projectors.role == "pair", "projectors must be a projector pair"),
            (
                self.num_subsets >= 1 and self.num_subiterations >= 1 and self.start_subiteration_num >= 1,
                "num_subsets, num_subiterations and start_subiteration_num must be >= 1",
            ),
            (0 <= self.start_subset_num < self.num_subsets, "start_subset_num must be in [0, num_subsets)"),
            (1 <= self.save_interval <= self.num_subiterations, "save_interval must be in [1, num_subiterations]"),
            (self.zoom > 0, "zoom must be positive"),
            (
                all(v is None or v >= 1 for v in (self.xy_output_image_size, self.z_output_image_size)),
                "image sizes must be None or >= 1",
            ),
            (
                self.max_segment_num_to_process is None or self.max_segment_num_to_process >= 0,
                "max_segment_num_to_process must be None or >= 0",
            ),
            (
                isinstance(self.initial_estimate, Path) or self.initial_estimate in (0.0, 1.0),
                "initial_estimate must be a Path, 1.0 or 0.0 (STIR's constants)",
            ),
            (self.map_model in ("additive", "multiplicative"), "map_model must be 'additive' or 'multiplicative'"),
            (
                0 <= self.minimum_relative_change <= self.maximum_relative_change,
                "need 0 <= minimum_relative_change <= maximum_relative_change",
            ),
            (
                self.output_filename_prefix is not None or self.disable_output,
                "output_filename_prefix is required unless disable_output",
            ),
            (
                self.inter_update_filter_interval >= 0 and self.inter_iteration_filter_interval >= 0,
                "filter subiteration intervals must be >= 0",
            ),
            (
                all(
                    f is None or isinstance(f, SeparableImageFilter)
                    for f in (self.inter_update_filter, self.inter_iteration_filter, self.post_filter)
                ),
                "filters must be stirgpu.filters objects or None",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"OsmaposlSettings: {message}")

    # ------------------------------------------------------------------ locating problems
    def line(self, field: str) -> int | None:
        """The line ``field`` was read from; None where STIR's default applies."""
        return dict(self.lines).get(field)

    def where(self, field: str) -> tuple[Path | None, int | None]:
        """(file, line) a field was read from; line None where the default applies."""
        return self.path, self.line(field)

    def error(self, field: str, message: str) -> ParFileError:
        """A :class:`ParFileError` pointing at the line of ``field`` (for problems found later,
        e.g. unbalanced subsets once the projection data are known)."""
        return ParFileError(message, self.path, self.line(field))

    # ------------------------------------------------------------------ helpers for the run
    def subset_sensitivity_filename(self, subset: int) -> Path:
        if self.subset_sensitivity_filenames is None:
            raise self.error("use_subset_sensitivities", "no 'subset sensitivity filenames' given")
        if not 0 <= subset < self.num_subsets:
            raise ValueError(f"subset {subset} out of range 0..{self.num_subsets - 1}")
        return self.subset_sensitivity_filenames.format(subset)

    @property
    def sensitivity_must_be_computed(self) -> bool:
        """STIR computes the sensitivity when asked to, and also when no file to read it from is
        given (it warns)."""
        if self.recompute_sensitivity:
            return True
        if self.use_subset_sensitivities:
            return self.subset_sensitivity_filenames is None
        return self.sensitivity_filename is None

    def image_arguments(self) -> dict:
        """The arguments of STIR's image for this reconstruction (``zoom``, ``xy_size``,
        ``z_size``, ``origin`` (z offset, 0, 0)), for ``ImageInfo.default_for`` or, to the last
        bit, ``stirgpu.kernels.joseph.lors.stir_default_image_info`` (what ``recon.run`` uses)."""
        return {
            "zoom": self.zoom,
            "xy_size": self.xy_output_image_size,
            "z_size": self.z_output_image_size,
            "origin": (self.z_offset_mm, 0.0, 0.0),
        }

    def image_info(self, proj_data_info):
        """STIR's image for this reconstruction in exact arithmetic:
        ``ImageInfo.default_for(proj_data_info, **self.image_arguments())``."""
        from ..geometry import ImageInfo

        return ImageInfo.default_for(proj_data_info, **self.image_arguments())

    def input_files(self) -> dict[str, list[Path]]:
        """The files the run reads, by field."""
        return input_files(lambda f: getattr(self, f))

    def output_folders(self) -> dict[str, list[Path]]:
        """The folders the run writes into (estimates, computed sensitivities), by field."""
        return output_folders(lambda f: getattr(self, f))

    def check_input_files(self) -> None:
        """Raise :class:`~stirgpu.errors.ParFileProblems` listing every input file that does not
        exist, each at the line of its key."""
        raise_all(self.path, self.lines, missing_inputs(self.input_files()))

    def check_files(self) -> None:
        """Like :meth:`check_input_files`, and also every output folder that does not exist or is
        not writable: everything in one :class:`~stirgpu.errors.ParFileProblems`."""
        raise_all(self.path, self.lines, missing_inputs(self.input_files()) + unwritable(self.output_folders()))

    # ------------------------------------------------------------------ writing
    def to_par(self) -> str:
        """An OSMAPOSL parameter file STIR reads the same way (absolute file names), and
        :func:`read_osmaposl_par` reads back into equal settings."""

        def fmt(v: Any) -> str:
            return format_value(v, self.path)

        obj = [
            f"input file := {fmt(self.input_file)}",
            f"maximum absolute segment number to process := "
            f"{-1 if self.max_segment_num_to_process is None else self.max_segment_num_to_process}",
            f"zero end planes of segment 0 := {fmt(self.zero_end_planes_of_segment_0)}",
            f"zoom := {fmt(self.zoom)}",
            f"XY output image size (in pixels) := {self.xy_output_image_size or -1}",
            f"Z output image size (in pixels) := {self.z_output_image_size or -1}",
            f"Z offset (in mm) := {fmt(self.z_offset_mm)}",
            *self.projectors.pair_lines(),
            f"additive sinogram := {fmt(self.additive_sinogram or 0)}",
        ]
        obj += normalisation_par_lines(self.normalisation, fmt)
        if self.time_frame_definition_filename is not None:
            obj.append(f"time frame definition filename := {fmt(self.time_frame_definition_filename)}")
        obj.append(f"time frame number := {self.time_frame_number}")
        if self.sensitivity_filename is not None:
            obj.append(f"sensitivity filename := {fmt(self.sensitivity_filename)}")
        if self.subset_sensitivity_filenames is not None:
            obj.append(f"subset sensitivity filenames := {fmt(self.subset_sensitivity_filenames)}")
        obj += [
            f"recompute sensitivity := {fmt(self.recompute_sensitivity)}",
            f"use subset sensitivities := {fmt(self.use_subset_sensitivities)}",
            f"use time-of-flight sensitivities := {fmt(self.use_tof_sensitivities)}",
            *(["prior type := None"] if self.prior is None else self.prior.par_lines()),
        ]
        top = [
            f"objective function type := {self.objective_function}",
            f"{OBJECTIVE_FUNCTION} Parameters :=",
            *("  " + s for s in obj),
            f"End {OBJECTIVE_FUNCTION} Parameters :=",
        ]
        if self.output_filename_prefix is not None:
            top.append(f"output filename prefix := {fmt(self.output_filename_prefix)}")
        top.append(f"disable output := {fmt(self.disable_output)}")
        if self.verbosity is not None:
            top.append(f"verbosity := {self.verbosity}")
        init = (
            fmt(int(self.initial_estimate)) if isinstance(self.initial_estimate, float) else fmt(self.initial_estimate)
        )
        top += [
            f"number of subsets := {self.num_subsets}",
            f"start at subset := {self.start_subset_num}",
            f"number of subiterations := {self.num_subiterations}",
            f"start at subiteration number := {self.start_subiteration_num}",
            f"save estimates at subiteration intervals := {self.save_interval}",
            f"initial estimate := {init}",
            f"enforce initial positivity condition := {fmt(self.enforce_initial_positivity)}",
            f"MAP model := {self.map_model}",
            f"maximum relative change := {fmt(self.maximum_relative_change)}",
            f"minimum relative change := {fmt(self.minimum_relative_change)}",
            f"report objective function values interval := {self.report_objective_function_values_interval}",
            *filter_par_lines("inter_update_filter", self.inter_update_filter, self.inter_update_filter_interval),
            *filter_par_lines(
                "inter_iteration_filter", self.inter_iteration_filter, self.inter_iteration_filter_interval
            ),
            *filter_par_lines("post_filter", self.post_filter),
        ]
        return "\n".join(["OSMAPOSLParameters :=", *("  " + s for s in top), "END :=", ""])


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(OsmaposlSettings) if f.default is not dataclasses.MISSING}


_ROOT = canonical_key("OSMAPOSLParameters")
_KOSMAPOSL = canonical_key("KOSMAPOSLParameters")
#: objective functions only STIR has, as (what, the STIR program that runs the file with the plugin;
#: None: no stirgpu projector can serve it there either)
_STIR_ONLY_OBJECTIVES = {
    canonical_key("PoissonLogLikelihoodWithLinearKineticModelAndDynamicProjectionData"): (
        "the kinetic-model objective function (STIR's POSMAPOSL)",
        "POSMAPOSL",
    ),
    canonical_key("PoissonLogLikelihoodWithLinearModelForMeanAndListModeDataWithProjMatrixByBin"): (
        "list-mode reconstruction",
        None,
    ),
}


_KINETIC = canonical_key("PoissonLogLikelihoodWithLinearKineticModelAndDynamicProjectionData")


def kinetic_objective(root: Block) -> Entry | None:
    """The ``objective function type`` line of ``root`` when it names STIR's kinetic-model
    objective function (POSMAPOSL's and POSSPS's), else None."""
    entry = root.find("objective function type")
    if isinstance(entry, Entry) and canonical_key(entry.value or "") == _KINETIC:
        return entry
    return None


def _refuse_stir_only(root: Block, ctx: Context) -> None:
    """Files stirgpu does not reconstruct at all are refused with one line before anything else is
    read, naming the command that runs them in STIR with stirgpu's plugin where there is one."""
    if root.key == _KOSMAPOSL:
        ctx.report(
            "not an OSMAPOSL parameter file but a KOSMAPOSL one (kernelised EM): run it with 'stirgpu kosmaposl' "
            f"(or in STIR, {plugin_hint('KOSMAPOSL', ctx.path)})",
            root.line,
        )
    elif root.key != _ROOT:
        ossps = ""
        if root.key == canonical_key("OSSPSParameters"):
            kinetic = kinetic_objective(root)
            ossps = f"; {plugin_hint('POSSPS', ctx.path)}" if kinetic else "; run an OSSPS file with 'stirgpu ossps'"
        ctx.report(
            f"not an OSMAPOSL parameter file: it starts with '{root.raw_key} :=' instead of 'OSMAPOSLParameters :='"
            + ossps,
            root.line,
        )
    else:
        entry = root.find("objective function type")
        if isinstance(entry, Entry) and (refused := _STIR_ONLY_OBJECTIVES.get(canonical_key(entry.value or ""))):
            what, program = refused
            how = (
                plugin_hint(program, ctx.path)
                if program is not None
                else "STIR's list-mode objective function projects with a projection matrix ('Matrix type'), which "
                "neither stirgpu nor its STIR plugin provides: run the file with STIR's own OSMAPOSL"
            )
            ctx.report(
                f"'objective function type := {entry.value}': {what} is not implemented by stirgpu; {how}", entry.line
            )
    ctx.check()


def osmaposl_settings_from_block(
    root: Block, *, base_dir: str | os.PathLike | None = None, check_files: bool = False
) -> OsmaposlSettings:
    """Build :class:`OsmaposlSettings` from a parsed ``OSMAPOSLParameters`` block.

    Every problem -- unknown keys, unsupported features, out-of-range values, values that
    contradict each other and, with ``check_files``, missing input files and missing or
    unwritable output folders -- is collected, and all are raised together as one
    :class:`~stirgpu.errors.ParFileProblems`."""
    ctx = Context(root.path, Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd())))
    _refuse_stir_only(root, ctx)
    top = read_block(root, _TOP_KEYS, ctx, hints=_TOP_HINTS)
    objective = top.pop("objective", None)
    if objective is None and "objective" not in ctx.failed:
        ctx.report(f"'{root.raw_key}' needs 'objective function type := {OBJECTIVE_FUNCTION}'", root.line)
    found: dict[str, Found] = {**(objective.value if objective is not None else {}), **top}
    values = {k: f.value for k, f in found.items()}
    lines = {k: f.line for k, f in found.items()}
    if objective is not None:
        lines["objective_function"] = objective.line
    _check_values(values, lines, ctx, root)
    if check_files:

        def get(field: str):
            return values.get(field, _DEFAULTS.get(field))

        for field, message in missing_inputs(input_files(get)) + unwritable(output_folders(get)):
            ctx.report(message, lines.get(field, root.line))
    ctx.check()
    path = None if ctx.path is None else Path(ctx.path)
    values["projectors"] = dataclasses.replace(values["projectors"], path=path, line=lines["projectors"])
    return OsmaposlSettings(**values, path=path, lines=tuple(lines.items()))


def _check_values(values: dict, lines: dict, ctx: Context, root: Block) -> None:
    """The checks across keys (reported to ``ctx``); ``values`` becomes OsmaposlSettings' fields.
    A check whose keys could not be read is skipped: their own problem is reported already."""

    def report(field: str, message: str) -> None:
        ctx.report(message, lines.get(field, root.line))

    def readable(*fields: str) -> bool:
        return not ctx.failed.intersection(fields)

    check_filter_intervals(values, lines, report)
    _prior_lines(values, lines)
    _check_map_model(values, report)
    for unused in (
        "output_file_format",
        "randomise_subset_order",
        "write_update_image",
        "z_zoom",
    ):
        values.pop(unused, None)  # validated by their parsers: only the STIR defaults get here
    for k in ("xy_output_image_size", "z_output_image_size", "max_segment_num_to_process"):
        if values.get(k) == -1:
            values[k] = None

    n_subsets = values.get("num_subsets", 1)
    n_subiter = values.get("num_subiterations", 1)
    if values.get("start_subset_num", 0) >= n_subsets and readable("num_subsets"):
        report(
            "start_subset_num",
            f"'start at subset := {values['start_subset_num']}' must be below 'number of subsets' ({n_subsets})",
        )
    if values.get("save_interval", 1) > n_subiter and readable("num_subiterations"):
        report(
            "save_interval",
            f"'save estimates at subiteration intervals := {values['save_interval']}' "
            f"must not exceed 'number of subiterations' ({n_subiter}) (STIR: range error)",
        )
    if values.get("minimum_relative_change", 0.0) > values.get("maximum_relative_change", FLOAT32_MAX) and readable(
        "minimum_relative_change", "maximum_relative_change"
    ):
        report("minimum_relative_change", "'minimum relative change' exceeds 'maximum relative change'")
    disable = values.get("disable_output", False)
    prefix = values.pop("output_filename_prefix", "")
    if not prefix and not disable and readable("disable_output", "output_filename_prefix"):
        report(
            "output_filename_prefix", f"'{root.raw_key}' needs 'output filename prefix :=' (or 'disable output := 1')"
        )
    values["output_filename_prefix"] = ctx.resolve(prefix) if prefix else None


def _check_map_model(values: dict, report) -> None:
    """STIR's ``set_MAP_model`` (called only when the prior is not zero) compares exactly, so
    'Multiplicative' is an error there, and one here; without a prior the key does nothing."""
    model = values.get("map_model")
    if model is None:
        return
    prior = values.get("prior")
    if prior is not None and not prior.is_zero and model not in ("additive", "multiplicative"):
        report(
            "map_model",
            f"'MAP model := {model}': with a prior STIR accepts only 'additive' or 'multiplicative', "
            f"spelt exactly so (lower case)",
        )
    values["map_model"] = model.lower()


def _prior_lines(values: dict, lines: dict) -> None:
    """The lines of the prior block's keys, as ``prior.<field>`` (for ``OsmaposlSettings.error``)."""
    prior = values.get("prior")
    if prior is not None:
        lines.update({f"prior.{k}": v for k, v in prior.lines})


def read_osmaposl_par(
    path: str | os.PathLike,
    *,
    base_dir: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    check_files: bool = False,
) -> OsmaposlSettings:
    """Read and validate an OSMAPOSL parameter file.

    ``base_dir``: where relative file names are taken from; None means the current directory
    (what STIR does).  ``env`` replaces ``os.environ`` for ``${VAR}``.  Raises
    :class:`~stirgpu.errors.ParFileProblems` listing *every* problem (file and line each) of
    anything malformed or unsupported.  Nothing is read but the parameter file itself; with
    ``check_files`` the same exception also lists missing input files and missing or
    unwritable output folders (:meth:`OsmaposlSettings.check_files`).
    """
    return osmaposl_settings_from_block(parse_par_file(path, env=env), base_dir=base_dir, check_files=check_files)
