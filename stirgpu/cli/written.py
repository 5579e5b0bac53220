"""The last line of a command that wrote files: what it wrote, where, and how much.

``wrote out.hs (+ out.s, 4.0 MiB)`` -- the Interfile header as the user named it, its data
file (named in the header, beside it) and the size of both on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..execution.plan import format_bytes, plural

__all__ = ["interfile_pair", "describe_interfile", "wrote_interfile", "wrote_folder", "shown"]


def interfile_pair(header: str | os.PathLike) -> tuple[Path, Path | None]:
    """(header, data file named by its ``name of data file``) -- None where it names none."""
    from ..formats.interfile import read_header

    h = Path(header)
    name = read_header(h).get_str("name of data file", default="")
    if not name:
        return h, None
    data = Path(name)
    return h, (data if data.is_absolute() else h.parent / data)


def _size(paths) -> int:
    return sum(p.stat().st_size for p in paths if p is not None and p.is_file())


def shown(path: str | os.PathLike) -> Path:
    """``path`` as a user in the working directory would type it: relative when it lies below
    the working directory (parameter files give absolute names), else as it is."""
    p = Path(path)
    if p.is_absolute():
        try:
            return p.relative_to(Path.cwd())
        except ValueError:
            pass
    return p


def describe_interfile(header: str | os.PathLike) -> str:
    """``"out.hs (+ out.s, 4.0 MiB)"``: the header, its data file and their size."""
    h, data = interfile_pair(header)
    extra = "" if data is None else f"+ {data.name}, "
    return f"{shown(h)} ({extra}{format_bytes(_size((h, data)))})"


def wrote_interfile(header: str | os.PathLike) -> str:
    """``"wrote out.hs (+ out.s, 4.0 MiB)"``."""
    return f"wrote {describe_interfile(header)}"


def wrote_folder(folder: str | os.PathLike, groups: dict[str, list]) -> str:
    """``"wrote demo/: 7 inputs, 3 estimates, 2 pictures (12.3 MiB)"``: ``groups`` maps a noun
    (singular) to the files of that kind in ``folder`` (Interfile headers count with their data
    files' sizes)."""
    folder = Path(folder)
    files: list[Path] = []
    for paths in groups.values():
        for p in paths:
            p = Path(p)
            files.append(p)
            data = interfile_pair(p)[1] if p.suffix.lower() in (".hs", ".hv") else None
            if data is not None:
                files.append(data)
    counts = ", ".join(plural(len(v), k) for k, v in groups.items() if v)
    return f"wrote {folder}{os.sep}: {counts} ({format_bytes(_size(set(files)))})"
