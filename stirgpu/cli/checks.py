"""Checks the commands make before any work, phrased for the command line.

Every output a command will write is checked before anything is computed: its names (STIR's
rule, :func:`stirgpu.formats.naming.output_names`), its folder (exists, writable), and that
it does not exist yet unless ``--overwrite`` is given, and that it is none of the files the
command reads (an input is never written, even with ``--overwrite``:
:mod:`stirgpu.formats.roles`); the ``--timeline`` picture likewise, with an extension
matplotlib can write.  The refusals name the argument and the option to
use (``--overwrite``), not the Python API's keywords.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import GeometryError, StirGpuError
from ..formats.naming import OutputNames, output_names
from ..formats.roles import FileRole, inputs_written

__all__ = [
    "output_files",
    "say_written",
    "check_new",
    "check_folder",
    "check_inputs_kept",
    "timeline_path",
    "set_up_projector",
    "subset_of",
    "memory_size",
    "non_negative_int",
    "positive_int",
]


def check_new(path: Path, overwrite: bool, what: str = "OUTPUT") -> None:
    """An output file must not be a folder (``--overwrite`` does not replace folders), nor
    exist yet unless ``--overwrite``."""
    if path.is_dir():
        raise StirGpuError(f"{what} {path} is a folder, not a file; give a file name")
    if not overwrite and (path.exists() or path.is_symlink()):
        raise StirGpuError(f"{path}: already exists (use --overwrite to replace it)")


def check_inputs_kept(outputs: list[FileRole], inputs: list[FileRole]) -> None:
    """No output is a file the command reads (its name, or the data file its header names),
    however spelled; refused even with ``--overwrite``."""
    found = inputs_written(outputs, inputs)
    if found:
        raise StirGpuError(found[0][2])


def check_folder(folder: Path, what: str) -> None:
    """The folder an output goes to exists and is writable."""
    if not folder.is_dir():
        raise StirGpuError(f"{what}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StirGpuError(f"{what}: folder {folder} is not writable")


def output_files(
    name: str, kind, overwrite: bool, what: str = "OUTPUT", inputs: tuple[FileRole, ...] = ()
) -> OutputNames:
    """The header and data file the output argument ``name`` stands for (STIR's names; ``kind``
    is ``naming.PROJDATA`` or ``naming.IMAGE``), checked: the folder exists and is writable,
    neither file is one of ``inputs`` (:func:`stirgpu.formats.roles.reads`), and neither
    exists unless ``--overwrite``."""
    names = output_names(name, kind)
    check_folder(names.header.parent, f"{what} {name}")
    check_inputs_kept([FileRole(what, name, names.files)], list(inputs))
    for f in names.files:
        check_new(f, overwrite, what)
    return names


def say_written(name: str, names: OutputNames) -> None:
    """Where an output went, when that is not the name given (``out`` -> ``out.hs`` + ``out.s``)."""
    if names.header != Path(name):
        print(f"{name}: written as {names.header} and {names.data} (STIR's names)")


def timeline_path(name: str | None, overwrite: bool, inputs: tuple[FileRole, ...] = ()) -> Path | None:
    """The ``--timeline`` picture, checked: an extension matplotlib writes, a writable
    folder, none of ``inputs``, and not an existing file unless ``--overwrite``."""
    if name is None:
        return None
    from matplotlib.backend_bases import FigureCanvasBase

    p = Path(name)
    kinds = FigureCanvasBase.get_supported_filetypes()
    ext = p.suffix[1:].lower()
    if ext not in kinds:
        found = f"unknown picture extension '{p.suffix}'" if p.suffix else "no extension"
        raise StirGpuError(
            f"--timeline {name}: {found}; give a name with an extension matplotlib can "
            f"write ({', '.join('.' + k for k in sorted(kinds))})"
        )
    check_folder(p.parent, f"--timeline {name}")
    check_inputs_kept([FileRole("--timeline", name, (p,))], list(inputs))
    check_new(p, overwrite, "--timeline")
    return p


def set_up_projector(projector, proj_data_info, image_info, data_name) -> None:
    """``projector.set_up``; data the projectors refuse are an error naming the file."""
    try:
        projector.set_up(proj_data_info, image_info)
    except GeometryError as exc:
        raise StirGpuError(f"{data_name}: {exc}") from None


def subset_of(subset: tuple[int, int] | None, proj_data_info) -> tuple[int, int]:
    """``--subset K/N`` (default 0/1), checked against the data's views before any work."""
    k, n = subset if subset is not None else (0, 1)
    nv = proj_data_info.get_num_views()
    if n > nv:
        raise StirGpuError(f"--subset {k}/{n}: {n} subsets, but the data have only {nv} views")
    return k, n


def memory_size(text: str) -> int:
    """argparse type: a memory size such as 512M or 2G."""
    from ..execution.plan import parse_bytes

    try:
        return parse_bytes(text)
    except StirGpuError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int_at_least(text: str, minimum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if v < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {v}")
    return v


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1)
