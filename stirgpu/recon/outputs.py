"""Every file an OSMAPOSL run writes, checked against the files it reads and those on disk.

* An input is never written, however named (:mod:`stirgpu.formats.roles`): no estimate, no
  computed sensitivity and no prior gradient may be the parameter file, the input data, the
  additive sinogram, the normalisation, the initial estimate, a sensitivity read, the kappa
  image, or a data file one of their headers names.  Refused whatever ``overwrite`` says.
* Without ``overwrite`` an existing output is refused, and so are an earlier run's estimates
  with the same prefix that this run would leave beside its own: ``prefix_N`` for the
  subiterations ``N`` from the start subiteration on that this run does not save (a run
  saving up to 8 beside an older ``osem_24.hv``).  Estimates before the start subiteration
  belong to the run this one continues (its initial estimate among them) and are kept.
* With ``overwrite`` those earlier estimates are removed before the first projection
  (:meth:`RunOutputs.remove_earlier`), so no older estimate sits silently beside the new ones.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..errors import FormatError
from ..formats.naming import IMAGE
from ..formats.roles import FileRole, inputs_written, reads, same_file, shown_path, writes
from .naming import estimate_filename

__all__ = ["RunOutputs", "run_outputs", "KEYS"]

#: the parameter-file keys of the settings fields that name files
KEYS = {
    "input_file": "input file",
    "additive_sinogram": "additive sinogram",
    "normalisation": "normalisation projdata filename",
    "time_frame_definition_filename": "time frame definition filename",
    "initial_estimate": "initial estimate",
    "sensitivity_filename": "sensitivity filename",
    "subset_sensitivity_filenames": "subset sensitivity filenames",
    "prior.kappa_filename": "kappa filename",
    "prior.gradient_filename_prefix": "gradient filename prefix",
    "output_filename_prefix": "output filename prefix",
}


@dataclasses.dataclass(frozen=True)
class RunOutputs:
    """What a run reads and writes: ``inputs`` and ``outputs`` as ``(settings field, role)``
    (the parameter file itself has the field None), and ``earlier``: an earlier run's estimate
    files this run would leave beside its own."""

    inputs: tuple[tuple[str | None, FileRole], ...]
    outputs: tuple[tuple[str, FileRole], ...]
    earlier: tuple[Path, ...]
    #: ``(field, message)`` for output names STIR's naming refuses (``sens.s`` for an image)
    unnamed: tuple[tuple[str, str], ...] = ()

    def problems(self, overwrite: bool) -> list[tuple[str, str]]:
        """``(field, message)`` for every output that is an input, and without ``overwrite``
        every output that exists and every earlier estimate."""
        read = [r for _, r in self.inputs]
        found, inputs_hit = list(self.unnamed), set()
        for field, out in self.outputs:
            for _, _, message in inputs_written([out], read):
                found.append((field, message))
                inputs_hit.add(out)
        if overwrite:
            return found
        existing: dict[str, list[Path]] = {}  # one line per key, however many files
        for field, out in self.outputs:
            if out not in inputs_hit:  # (refused as an input already: --overwrite would not help)
                existing.setdefault(field, []).extend(f for f in out.files if f.exists() or f.is_symlink())
        for field, files in existing.items():
            if files:
                one = len(files) == 1
                found.append(
                    (
                        field,
                        f"{field_role(field)}: {_names(files)} already exist{'s' if one else ''} "
                        f"(use --overwrite to replace {'it' if one else 'them'})",
                    )
                )
        if self.earlier:
            found.append(
                (
                    "output_filename_prefix",
                    f"an earlier run's {_names(self.earlier)} ha{'s' if len(self.earlier) == 1 else 've'} this "
                    "prefix and would be left beside this run's estimates (use --overwrite to remove "
                    "them, or another prefix)",
                )
            )
        return found

    def remove_earlier(self) -> list[Path]:
        """Remove the earlier run's estimate files; returns those removed."""
        removed = []
        for f in self.earlier:
            try:
                f.unlink()
            except FileNotFoundError:
                continue
            removed.append(f)
        return removed


def run_outputs(settings, save_points: list[int], sensitivity_spec, prior) -> RunOutputs:
    """The files the run of ``settings`` reads and writes: estimates after ``save_points``,
    the sensitivities of ``sensitivity_spec`` when it computes them, the gradients of
    ``prior`` (a built prior, or None)."""
    s = settings
    inputs: list[tuple[str | None, FileRole]] = []
    if s.path is not None:
        inputs.append((None, reads("parameter file", s.path)))
    for field, files in s.input_files().items():
        inputs += [(field, reads(f"'{KEYS.get(field, field)}'", f)) for f in files]
    named: list[tuple[str, Path]] = []  # (field, image name) of every image the run writes
    prefix = None if s.disable_output else s.output_filename_prefix
    if prefix is not None:
        named += [("output_filename_prefix", estimate_filename(prefix, n)) for n in save_points]
    if sensitivity_spec.computes:
        field = "subset_sensitivity_filenames" if s.use_subset_sensitivities else "sensitivity_filename"
        named += [(field, f) for f in sensitivity_spec.files(s.num_subsets)]
    gradients = _gradient_prefix(prior)
    if gradients is not None:
        count = s.num_subiterations - s.start_subiteration_num + 1
        named += [("prior.gradient_filename_prefix", Path(f"{gradients}{n}.v")) for n in range(1, count + 1)]
    outputs, unnamed = [], []
    for field, name in named:
        try:
            outputs.append((field, writes(field_role(field), name, IMAGE)))
        except FormatError as exc:
            unnamed.append((field, f"{field_role(field)}: {exc}"))
    earlier = () if prefix is None else _earlier_estimates(Path(prefix), s.start_subiteration_num, save_points, inputs)
    return RunOutputs(tuple(inputs), tuple(outputs), earlier, tuple(dict.fromkeys(unnamed)))


def field_role(field: str) -> str:
    """An output's role in a message: its key, quoted as in the parameter file."""
    return f"'{KEYS.get(field, field)}'"


def _gradient_prefix(prior) -> str | None:
    """A prior's ``gradient filename prefix`` when it writes gradients (not with a zero
    penalisation factor: OSMAPOSL then runs plain OSEM and computes none)."""
    if prior is None or prior.is_zero:
        return None
    return prior.get_gradient_filename_prefix()


def _earlier_estimates(prefix: Path, start: int, save_points: list[int], inputs) -> tuple[Path, ...]:
    """``prefix_N.hv`` / ``prefix_N.v`` in the prefix's folder for ``N >= start`` not in
    ``save_points``, none of them an input."""
    folder = prefix.parent
    if not folder.is_dir():
        return ()
    pattern = re.compile(re.escape(prefix.name) + r"_(\d+)\.(hv|v)")
    read = [f for _, r in inputs for f in r.files]
    found = []
    for entry in folder.iterdir():
        m = pattern.fullmatch(entry.name)
        if m is None or int(m.group(1)) < start or int(m.group(1)) in save_points or entry.is_dir():
            continue
        if not any(same_file(entry, f) for f in read):
            found.append((int(m.group(1)), entry.name, entry))
    return tuple(entry for *_, entry in sorted(found))


def _names(paths) -> str:
    """All of up to four names, else the first two, the last and the count (one short line)."""
    names = [shown_path(Path(p)) for p in paths]
    return ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]}, ..., {names[-1]} ({len(names)} files)"
