"""The file names STIR gives an Interfile output: header and data file from one name.

STIR's rule (``ProjDataInterfile``, ``write_basic_interfile``): a name ending in the header
extension (``.hs`` / ``.hv``) has its data file beside it with the data extension
(``.s`` / ``.v``); a name without an extension gets both; a name with another extension is the
data file, and the header is that name with the header extension.  So ``out``, ``out.hs``
and ``out.s`` all give ``out.hs`` + ``out.s``, and ``out.raw`` gives ``out.hs`` + ``out.raw``.

Unlike STIR, the extensions of the other kind are refused: STIR would write projection data
into ``out.v`` beside an ``out.hs`` (or an image into ``out.s``), which is a mistake waiting to
overwrite an image.  The header extension is matched regardless of case (STIR's match is
case-sensitive: ``OUT.HS`` would become the data file of ``OUT.hs``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..errors import FormatError

__all__ = ["OutputNames", "PROJDATA", "IMAGE", "output_names"]


@dataclasses.dataclass(frozen=True)
class _Kind:
    what: str
    header: str
    data: str
    other: tuple[str, ...]  #: extensions of the other kind (refused)


PROJDATA = _Kind("projection data", ".hs", ".s", (".hv", ".v"))
IMAGE = _Kind("images", ".hv", ".v", (".hs", ".s"))


@dataclasses.dataclass(frozen=True)
class OutputNames:
    """The two files an output name stands for."""

    header: Path
    data: Path

    @property
    def files(self) -> tuple[Path, Path]:
        return self.header, self.data


def output_names(name: str | os.PathLike, kind: _Kind = PROJDATA) -> OutputNames:
    """The header and data file STIR writes for ``name`` (see the module docstring);
    ``kind`` is :data:`PROJDATA` or :data:`IMAGE`."""
    p = Path(name)
    if not p.name or p.name in (".", ".."):
        raise FormatError(f"is not a file name (an output needs one, e.g. out{kind.header})", path=p)
    suffix = p.suffix.lower()
    if suffix in kind.other:
        raise FormatError(
            f"'{p.suffix}' is an extension of the other kind of Interfile file; "
            f"{kind.what} are written as {kind.header} + {kind.data}",
            path=p,
        )
    if suffix == kind.header:
        return OutputNames(p, p.with_suffix(kind.data))
    if not suffix:
        return OutputNames(p.with_name(p.name + kind.header), p.with_name(p.name + kind.data))
    return OutputNames(p.with_suffix(kind.header), p)
