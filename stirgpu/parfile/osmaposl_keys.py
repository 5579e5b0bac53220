"""The keys of STIR's OSMAPOSL parameter files (``OSMAPOSLParameters`` and its objective
function's block) and the value readers specific to them, as :mod:`.keymap` tables; the OSSPS
and KOSMAPOSL readers take them too."""

from __future__ import annotations

from pathlib import Path

from .filters import filter_type_key
from .grammar import Block, canonical_key
from .keymap import (
    Choice,
    Context,
    Found,
    Key,
    Problem,
    TypeKey,
    as_bool,
    as_float,
    as_path,
    as_str,
    int_at_least,
    read_block,
)
from .normalisation import NORMALISATION_KEY
from .patterns import OBJECTIVE_FUNCTION, FilenamePattern
from .priors import PRIOR_TYPE
from .projectors import PAIR_TYPE


def _file(text: str, ctx: Context) -> Path:
    return as_path(text, ctx)


def _optional_file(text: str, ctx: Context) -> Path | None:
    return None if text == "0" else as_path(text, ctx)  # STIR: "0" means none


def _initial_estimate(text: str, ctx: Context) -> Path | float:
    return {"0": 0.0, "1": 1.0}[text] if text in ("0", "1") else as_path(text, ctx)


def _sensitivity(text: str, ctx: Context) -> Path:
    if text == "1":
        raise Problem(
            "'1' (STIR's sensitivity forced to all ones) is not supported by stirgpu; give a file "
            "or let stirgpu compute the sensitivity"
        )
    return as_path(text, ctx)


def _pattern(text: str, ctx: Context) -> FilenamePattern:
    try:
        return FilenamePattern.resolve(text, ctx.base_dir)
    except ValueError as exc:
        raise Problem(str(exc)) from None


def _positive_float(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v <= 0:
        raise Problem(f"must be positive, got {text!r}")
    return v


def _non_negative_float(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v < 0:
        raise Problem(f"must be >= 0, got {text!r}")
    return v


def _map_model(text: str, ctx: Context) -> str:
    # kept as written: with a non-zero prior STIR wants the exact lower-case words (_check_map_model)
    v = text.strip()
    if v.lower() not in ("additive", "multiplicative"):
        raise Problem(f"must be 'additive' or 'multiplicative', got {text!r}")
    return v


def _int_any(text: str, ctx: Context) -> int:
    return int_at_least(-(2**31))(text, ctx)


def _refuse_true(what: str):
    def parse(text: str, ctx: Context) -> bool:
        if as_bool(text, ctx):
            raise Problem(f"is not supported by stirgpu ({what}); set it to 0")
        return False

    return parse


def _refuse(what: str):
    def other(value: str, line: int, nxt: Block | None, ctx: Context):
        raise Problem(what)

    return other


def _interfile_block(block: Block, ctx: Context) -> str:
    def number_format(text: str, c: Context) -> str:
        if canonical_key(text) != "float":
            raise Problem(f"only 'float' output is supported by stirgpu, got {text!r}")
        return "float"

    def bytes_per_pixel(text: str, c: Context) -> int:
        if int_at_least(1)(text, c) != 4:
            raise Problem(f"only 4-byte float output is supported by stirgpu, got {text!r}")
        return 4

    def byte_order(text: str, c: Context) -> str:
        if canonical_key(text) != "littleendian":
            raise Problem(f"stirgpu writes little-endian images only, got {text!r}")
        return "littleendian"

    # the four keys STIR lists for this block (its parameter_info); only STIR's defaults are accepted
    read_block(
        block,
        (
            Key("number format", "number_format", number_format),
            Key("number_of_bytes_per_pixel", "bytes", bytes_per_pixel),
            Key("byte order", "byte_order", byte_order),
            Key("scale to write data", "scale", _only("0", "stirgpu writes float images unscaled")),
        ),
        ctx,
    )
    return "Interfile"


def _only(value: str, why: str):
    """A key accepted only with its STIR default ``value`` (which changes nothing here)."""

    def parse(text: str, ctx: Context) -> str:
        if as_float(text, ctx) != float(value):
            raise Problem(f"only {value} is supported by stirgpu ({why}), got {text!r}")
        return value

    return parse


_OBJECTIVE_KEYS = (
    Key("input file", "input_file", _file),
    Key("maximum absolute segment number to process", "max_segment_num_to_process", int_at_least(0, special=-1)),
    Key("zero end planes of segment 0", "zero_end_planes_of_segment_0", as_bool),
    Key("zoom", "zoom", _positive_float),
    Key("z zoom", "z_zoom", _only("1", "STIR's default image with zoom in z is not implemented")),
    Key("XY output image size (in pixels)", "xy_output_image_size", int_at_least(1, special=-1)),
    Key("Z output image size (in pixels)", "z_output_image_size", int_at_least(1, special=-1)),
    Key("Z offset (in mm)", "z_offset_mm", as_float),
    PAIR_TYPE,
    Key("additive sinogram", "additive_sinogram", _optional_file),
    Key("time frame definition filename", "time_frame_definition_filename", _file),
    Key("time frame number", "time_frame_number", int_at_least(1)),
    NORMALISATION_KEY,
    Key("sensitivity filename", "sensitivity_filename", _sensitivity),
    Key("subset sensitivity filenames", "subset_sensitivity_filenames", _pattern),
    Key("recompute sensitivity", "recompute_sensitivity", as_bool),
    Key("use subset sensitivities", "use_subset_sensitivities", as_bool),
    Key("use time-of-flight sensitivities", "use_tof_sensitivities", as_bool),
    PRIOR_TYPE,
)

# OSMAPOSLParameters keys other than 'objective function type' (added below, with its reader)
_TOP_PLAIN_KEYS = (
    Key("output filename prefix", "output_filename_prefix", as_str),
    TypeKey(
        "output file format type",
        "output_file_format",
        (Choice("Interfile", "Interfile Output File Format Parameters", _interfile_block),),
        other=_refuse("stirgpu writes Interfile images only"),
    ),
    filter_type_key("post-filter type", "post_filter", always_applied=True),
    Key("disable output", "disable_output", as_bool),
    Key("verbosity", "verbosity", _int_any),
    Key("number of subiterations", "num_subiterations", int_at_least(1)),
    Key("start at subiteration number", "start_subiteration_num", int_at_least(1)),
    Key("save estimates at subiteration intervals", "save_interval", int_at_least(1)),
    Key("initial estimate", "initial_estimate", _initial_estimate),
    Key("number of subsets", "num_subsets", int_at_least(1)),
    Key("start at subset", "start_subset_num", int_at_least(0)),
    Key(
        "uniformly randomise subset order",
        "randomise_subset_order",
        _refuse_true("a random subset order makes results irreproducible"),
    ),
    Key("inter-iteration filter subiteration interval", "inter_iteration_filter_interval", int_at_least(0)),
    filter_type_key("inter-iteration filter type", "inter_iteration_filter", always_applied=False),
    Key("report objective function values interval", "report_objective_function_values_interval", int_at_least(0)),
    Key("enforce initial positivity condition", "enforce_initial_positivity", as_bool),
    Key("inter-update filter subiteration interval", "inter_update_filter_interval", int_at_least(0)),
    filter_type_key("inter-update filter type", "inter_update_filter", always_applied=False),
    Key("MAP_model", "map_model", _map_model),
    Key("maximum relative change", "maximum_relative_change", _positive_float),
    Key("minimum relative change", "minimum_relative_change", _non_negative_float),
    Key("write update image", "write_update_image", _refuse_true("stirgpu does not write update images")),
)

_OBJECTIVE_BLOCK = f"{OBJECTIVE_FUNCTION} Parameters"
_TOP_HINTS = {
    **{s.key: f"it belongs inside the '{_OBJECTIVE_BLOCK}' block" for s in _OBJECTIVE_KEYS},
    canonical_key(
        "uniform initial estimate"
    ): "STIR has no such key; 'initial estimate := 1' (the default) starts from a uniform image of ones",
}
_OBJECTIVE_HINTS = {
    s.key: f"it belongs in 'OSMAPOSLParameters', outside the '{_OBJECTIVE_BLOCK}' block" for s in _TOP_PLAIN_KEYS
}


def _objective(block: Block, ctx: Context) -> dict[str, Found]:
    found = read_block(block, _OBJECTIVE_KEYS, ctx, hints=_OBJECTIVE_HINTS)
    for field, name in (("input_file", "input file"), ("projectors", "projector pair type")):
        if field not in found and field not in ctx.failed:
            extra = (
                (
                    "; STIR would fall back to its ray-tracing projectors, which stirgpu does not implement: "
                    "add 'projector pair type := Parallelproj'"
                )
                if field == "projectors"
                else ""
            )
            ctx.report(f"'{block.raw_key}' needs '{name} :='{extra}", block.line)
    return found


_TOP_KEYS = (
    TypeKey(
        "objective function type",
        "objective",
        (Choice(OBJECTIVE_FUNCTION, _OBJECTIVE_BLOCK, _objective),),
        other=_refuse(f"stirgpu reconstructs with '{OBJECTIVE_FUNCTION}' only"),
    ),
    *_TOP_PLAIN_KEYS,
)
