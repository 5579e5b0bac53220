"""From a KOSMAPOSL parameter file to a finished reconstruction, like STIR's ``KOSMAPOSL FILE.par``.

:func:`prepare_kosmaposl` checks what :func:`~.run.prepare_osmaposl` checks for the OSMAPOSL keys
(files, data, geometry, subsets, outputs), and the kernel's: the anatomical images (readable, in
the reconstruction's geometry, not constant) and the emission images' outputs
``<kernelised output filename prefix>_<n>.hv`` (never an input; without ``overwrite`` not an
existing file).  Every problem is reported at once, each at its key's line; nothing is written
before it has returned.  The run's ``osem`` is a :class:`~.kosmaposl.KOSMAPOSL`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..config import config
from ..errors import FormatError, ParFileError, ParFileProblems, StirGpuError
from ..formats import read_image
from ..formats.naming import IMAGE
from ..formats.roles import inputs_written, reads, writes
from ..parfile.kosmaposl import KosmaposlSettings, read_kosmaposl_par
from .kernel_method import KernelSettings
from .kosmaposl import KOSMAPOSL
from .osem import OSEMResult
from .run import PreparedRun, prepare_osmaposl

__all__ = ["prepare_kosmaposl", "run_kosmaposl", "kernel_settings"]


def kernel_settings(s: KosmaposlSettings) -> KernelSettings:
    """The kernel of a KOSMAPOSL file's keys."""
    return KernelSettings(
        num_neighbours=s.num_neighbours,
        num_non_zero_features=s.num_non_zero_features,
        sigma_m=s.sigma_m,
        sigma_p=s.sigma_p,
        sigma_dp=s.sigma_dp,
        sigma_dm=s.sigma_dm,
        only_2d=s.only_2d,
        hybrid=s.hybrid,
        freeze_at_subiteration=s.freeze_at_subiteration,
    )


def prepare_kosmaposl(
    par, *, projector=None, base_dir: str | os.PathLike | None = None, overwrite: bool = True
) -> PreparedRun:
    """Check and open everything a KOSMAPOSL run needs (module docstring); ``par`` a file or
    :class:`~stirgpu.parfile.kosmaposl.KosmaposlSettings`; the other arguments as
    :func:`~.run.prepare_osmaposl`."""
    s = par if isinstance(par, KosmaposlSettings) else _read_settings(par, base_dir)
    images, own = _anatomical_images(s)
    try:
        base = prepare_osmaposl(s.common, projector=projector, overwrite=overwrite)
    except ParFileProblems as exc:
        raise ParFileProblems(sorted([*exc.problems, *own], key=lambda p: p.line or 0)) from None
    try:
        info = base.osem.image_info
        for path, image in zip(s.anatomical_image_filenames, images, strict=True):
            if image is not None and image.info != info:
                own.append(
                    s.error(
                        "anatomical_image_filenames",
                        f"{path}: geometry {image.info!r} differs from the reconstruction's {info!r} (STIR: anatomical "
                        "and emission image have different sizes)",
                    )
                )
        if own:
            raise ParFileProblems(own)
        try:
            run = KOSMAPOSL.from_osem(
                base.osem,
                kernel=kernel_settings(s),
                anatomical_images=images,
                kernelised_output_filename_prefix=s.kernelised_prefix(),
            )
            run.kernel_settings.check(info, images)  # (set_up makes the kernel)
        except StirGpuError as exc:
            raise ParFileProblems([ParFileError(str(exc), s.path, s.line("anatomical_image_filenames"))]) from None
        kept = _inputs_kept(s, run)
        if kept:
            raise ParFileProblems([s.error("kernelised_output_filename_prefix", kept)])
        existing = [f for f in run.kernelised_output_files() if f.exists()]
        if existing and not overwrite:
            names = ", ".join(str(f) for f in existing)
            raise ParFileProblems(
                [
                    s.error(
                        "kernelised_output_filename_prefix", f"{names} already exist (give overwrite to replace them)"
                    )
                ]
            )
        base.osem = run
        folders = [f.parent for f in run.kernelised_output_files()]
        base.output_folders = list(dict.fromkeys([*base.output_folders, *folders]))
        return base
    except BaseException:
        base.close()
        raise


def _inputs_kept(s: KosmaposlSettings, run: KOSMAPOSL) -> str | None:
    """Why an emission image would write over an anatomical image or the initial estimate (or
    their data files), or None (the OSMAPOSL inputs are checked by the run itself)."""
    read = [reads("anatomical image", f) for f in s.anatomical_image_filenames]
    if isinstance(s.common.initial_estimate, Path):
        read.append(reads("initial estimate", s.common.initial_estimate))
    written = [writes("emission image", f, IMAGE) for f in run.kernelised_output_files()]
    found = inputs_written(written, read)
    return found[0][2] if found else None


def _read_settings(par, base_dir) -> KosmaposlSettings:
    try:
        return read_kosmaposl_par(par, base_dir=base_dir)
    except ParFileProblems:
        read_kosmaposl_par(par, base_dir=base_dir, check_files=True)  # the same problems, and the files'
        raise


def _anatomical_images(s: KosmaposlSettings) -> tuple[list, list[ParFileError]]:
    """The anatomical images read (None where one cannot be), and the problems found."""
    images, problems = [], []
    for path in s.anatomical_image_filenames:
        image = None
        if not path.is_file():
            problems.append(s.error("anatomical_image_filenames", f"file not found: {path}"))
        else:
            try:
                image = read_image(path)
            except FormatError as exc:
                problems.append(s.error("anatomical_image_filenames", f"cannot read {path}: {exc}"))
        images.append(image)
    return images, problems


def run_kosmaposl(
    par, *, projector=None, base_dir=None, progress=None, callback=None, overwrite: bool = True
) -> OSEMResult:
    """``KOSMAPOSL par``: check everything (:func:`prepare_kosmaposl`), then reconstruct (arguments
    as :func:`~.run.run_osmaposl`)."""
    ctx = config(progress=progress) if progress is not None else contextlib.nullcontext()
    with ctx:
        with prepare_kosmaposl(par, projector=projector, base_dir=base_dir, overwrite=overwrite) as prepared:
            if overwrite:
                prepared.remove_earlier_estimates()
            return prepared.run(callback=callback)
