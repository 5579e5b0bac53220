"""The files an OSMAPOSL-style run reads and the folders it writes into, from its settings or
from the values of a file with problems (``get(field)`` gives a field's value either way), and
the problems of those that are missing or not writable."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ParFileError, ParFileProblems
from .normalisation import normalisation_file
from .priors import prior_input_files, prior_output_folders

__all__ = ["input_files", "output_folders", "missing_inputs", "unwritable", "raise_all"]


def _sensitivity_computed(get) -> bool:
    if get("recompute_sensitivity"):
        return True
    return (
        get("subset_sensitivity_filenames") if get("use_subset_sensitivities") else get("sensitivity_filename")
    ) is None


def _sensitivity_files(get) -> tuple[str, list[Path]]:
    """(field, files) of the sensitivities: read, or written when computed."""
    if get("use_subset_sensitivities"):
        pattern = get("subset_sensitivity_filenames")
        files = [] if pattern is None else [pattern.format(k) for k in range(get("num_subsets"))]
        return "subset_sensitivity_filenames", files
    name = get("sensitivity_filename")
    return "sensitivity_filename", [] if name is None else [name]


def input_files(get) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = dict(prior_input_files(get("prior")))
    for f in ("input_file", "additive_sinogram", "normalisation", "time_frame_definition_filename"):
        name = normalisation_file(get(f)) if f == "normalisation" else get(f)
        if name is not None:
            out[f] = [name]
    if isinstance(get("initial_estimate"), Path):
        out["initial_estimate"] = [get("initial_estimate")]
    if not _sensitivity_computed(get):
        field, files = _sensitivity_files(get)
        out[field] = files
    return out


def output_folders(get) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = dict(prior_output_folders(get("prior")))
    if get("output_filename_prefix") is not None and not get("disable_output"):
        out["output_filename_prefix"] = [Path(get("output_filename_prefix")).parent]
    if _sensitivity_computed(get):
        field, files = _sensitivity_files(get)
        if files:
            out[field] = sorted({f.parent for f in files})
    return out


def missing_inputs(files: dict[str, list[Path]]) -> list[tuple[str, str]]:
    return [
        (field, f"file not found: {f}" if not f.exists() else f"not a file: {f}")
        for field, fs in files.items()
        for f in fs
        if not f.is_file()
    ]


def unwritable(folders: dict[str, list[Path]]) -> list[tuple[str, str]]:
    out = []
    for field, fs in folders.items():
        for d in fs:
            if not d.is_dir():
                out.append((field, f"output folder {d} does not exist"))
            elif not os.access(d, os.W_OK):
                out.append((field, f"output folder {d} is not writable"))
    return out


def raise_all(path, lines, problems: list[tuple[str, str]]) -> None:
    where = dict(lines)
    if problems:
        raise ParFileProblems([ParFileError(m, path, where.get(field)) for field, m in problems])
