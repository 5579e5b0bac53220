"""From an OSSPS parameter file to a finished reconstruction, like STIR's ``OSSPS FILE.par``.

:func:`prepare_ossps` checks what :func:`~.run.prepare_osmaposl` checks for the keys OSSPS
shares with OSMAPOSL (files, data, geometry, subsets, outputs), and OSSPS's own: the
precomputed denominator file (its geometry), the computed denominator's output
``<prefix>_precomputed_denominator.hv`` (never an input; without ``overwrite`` not an existing
file) and the prior (one with a parabolic surrogate).  Every problem is reported at once, each
at its key's line; nothing is written before it has returned.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..config import config
from ..errors import FormatError, ParFileError, ParFileProblems, StirGpuError
from ..formats import read_image
from ..formats.naming import IMAGE
from ..formats.roles import writes
from ..parfile.ossps import OsspsSettings, read_ossps_par
from .osem import OSEMResult
from .ossps import OSSPS, PARABOLIC_SURROGATE_PRIORS, denominator_filename
from .outputs import RunOutputs, run_outputs
from .run import PreparedRun, prepare_osmaposl
from .sensitivity import SensitivitySpec

__all__ = ["prepare_ossps", "run_ossps"]


def prepare_ossps(
    par, *, projector=None, base_dir: str | os.PathLike | None = None, overwrite: bool = True
) -> PreparedRun:
    """Check and open everything an OSSPS run needs (module docstring); ``par`` a file or
    :class:`~stirgpu.parfile.ossps.OsspsSettings`; the other arguments as
    :func:`~.run.prepare_osmaposl`.  The run's ``osem`` is an :class:`~.ossps.OSSPS`."""
    s = par if isinstance(par, OsspsSettings) else _read_settings(par, base_dir)
    own = _own_problems(s, overwrite)
    try:
        base = prepare_osmaposl(s.common, projector=projector, overwrite=overwrite)
    except ParFileProblems as exc:
        raise ParFileProblems(sorted([*exc.problems, *own], key=lambda p: p.line or 0)) from None
    try:
        if own:
            raise ParFileProblems(own)
        osem = base.osem
        denominator = None if s.precomputed_denominator is None else _denominator(s, osem.image_info)
        try:
            ossps = OSSPS(
                osem.objective,
                osem.projector,
                osem.image_info,
                num_subsets=osem.num_subsets,
                num_subiterations=osem.num_subiterations,
                start_subiteration_num=osem.start_subiteration_num,
                start_subset_num=osem.start_subset_num,
                save_interval=osem.save_interval,
                output_filename_prefix=osem.output_filename_prefix,
                denominator_prefix=s.common.output_filename_prefix,  # (STIR: even with output disabled)
                enforce_initial_positivity=osem.enforce_initial_positivity,
                sensitivity=osem.sensitivity_spec,
                report_objective_interval=osem.report_objective_interval,
                prior=osem.prior,
                filters=osem.filters,
                overwrite=overwrite,
                relaxation_parameter=s.relaxation_parameter,
                relaxation_gamma=s.relaxation_gamma,
                upper_bound=s.upper_bound,
                precomputed_denominator=denominator,
            )
        except StirGpuError as exc:
            raise ParFileProblems([ParFileError(str(exc), s.path)]) from None
        base.osem = ossps
        if ossps.denominator_file is not None:
            base.output_folders = list(dict.fromkeys([*base.output_folders, ossps.denominator_file.parent]))
        return base
    except BaseException:
        base.close()
        raise


def _read_settings(par, base_dir) -> OsspsSettings:
    try:
        return read_ossps_par(par, base_dir=base_dir)
    except ParFileProblems:
        read_ossps_par(par, base_dir=base_dir, check_files=True)  # the same problems, and the files'
        raise


def _own_problems(s: OsspsSettings, overwrite: bool) -> list[ParFileError]:
    """The problems of OSSPS's own keys: a missing denominator file, a prior without a
    parabolic surrogate, the computed denominator's file (an input, or existing without
    ``overwrite``)."""
    problems = []
    d = s.precomputed_denominator
    if d is not None and not isinstance(d, float) and not d.is_file():
        problems.append(s.error("precomputed_denominator", f"file not found: {d}"))
    prior = s.common.prior
    if prior is not None and prior.type not in PARABOLIC_SURROGATE_PRIORS:
        problems.append(
            s.error(
                "prior",
                f"'prior type := {prior.type}': STIR's OSSPS takes priors with a parabolic surrogate "
                f"(PriorWithParabolicSurrogate); stirgpu has {' and '.join(PARABOLIC_SURROGATE_PRIORS)}",
            )
        )
    prefix = s.common.output_filename_prefix  # STIR writes the denominator even with output disabled
    if d is None and prefix is not None:
        spec = SensitivitySpec.from_settings(s.common)
        inputs = run_outputs(s.common, [], spec, None).inputs
        try:
            out = writes("'output filename prefix' (precomputed denominator)", denominator_filename(prefix), IMAGE)
        except FormatError as exc:
            return [*problems, s.error("output_filename_prefix", str(exc))]
        check = RunOutputs(inputs, (("output_filename_prefix", out),), ())
        problems += [s.error(field, message) for field, message in check.problems(overwrite)]
        folder = Path(prefix).parent
        if s.common.disable_output and not (folder.is_dir() and os.access(folder, os.W_OK)):
            # (with output on, the common checks name the prefix's folder already)
            problems.append(
                s.error("output_filename_prefix", f"output folder {folder} does not exist or is not writable")
            )
    return problems


def _denominator(s: OsspsSettings, image_info):
    """STIR's constant 1, or the image file read and checked against the reconstruction's
    geometry (STIR: the same characteristics as the target image)."""
    d = s.precomputed_denominator
    if d is None or isinstance(d, float):
        return d
    try:
        image = read_image(d)
    except FormatError as exc:
        raise ParFileProblems([s.error("precomputed_denominator", f"cannot read {d}: {exc}")]) from None
    if image.info != image_info:
        message = f"{d}: geometry {image.info!r} differs from the reconstruction's {image_info!r} (STIR refuses it too)"
        raise ParFileProblems([s.error("precomputed_denominator", message)])
    return image


def run_ossps(
    par, *, projector=None, base_dir=None, progress=None, callback=None, overwrite: bool = True
) -> OSEMResult:
    """``OSSPS par``: check everything (:func:`prepare_ossps`), then reconstruct (arguments as
    :func:`~.run.run_osmaposl`)."""
    ctx = config(progress=progress) if progress is not None else contextlib.nullcontext()
    with ctx:
        with prepare_ossps(par, projector=projector, base_dir=base_dir, overwrite=overwrite) as prepared:
            if overwrite:
                prepared.remove_earlier_estimates()
            return prepared.run(callback=callback)
