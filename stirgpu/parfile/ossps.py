"""OSSPS parameter files -> :class:`OsspsSettings` (typed, validated, STIR's defaults).

STIR's ``OSSPSParameters`` block shares its objective function, iteration, filter and output
keys with ``OSMAPOSLParameters`` (both derive from STIR's ``IterativeReconstruction``): those
are read by :mod:`.osmaposl`'s key tables into an :class:`~.osmaposl.OsmaposlSettings`
(:attr:`OsspsSettings.common`).  OSSPS's own keys (``OSSPSReconstruction::initialise_keymap``,
defaults from its ``set_defaults``):

* ``relaxation parameter`` (1) and ``relaxation gamma`` (0.1): the step of subiteration ``n``
  is ``relaxation parameter / (1 + relaxation gamma * floor(n / number of subsets))``;
  STIR refuses a parameter <= 0 and a gamma < 0 at set-up, here at their line;
* ``upper bound`` (the largest float32): the estimate is clipped into [0, upper bound];
* ``precomputed denominator``: empty (computed from the objective function, and written as
  ``<prefix>_precomputed_denominator``), ``1`` (all ones) or an image file;
* ``enforce initial positivity condition``: STIR's OSSPS default is 0 (OSMAPOSL's is 1);
* ``write update image``: refused (stirgpu writes no update images).

The kinetic-model objective function (STIR's POSSPS, same root) is refused with one line naming
the plugin command that runs the file.

OSMAPOSL's own keys (``MAP model``, ``maximum/minimum relative change``, the inter-update
filter) are refused here with a hint, as any unknown key.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import ParFileError, ParFileProblems
from .grammar import Block, canonical_key, parse_par_file
from .keymap import Context, Found, Key, Problem, as_bool, as_float, as_path, read_block
from .osmaposl import (
    _TOP_HINTS,
    _TOP_KEYS,
    FLOAT32_MAX,
    OBJECTIVE_FUNCTION,
    OsmaposlSettings,
    _check_values,
    kinetic_objective,
)
from .osmaposl_keys import _refuse_true
from .refusals import plugin_hint

__all__ = ["OsspsSettings", "read_ossps_par", "ossps_settings_from_block"]

#: keys of OSMAPOSLParameters that STIR's OSSPSParameters does not have
_OSMAPOSL_ONLY = {
    canonical_key(k)
    for k in (
        "MAP_model",
        "maximum relative change",
        "minimum relative change",
        "inter-update filter subiteration interval",
        "inter-update filter type",
        "write update image",
    )
}


def _denominator(text: str, ctx: Context) -> Path | float:
    return 1.0 if text == "1" else as_path(text, ctx)


def _relaxation_parameter(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v <= 0:
        raise Problem(f"must be positive (STIR's OSSPS refuses it at set-up), got {text!r}")
    return v


def _relaxation_gamma(text: str, ctx: Context) -> float:
    v = as_float(text, ctx)
    if v < 0:
        raise Problem(f"must be >= 0 (STIR's OSSPS refuses it at set-up), got {text!r}")
    return v


_OSSPS_KEYS = (
    Key("upper bound", "upper_bound", as_float),
    Key("precomputed denominator", "precomputed_denominator", _denominator),
    Key("relaxation parameter", "relaxation_parameter", _relaxation_parameter),
    Key("relaxation gamma", "relaxation_gamma", _relaxation_gamma),
    Key("enforce initial positivity condition", "enforce_initial_positivity", as_bool),
    Key("write update image", "write_update_image", _refuse_true("stirgpu does not write update images")),
)
_TOP = (
    *(k for k in _TOP_KEYS if k.key not in _OSMAPOSL_ONLY and k.field != "enforce_initial_positivity"),
    *_OSSPS_KEYS,
)
_HINTS = {
    **_TOP_HINTS,
    **{k: "an OSMAPOSL key; STIR's OSSPSParameters has no such key" for k in _OSMAPOSL_ONLY},
}
_ROOT = canonical_key("OSSPSParameters")
_OWN_FIELDS = ("upper_bound", "precomputed_denominator", "relaxation_parameter", "relaxation_gamma")


@dataclasses.dataclass(frozen=True)
class OsspsSettings:
    """Everything an OSSPS run needs: :attr:`common` holds the keys OSSPS shares with OSMAPOSL
    (objective function, iterations, filters, outputs; OSMAPOSL-only fields at their defaults,
    ``enforce_initial_positivity`` with OSSPS's default 0); the rest are OSSPS's own."""

    common: OsmaposlSettings
    upper_bound: float = FLOAT32_MAX
    relaxation_parameter: float = 1.0
    relaxation_gamma: float = 0.1
    #: None: computed (and written as ``<prefix>_precomputed_denominator.hv``); 1.0: ones; a file
    precomputed_denominator: Path | float | None = None
    #: ``((field, line), ...)`` of OSSPS's own keys
    lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def path(self) -> Path | None:
        return self.common.path

    def line(self, field: str) -> int | None:
        """The line ``field`` (OSSPS's own or a common one) was read from; None: the default."""
        return dict(self.lines).get(field, self.common.line(field))

    def error(self, field: str, message: str) -> ParFileError:
        return ParFileError(message, self.path, self.line(field))

    def input_files(self) -> dict[str, list[Path]]:
        out = self.common.input_files()
        if isinstance(self.precomputed_denominator, Path):
            out["precomputed_denominator"] = [self.precomputed_denominator]
        return out

    def check_files(self) -> None:
        """Every missing input file (the denominator's too) and unwritable output folder."""
        problems: list[ParFileError] = []
        try:
            self.common.check_files()
        except ParFileProblems as exc:
            problems += exc.problems
        d = self.precomputed_denominator
        if isinstance(d, Path) and not d.is_file():
            problems.append(self.error("precomputed_denominator", f"file not found: {d}"))
        if problems:
            raise ParFileProblems(problems)


def ossps_settings_from_block(
    root: Block, *, base_dir: str | os.PathLike | None = None, check_files: bool = False
) -> OsspsSettings:
    """Build :class:`OsspsSettings` from a parsed ``OSSPSParameters`` block; every problem of
    the file at once (one :class:`~stirgpu.errors.ParFileProblems`), as for OSMAPOSL."""
    ctx = Context(root.path, Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd())))
    if root.key != _ROOT:
        hint = "; run it with 'stirgpu osmaposl'" if root.key == canonical_key("OSMAPOSLParameters") else ""
        ctx.report(
            f"not an OSSPS parameter file: it starts with '{root.raw_key} :=' instead of 'OSSPSParameters :='{hint}",
            root.line,
        )
        ctx.check()
    if (kinetic := kinetic_objective(root)) is not None:
        ctx.report(
            f"'objective function type := {kinetic.value}': the kinetic-model objective function (STIR's "
            f"POSSPS) is not implemented by stirgpu; {plugin_hint('POSSPS', ctx.path)}",
            kinetic.line,
        )
        ctx.check()
    top = read_block(root, _TOP, ctx, hints=_HINTS)
    objective = top.pop("objective", None)
    if objective is None and "objective" not in ctx.failed:
        ctx.report(f"'{root.raw_key}' needs 'objective function type := {OBJECTIVE_FUNCTION}'", root.line)
    own: dict[str, Found] = {f: top.pop(f) for f in _OWN_FIELDS if f in top}
    top.pop("write_update_image", None)
    found: dict[str, Found] = {**(objective.value if objective is not None else {}), **top}
    values = {k: f.value for k, f in found.items()}
    values.setdefault("enforce_initial_positivity", False)  # OSSPS's default
    lines = {k: f.line for k, f in found.items()}
    if objective is not None:
        lines["objective_function"] = objective.line
    _check_values(values, lines, ctx, root)
    ctx.check()
    path = None if ctx.path is None else Path(ctx.path)
    values["projectors"] = dataclasses.replace(values["projectors"], path=path, line=lines["projectors"])
    common = OsmaposlSettings(**values, path=path, lines=tuple(lines.items()))
    settings = OsspsSettings(
        common,
        **{k: f.value for k, f in own.items()},
        lines=tuple(sorted((k, f.line) for k, f in own.items())),
    )
    if check_files:
        settings.check_files()
    return settings


def read_ossps_par(
    path: str | os.PathLike,
    *,
    base_dir: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    check_files: bool = False,
) -> OsspsSettings:
    """Read and validate an OSSPS parameter file (as :func:`~.osmaposl.read_osmaposl_par`)."""
    return ossps_settings_from_block(parse_par_file(path, env=env), base_dir=base_dir, check_files=check_files)
