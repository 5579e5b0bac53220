"""KOSMAPOSL parameter files -> :class:`KosmaposlSettings` (typed, validated, STIR's defaults).

STIR's ``KOSMAPOSLParameters`` block is an ``OSMAPOSLParameters`` block (its objective function,
iteration, filter and output keys, read by :mod:`.osmaposl`'s key tables into
:attr:`KosmaposlSettings.common`) plus the kernel's keys (``KOSMAPOSLReconstruction::initialise_keymap``,
defaults from its ``set_defaults``):

* ``number of neighbours`` (3), ``number of non-zero feature elements`` (1: STIR's compact
  kernel; more: STIR's norms of feature vectors, :mod:`stirgpu.kernels.kernelised.cpu`);
* ``sigma_m`` (a list, one per anatomical image; none by default), ``sigma_p``, ``sigma_dp``,
  ``sigma_dm`` (1), ``only_2D`` (0), ``hybrid`` (0);
* ``anatomical image filenames`` (a list); ``kernelised output filename prefix`` (empty: STIR then
  writes ``_<n>.hv``); ``freeze iterative kernel at subiteration number`` (-1: never).

Lists are read as STIR reads them: ``{a, b}``, or one value without braces (``sigma_m := 1``).
STIR's checks at ``post_processing`` and ``set_up`` are made here, at their lines: as many
``sigma_m`` as anatomical images, an anatomical image unless ``hybrid``, no freeze at 0.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

from ..errors import ParFileError, ParFileProblems
from .grammar import Block, canonical_key, parse_par_file, split_list
from .keymap import Context, Found, Key, Problem, as_bool, as_float, as_int, as_str, int_at_least, read_block
from .osmaposl import _TOP_HINTS, _TOP_KEYS, OBJECTIVE_FUNCTION, OsmaposlSettings, _check_values

__all__ = ["KosmaposlSettings", "read_kosmaposl_par", "kosmaposl_settings_from_block"]


def _float_list(text: str, ctx: Context) -> tuple[float, ...]:
    try:
        items = split_list(text)
    except ValueError as exc:
        raise Problem(str(exc)) from None
    return tuple(as_float(s, ctx) for s in items)


def _path_list(text: str, ctx: Context) -> tuple[Path, ...]:
    try:
        return tuple(ctx.resolve(s) for s in split_list(text))
    except ValueError as exc:
        raise Problem(str(exc)) from None


def _freeze(text: str, ctx: Context) -> int:
    v = as_int(text, ctx)
    if v == 0:
        raise Problem("the kernel cannot be frozen at subiteration 0 as subiteration number starts from 1 (STIR)")
    return v


_KERNEL_KEYS = (
    Key("number of neighbours", "num_neighbours", int_at_least(1)),
    Key("number of non-zero feature elements", "num_non_zero_features", int_at_least(1)),
    Key("sigma_m", "sigma_m", _float_list),
    Key("sigma_p", "sigma_p", as_float),
    Key("sigma_dp", "sigma_dp", as_float),
    Key("sigma_dm", "sigma_dm", as_float),
    Key("only_2D", "only_2d", as_bool),
    Key("hybrid", "hybrid", as_bool),
    Key("anatomical image filenames", "anatomical_image_filenames", _path_list),
    Key("kernelised output filename prefix", "kernelised_output_filename_prefix", as_str),
    Key("freeze iterative kernel at subiteration number", "freeze_at_subiteration", _freeze),
)
_OWN_FIELDS = tuple(k.field for k in _KERNEL_KEYS)
_ROOT = canonical_key("KOSMAPOSLParameters")


@dataclasses.dataclass(frozen=True)
class KosmaposlSettings:
    """Everything a KOSMAPOSL run needs: :attr:`common` holds the OSMAPOSL keys; the rest are the
    kernel's (STIR's defaults)."""

    common: OsmaposlSettings
    num_neighbours: int = 3
    num_non_zero_features: int = 1
    sigma_m: tuple[float, ...] = ()
    sigma_p: float = 1.0
    sigma_dp: float = 1.0
    sigma_dm: float = 1.0
    only_2d: bool = False
    hybrid: bool = False
    anatomical_image_filenames: tuple[Path, ...] = ()
    #: as written in the file (STIR's default: empty)
    kernelised_output_filename_prefix: str = ""
    freeze_at_subiteration: int = -1
    #: the folder relative names are taken from (the kernelised prefix's)
    base_dir: Path = dataclasses.field(default=Path("."), compare=False)
    #: ``((field, line), ...)`` of the kernel's keys
    lines: tuple[tuple[str, int], ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def path(self) -> Path | None:
        return self.common.path

    def line(self, field: str) -> int | None:
        """The line ``field`` (the kernel's or a common one) was read from; None: the default."""
        return dict(self.lines).get(field, self.common.line(field))

    def error(self, field: str, message: str) -> ParFileError:
        return ParFileError(message, self.path, self.line(field))

    def kernelised_prefix(self) -> str:
        """The emission images' prefix as STIR opens it: the file's text, relative to the base
        folder (``<base>/_<n>.hv`` for STIR's empty default)."""
        return os.path.join(self.base_dir, self.kernelised_output_filename_prefix)

    def check_files(self) -> None:
        """Every missing input file (the anatomical images too) and unwritable output folder."""
        problems: list[ParFileError] = []
        try:
            self.common.check_files()
        except ParFileProblems as exc:
            problems += exc.problems
        for f in self.anatomical_image_filenames:
            if not f.is_file():
                problems.append(self.error("anatomical_image_filenames", f"file not found: {f}"))
        folder = Path(self.kernelised_prefix() + "_").parent
        if not (folder.is_dir() and os.access(folder, os.W_OK)):
            problems.append(
                self.error(
                    "kernelised_output_filename_prefix", f"output folder {folder} does not exist or is not writable"
                )
            )
        if problems:
            raise ParFileProblems(sorted(problems, key=lambda p: p.line or 0))


def _check_kernel(own: dict[str, Found], ctx: Context, root: Block) -> None:
    """STIR's checks across the kernel's keys (its post_processing and set_up), at their lines."""
    sigma_m = own.get("sigma_m")
    names = own.get("anatomical_image_filenames")
    n_sigma = len(sigma_m.value) if sigma_m else 0
    n_images = len(names.value) if names else 0
    if "sigma_m" in ctx.failed or "anatomical_image_filenames" in ctx.failed:
        return
    if n_sigma != n_images:
        first = sigma_m if sigma_m is not None else names
        line = first.line if first is not None else root.line
        ctx.report(
            f"{n_sigma} sigma_m values for {n_images} anatomical image filenames: the number of sigma_m parameters "
            "must be the same as the number of anatomical image filenames (STIR)",
            line,
        )
    hybrid = own.get("hybrid")
    if n_images == 0 and not (hybrid and hybrid.value) and "hybrid" not in ctx.failed:
        ctx.report(
            "'anatomical image filenames' names no image and 'hybrid' is 0: the kernel needs an anatomical image "
            "unless it is hybrid (STIR: anatomical image has not been set)",
            hybrid.line if hybrid else root.line,
        )


def kosmaposl_settings_from_block(
    root: Block, *, base_dir: str | os.PathLike | None = None, check_files: bool = False
) -> KosmaposlSettings:
    """Build :class:`KosmaposlSettings` from a parsed ``KOSMAPOSLParameters`` block; every problem
    of the file at once (one :class:`~stirgpu.errors.ParFileProblems`), as for OSMAPOSL."""
    ctx = Context(root.path, Path(os.path.abspath(base_dir if base_dir is not None else os.getcwd())))
    if root.key != _ROOT:
        ctx.report(
            f"not a KOSMAPOSL parameter file: it starts with '{root.raw_key} :=' instead of 'KOSMAPOSLParameters :='",
            root.line,
        )
        ctx.check()
    top = read_block(root, (*_TOP_KEYS, *_KERNEL_KEYS), ctx, hints=_TOP_HINTS)
    objective = top.pop("objective", None)
    if objective is None and "objective" not in ctx.failed:
        ctx.report(f"'{root.raw_key}' needs 'objective function type := {OBJECTIVE_FUNCTION}'", root.line)
    own: dict[str, Found] = {f: top.pop(f) for f in _OWN_FIELDS if f in top}
    _check_kernel(own, ctx, root)
    found: dict[str, Found] = {**(objective.value if objective is not None else {}), **top}
    values = {k: f.value for k, f in found.items()}
    lines = {k: f.line for k, f in found.items()}
    if objective is not None:
        lines["objective_function"] = objective.line
    _check_values(values, lines, ctx, root)
    ctx.check()
    path = None if ctx.path is None else Path(ctx.path)
    values["projectors"] = dataclasses.replace(values["projectors"], path=path, line=lines["projectors"])
    common = OsmaposlSettings(**values, path=path, lines=tuple(lines.items()))
    settings = KosmaposlSettings(
        common,
        **{k: f.value for k, f in own.items()},
        base_dir=ctx.base_dir,
        lines=tuple(sorted((k, f.line) for k, f in own.items())),
    )
    if check_files:
        settings.check_files()
    return settings


def read_kosmaposl_par(
    path: str | os.PathLike,
    *,
    base_dir: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
    check_files: bool = False,
) -> KosmaposlSettings:
    """Read and validate a KOSMAPOSL parameter file (as :func:`~.osmaposl.read_osmaposl_par`)."""
    return kosmaposl_settings_from_block(parse_par_file(path, env=env), base_dir=base_dir, check_files=check_files)
