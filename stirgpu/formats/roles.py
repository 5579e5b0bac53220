"""Which files a run reads and which it writes, and whether a file written is one read.

An input is never written: not by a name spelled differently (``./a.hs``, a symbolic link, a
hard link, STIR's implied extensions -- ``out``, ``out.hs`` and ``out.s`` name the same two
files), and not through the data file an input's header names.  A :class:`FileRole` is a
name as the user gave it, the role it has (``"OUTPUT"``, ``"TEMPLATE"``, a parameter file's
key) and the files behind it; :func:`inputs_written` compares the files written with those
read by what they are on disk (``os.path.samefile`` where both exist, the resolved path
otherwise), never by spelling.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import FormatError
from .naming import output_names

__all__ = ["FileRole", "reads", "writes", "same_file", "inputs_written", "shown_path", "NEVER_WRITTEN"]

#: how every refusal of :func:`inputs_written` ends
NEVER_WRITTEN = "an input is never written, even with --overwrite"


@dataclasses.dataclass(frozen=True)
class FileRole:
    """A name given for one role, and the files it stands for (the first is the name itself,
    or the header STIR makes of it; a header's data file follows)."""

    role: str
    name: str
    files: tuple[Path, ...]


def reads(role: str, name: str | os.PathLike) -> FileRole:
    """An input: the file ``name`` and, when it is an Interfile header, the data file it names
    (relative to the header's folder).  Only files that exist are kept: what does not exist
    cannot be lost."""
    header = Path(name)
    files = [header]
    data = _data_file_named_in(header)
    if data is not None:
        files.append(data)
    return FileRole(role, os.fspath(name), tuple(f for f in files if f.exists()))


def writes(role: str, name: str | os.PathLike, kind) -> FileRole:
    """An output: the header and data file STIR writes for ``name`` (``kind`` is
    :data:`~.naming.PROJDATA` or :data:`~.naming.IMAGE`; see :func:`~.naming.output_names`)."""
    return FileRole(role, os.fspath(name), output_names(name, kind).files)


def _data_file_named_in(header: Path) -> Path | None:
    """The ``name of data file`` of an Interfile header; None where ``header`` is none (a
    parameter file, a picture, a header too broken to say: its reader reports that)."""
    if header.suffix.lower() not in (".hs", ".hv", ".hdr") or not header.is_file():
        return None
    from .interfile import read_header

    try:
        name = read_header(header).get_str("name of data file", default="")
    except (FormatError, OSError, UnicodeError, ValueError):
        return None
    if not name:
        return None
    data = Path(name)
    return data if data.is_absolute() else header.parent / data


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: the same inode where both exist (hard links,
    symbolic links), else the same path once symbolic links, ``.`` and ``..`` are resolved."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def inputs_written(outputs: Iterable[FileRole], inputs: Iterable[FileRole]) -> list[tuple[FileRole, FileRole, str]]:
    """(output, input, message) for every output that would write a file an input reads; the
    message is one line naming both roles, both names and the file."""
    inputs = list(inputs)
    found = []
    for out in outputs:
        for inp in inputs:
            clash = next(((w, r) for w in out.files for r in inp.files if same_file(w, r)), None)
            if clash is not None:
                found.append((out, inp, _message(out, inp, *clash)))
    return found


def _message(out: FileRole, inp: FileRole, written: Path, read: Path) -> str:
    w, r = shown_path(written), shown_path(read)
    if read != inp.files[0]:
        which = "" if w == r else f"which is {r}, "
        how = f"it writes {w}, {which}the data file {_shown_name(inp.name)} names"
    elif w != r:
        how = f"it writes {w}, which is {r}"
    else:
        how = "the same file" if _shown_name(out.name) == _shown_name(inp.name) else f"it writes {w}"
    return f"{out.role} {_shown_name(out.name)} is also the {inp.role} {_shown_name(inp.name)} ({how}): {NEVER_WRITTEN}"


def _shown_name(name: str) -> str:
    """A name as the user gave it (``./a.hs`` stays so), an absolute one below the working
    directory made relative."""
    return shown_path(Path(name)) if os.path.isabs(name) else name


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (parameter files give
    absolute names), else as it is."""
    if path.is_absolute():
        try:
            return os.fspath(path.relative_to(Path.cwd()))
        except ValueError:
            pass
    return os.fspath(path)
