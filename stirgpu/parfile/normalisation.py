"""``Bin Normalisation type`` of STIR's objective function: ``None``, ``From ProjData`` (correction
factors stored as projection data) and ``From ECAT8`` (a Siemens component-based norm file,
STIR's ``BinNormalisationFromECAT8``: :mod:`stirgpu.formats.ecat8_factors` computes its factors
for the measured data).

The ``From ECAT8`` block takes STIR's keys: ``normalisation filename`` (or its obsolete spelling
``normalisation_ECAT8_filename``), ``use_gaps``, ``use_detector_efficiencies``,
``use_geometric_factors``, ``use_crystal_interference_factors``, ``use_axial_effects_factors``
(all 1 by default, as STIR) and ``write_components_to_file`` (0 only: STIR's debugging text files
are not written).  ``singles rates`` (and its block) is read over with a logged warning: STIR parses
it but applies no dead time for ECAT8 (its ``use_dead_time`` is off and has no key), so the
factors are the same with or without it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from .grammar import Block
from .keymap import Choice, Context, Key, Problem, TypeKey, as_bool, as_path, read_block

_LOG = logging.getLogger("stirgpu.parfile")

__all__ = ["Ecat8Normalisation", "NORMALISATION_KEY", "normalisation_file", "normalisation_par_lines"]

#: STIR's 'use_*' keys of the ECAT8 block, as Ecat8Normalisation's fields
_SWITCHES = (
    "use_gaps",
    "use_detector_efficiencies",
    "use_geometric_factors",
    "use_crystal_interference_factors",
    "use_axial_effects_factors",
)


@dataclasses.dataclass(frozen=True)
class Ecat8Normalisation:
    """``Bin Normalisation type := From ECAT8``: the norm file's header and STIR's switches
    (:meth:`components` gives them as :class:`stirgpu.formats.ecat8_factors.Ecat8Components`'
    arguments)."""

    path: Path
    use_gaps: bool = True
    use_detector_efficiencies: bool = True
    use_geometric_factors: bool = True
    use_crystal_interference_factors: bool = True
    use_axial_effects_factors: bool = True

    def components(self) -> dict[str, bool]:
        """The component switches without their ``use_`` (``use_gaps`` applies when reading)."""
        return {f.removeprefix("use_"): getattr(self, f) for f in _SWITCHES if f != "use_gaps"}

    def par_lines(self, fmt: Callable[[object], str]) -> list[str]:
        lines = [
            "Bin Normalisation type := From ECAT8",
            "Bin Normalisation From ECAT8 :=",
            f"  normalisation filename := {fmt(self.path)}",
            *(f"  {key} := {fmt(getattr(self, key))}" for key in _SWITCHES),
        ]
        return [*lines, "End Bin Normalisation From ECAT8 :="]


def normalisation_file(value: Path | Ecat8Normalisation | None) -> Path | None:
    """The file a normalisation setting reads (the ECAT8 header), or None."""
    return value.path if isinstance(value, Ecat8Normalisation) else value


def normalisation_par_lines(value: Path | Ecat8Normalisation | None, fmt: Callable[[object], str]) -> list[str]:
    """The lines STIR reads back as ``value``."""
    if value is None:
        return ["Bin Normalisation type := None"]
    if isinstance(value, Ecat8Normalisation):
        return value.par_lines(fmt)
    return [
        "Bin Normalisation type := From ProjData",
        "Bin Normalisation From ProjData :=",
        f"  normalisation projdata filename := {fmt(value)}",
        "End Bin Normalisation From ProjData :=",
    ]


def _projdata_block(block: Block, ctx: Context) -> Path | None:
    found = read_block(block, (Key("normalisation projdata filename", "file", as_path),), ctx)
    if "file" not in found:
        if "file" not in ctx.failed:
            ctx.report(f"'{block.raw_key}' needs 'normalisation projdata filename :='", block.line)
        return None  # (reported: the settings are not built)
    return found["file"].value


def _zero_only(text: str, ctx: Context) -> bool:
    if as_bool(text, ctx):
        raise Problem("is not supported by stirgpu (STIR's debugging text files are not written); set it to 0")
    return False


def _singles_ignored(value: str, line: int, nxt: Block | None, ctx: Context):
    _LOG.warning(
        "%s:%d: 'singles rates := %s' ignored, as STIR ignores it: its ECAT8 normalisation applies no dead time",
        ctx.path or "parameter file",
        line,
        value,
    )
    return None, nxt is not None  # its block, if any, read as part of it


def _ecat8_block(block: Block, ctx: Context) -> Ecat8Normalisation | None:
    keys: tuple[Key | TypeKey, ...] = (
        Key("normalisation filename", "file", as_path),
        Key("normalisation_ECAT8_filename", "file", as_path),
        *(Key(key, key, as_bool) for key in _SWITCHES),
        Key("write_components_to_file", "write", _zero_only),
        TypeKey("singles rates", "singles", (), other=_singles_ignored),
    )
    found = read_block(block, keys, ctx)
    if "file" not in found:
        if "file" not in ctx.failed:
            ctx.report(f"'{block.raw_key}' needs 'normalisation filename :='", block.line)
        return None  # (reported: the settings are not built)
    return Ecat8Normalisation(found["file"].value, **{k: found[k].value for k in _SWITCHES if k in found})


def _refuse_other(value: str, line: int, nxt: Block | None, ctx: Context):
    raise Problem(
        "stirgpu supports 'From ProjData' (correction factors stored as projection data), 'From ECAT8' "
        "(Siemens norm files) and 'None'; convert other normalisations to projection data first"
    )


NORMALISATION_KEY = TypeKey(
    "Bin Normalisation type",
    "normalisation",
    (
        Choice("None"),
        Choice("From ProjData", "Bin Normalisation From ProjData", _projdata_block),
        Choice("From ECAT8", "Bin Normalisation From ECAT8", _ecat8_block),
    ),
    other=_refuse_other,
)
