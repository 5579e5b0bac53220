"""From an OSMAPOSL parameter file to a finished reconstruction, like STIR's ``OSMAPOSL FILE.par``.

:func:`prepare_osmaposl` does every check that can fail before any work -- the
parameter file (grammar, keys, types, unsupported features), the existence of every
input file, the output folders, the headers and geometries of the data, the subset
balance, the image geometry -- and raises one :class:`~stirgpu.errors.ParFileProblems`
listing every problem found, each naming the file and the line of the key at fault (and
the data file's own error).
Nothing is written until it has returned.  :func:`run_osmaposl` then computes the
sensitivities and runs the subiterations, writing the same files as STIR:
``<prefix>_<n>.hv`` and, when asked for, the sensitivities.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from ..arrays import count_non_finite
from ..config import config, get_config
from ..errors import FormatError, GeometryError, NonFiniteError, ParFileError, ParFileProblems, StirGpuError
from ..formats import read_from_file, read_image
from ..formats.ecat8_factors import Ecat8Components, Ecat8NormalisationFactors
from ..formats.ecat8_norm import read_ecat8_norm
from ..parfile import OsmaposlSettings, osmaposl_settings_from_block, parse_par_file
from ..parfile.normalisation import Ecat8Normalisation
from .filtering import FilterSchedule
from .naming import estimate_save_points
from .objective import PoissonLogLikelihood, geometry_problem
from .osem import OSEM, OSEMResult, subsets_problem
from .outputs import RunOutputs, run_outputs
from .sensitivity import SensitivitySpec

__all__ = ["PreparedRun", "prepare_osmaposl", "run_osmaposl", "make_projector"]


def make_projector(projectors):
    """A ``ProjectorPair`` for a parameter file's projector settings (``settings.projectors``).

    Both projectors of a pair compute STIR's Parallelproj projection; ``stirgpu`` blocks add
    execution settings (backend, devices, memory budgets), which override the scoped
    configuration.  A separate forward/back pair must agree on ``restrict to cylindrical
    FOV`` and on the execution settings (one streaming engine runs both).
    """
    from ..projectors import ProjectorPair

    fwd, back = projectors.forward, projectors.back
    if fwd.restrict_to_cylindrical_fov != back.restrict_to_cylindrical_fov:
        raise ParFileError(
            "the forward and back projectors differ in 'restrict to cylindrical FOV'; "
            "stirgpu runs both in one engine and needs them equal",
            projectors.path,
            projectors.line,
        )
    if fwd.config_changes() != back.config_changes():
        raise ParFileError(
            "the forward and back projectors have different execution settings (backend, "
            "devices, memory budgets); give them once",
            projectors.path,
            projectors.line,
        )
    cfg = dataclasses.replace(get_config(), **fwd.config_changes())
    return ProjectorPair(
        backend=cfg.backend,
        devices=cfg.devices,
        gpu_memory_budget=cfg.gpu_memory_budget,
        host_memory_budget=cfg.host_memory_budget,
        max_views_per_chunk=cfg.max_views_per_chunk,
        restrict_to_cylindrical_fov=fwd.restrict_to_cylindrical_fov,
    )


@dataclasses.dataclass
class PreparedRun:
    """Everything checked and opened; :meth:`run` does the work.  Close (or use ``with``) to
    release the data files."""

    settings: OsmaposlSettings
    osem: OSEM
    initial: object
    files: list
    #: the folders the run writes into (estimates, computed sensitivities)
    output_folders: list = dataclasses.field(default_factory=list)
    #: the files the run reads and writes, and an earlier run's estimates (:mod:`.outputs`)
    outputs: RunOutputs | None = None

    def run(self, callback=None) -> OSEMResult:
        return self.osem.reconstruct(self.initial, callback=callback)

    def remove_earlier_estimates(self) -> list[Path]:
        """Remove an earlier run's estimates with this run's prefix that it would not rewrite
        (see :mod:`.outputs`; a run prepared without ``overwrite`` refuses them); returns them.
        Under MPI rank 0 alone removes them (every rank gets the list)."""
        if self.outputs is None or not self.outputs.earlier:
            return []
        if not self.osem.comm.is_root:
            return list(self.outputs.earlier)
        return self.outputs.remove_earlier()

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Check:
    """The problems found while preparing a run, each at the line of its key; :meth:`done`
    raises them all as one ParFileProblems."""

    def __init__(self, settings: OsmaposlSettings):
        self.settings = settings
        self.problems: list[ParFileError] = []

    def add(self, field: str, message: str) -> None:
        self.problems.append(self.settings.error(field, message))

    def open(self, field: str, path: Path):
        """Projection data with values, or None (the problem noted; a missing file is noted by
        the file checks already)."""
        if not path.is_file():
            return None
        try:
            return read_from_file(path, allow_template=False)
        except FormatError as exc:
            self.add(field, f"cannot read {path}: {exc}")
            return None

    def ecat8(self, field: str, norm: Ecat8Normalisation, y):
        """The factors of an ECAT8 norm file for the measured data ``y``, or None (the problem
        noted; a missing file is noted by the file checks already)."""
        if not norm.path.is_file():
            return None
        try:
            components = read_ecat8_norm(norm.path, use_gaps=norm.use_gaps)
            switches = Ecat8Components(**norm.components())
            # non-TOF factors, for every timing position of TOF data (STIR's ECAT8 norm is not TOF)
            pdi = y.get_proj_data_info().create_non_tof_clone()
            return Ecat8NormalisationFactors(components, pdi, switches)
        except (FormatError, GeometryError) as exc:
            self.add(field, f"'normalisation filename': {exc}")
            return None

    def image(self, field: str, path: Path):
        if not path.is_file():
            return None
        try:
            return read_image(path)
        except FormatError as exc:
            self.add(field, f"cannot read {path}: {exc}")
            return None

    def done(self) -> None:
        if self.problems:
            raise ParFileProblems(self.problems)


def _additive_and_normalisation(s, check, y, files: list) -> dict:
    """The additive sinogram and the normalisation of the run (``additive``, ``normalisation``)
    that open and fit the data ``y`` (problems go to ``check``); the files opened are appended
    to ``files``."""
    extra = {}
    for field, name, key in (
        ("additive_sinogram", "additive", "additive sinogram"),
        ("normalisation", "normalisation", "normalisation projdata filename"),
    ):
        path = getattr(s, field)
        if isinstance(path, Ecat8Normalisation):
            # computed for the data's geometry (STIR's BinNormalisationFromECAT8::set_up)
            pd = None if y is None else check.ecat8(field, path, y)
            if pd is not None:
                extra[name] = pd
            continue
        pd = None if path is None else check.open(field, path)
        if pd is None:
            continue
        files.append(pd)
        problem = None if y is None else geometry_problem(name, pd.get_proj_data_info(), y.get_proj_data_info())
        if problem is not None:
            check.add(field, f"'{key}': {path}: {problem}")
            continue
        extra[name] = pd
    return extra


def prepare_osmaposl(
    par, *, projector=None, base_dir: str | os.PathLike | None = None, overwrite: bool = True
) -> PreparedRun:
    """Check and open everything an OSMAPOSL run needs (see the module docstring).

    ``par``: a parameter file path or :class:`~stirgpu.parfile.OsmaposlSettings`.
    ``projector``: a ``ProjectorPair`` to use instead of the one the file describes.
    ``base_dir``: where relative names in the file are taken from (default: the working
    directory, as STIR).
    ``overwrite``: False refuses every output file that exists and an earlier run's estimates
    with the same prefix; True (STIR's way) replaces them (:meth:`PreparedRun.remove_earlier_estimates`
    removes those it would not rewrite).  An output that is one of the files the run reads (the
    parameter file, the data, the initial estimate, a sensitivity read, a data file their
    headers name) is refused either way (:mod:`.outputs`).

    Every problem found is reported at once: one :class:`~stirgpu.errors.ParFileProblems`
    lists those of the parameter file (keys, values) with its missing files and output
    folders, or, when the file itself is fine, the missing files and output folders with the
    problems of the data it names (unreadable headers, geometries that differ, subsets, image
    sizes, sensitivity files).
    """
    s = par if isinstance(par, OsmaposlSettings) else _read_settings(par, base_dir)
    check = _Check(s)
    try:
        s.check_files()
    except ParFileProblems as exc:
        check.problems.extend(exc.problems)  # with the problems of the data, below
    files = []
    try:
        y = check.open("input_file", s.input_file)
        if y is not None:
            files.append(y)
        extra = _additive_and_normalisation(s, check, y, files)
        initial, info = _image(s, check, y)
        objective = None
        if y is not None:
            objective = _objective(s, check, y, extra)
        spec = SensitivitySpec.from_settings(s)
        if not spec.computes:
            _check_sensitivities(s, check, spec, info)
        prior = _prior(s, check, info)
        save_points = estimate_save_points(s.start_subiteration_num, s.num_subiterations, s.save_interval)
        outputs = run_outputs(s, save_points, spec, prior)
        for field, message in outputs.problems(overwrite):
            check.add(field, message)
        if projector is None:
            try:
                projector = make_projector(s.projectors)
            except ParFileError as exc:
                check.problems.append(exc)
        check.done()
        assert objective is not None  # (without an input file check.done() has raised)
        prefix = None if s.disable_output else s.output_filename_prefix
        try:
            osem = OSEM(
                objective,
                projector,
                info,
                num_subsets=s.num_subsets,
                num_subiterations=s.num_subiterations,
                start_subiteration_num=s.start_subiteration_num,
                start_subset_num=s.start_subset_num,
                save_interval=s.save_interval,
                output_filename_prefix=prefix,
                enforce_initial_positivity=s.enforce_initial_positivity,
                minimum_relative_change=s.minimum_relative_change,
                maximum_relative_change=s.maximum_relative_change,
                sensitivity=spec,
                report_objective_interval=s.report_objective_function_values_interval,
                prior=prior,
                map_model=s.map_model,
                filters=FilterSchedule.from_settings(s),
                overwrite=overwrite,
            )
        except StirGpuError as exc:
            raise ParFileProblems([ParFileError(str(exc), s.path)]) from None
        # where the run writes: the estimates' folder, the computed sensitivities' folders
        folders = [f.parent for f in osem.output_files()]
        folders += [f.parent for f in spec.files(s.num_subsets)] if spec.computes else []
        return PreparedRun(s, osem, initial, files, list(dict.fromkeys(folders)), outputs)
    except BaseException:
        for f in files:
            f.close()
        raise


def _read_settings(par, base_dir) -> OsmaposlSettings:
    """The settings of a parameter file; a file with problems is reported together with its
    missing files and output folders (as far as they can be known from what could be read)."""
    block = parse_par_file(par)  # once: its warnings (skipped lines) are said once
    try:
        return osmaposl_settings_from_block(block, base_dir=base_dir)
    except ParFileProblems:
        osmaposl_settings_from_block(block, base_dir=base_dir, check_files=True)  # the same problems, and the files'
        raise


def _image(s: OsmaposlSettings, check: _Check, y):
    """(initial estimate, image geometry): STIR's target is the initial estimate when it is a
    file, else the default image for the data.  (None, None) where neither can be known."""
    if isinstance(s.initial_estimate, Path):
        img = check.image("initial_estimate", s.initial_estimate)
        bad = count_non_finite(img.array) if img is not None and get_config().check_finite else 0
        if bad:
            check.add("initial_estimate", str(NonFiniteError(str(s.initial_estimate), bad)))
        return (img, img.info) if img is not None else (None, None)
    if y is None:
        return None, None
    try:
        # STIR's default image to the last bit (its float32 voxel sizes and sizes)
        from ..kernels.joseph.lors import stir_default_image_info

        return float(s.initial_estimate), stir_default_image_info(y.get_proj_data_info(), **s.image_arguments())
    except GeometryError as exc:
        check.add("xy_output_image_size", str(exc))
        return None, None


def _objective(s: OsmaposlSettings, check: _Check, y, extra: dict):
    pdi = y.get_proj_data_info()
    m = s.max_segment_num_to_process
    if m is not None and m > min(-pdi.get_min_segment_num(), pdi.get_max_segment_num()):
        check.add(
            "max_segment_num_to_process",
            f"'maximum absolute segment number to process := {m}' is too large: the data have "
            f"segments {pdi.get_min_segment_num()}..{pdi.get_max_segment_num()}",
        )
        return None
    objective = PoissonLogLikelihood(
        y,
        additive=extra.get("additive"),
        normalisation=extra.get("normalisation"),
        zero_end_planes_of_segment_0=s.zero_end_planes_of_segment_0,
        max_segment_num_to_process=m,
        use_tof_sensitivities=s.use_tof_sensitivities,
    )
    # OSMAPOSLReconstruction::set_up refuses unbalanced subsets whatever 'use subset
    # sensitivities' says (checked with STIR 6.5); the OSEM class refuses with the same words
    problem = subsets_problem(s.num_subsets, objective.proj_data_info.get_num_views())
    if problem is not None:
        check.add("num_subsets", problem)
    return objective


def _check_sensitivities(s: OsmaposlSettings, check: _Check, spec: SensitivitySpec, info) -> None:
    field = "subset_sensitivity_filenames" if s.use_subset_sensitivities else "sensitivity_filename"
    for f in spec.files(s.num_subsets):
        sens = check.image(field, f)
        if sens is not None and info is not None and sens.info != info:
            check.add(field, f"{f}: geometry {sens.info!r} differs from the reconstruction's {info!r}")


def _prior(s: OsmaposlSettings, check: _Check, info):
    """The parameter file's prior (None: 'prior type := None'), its kappa image read and checked
    against the reconstruction's geometry (STIR's check: the same characteristics)."""
    if s.prior is None:
        return None
    from ..priors import make_prior

    kappa = None
    if s.prior.kappa_filename is not None:
        kappa = check.image("prior.kappa_filename", s.prior.kappa_filename)
        if kappa is not None and info is not None and kappa.info != info:
            check.add(
                "prior.kappa_filename",
                f"{s.prior.kappa_filename}: the kappa image's geometry {kappa.info!r} differs from the "
                f"reconstruction's {info!r} (STIR refuses this too)",
            )
    try:
        images = {} if kappa is None else {"kappa": kappa}  # (FilterRootPrior has no kappa)
        return make_prior(s.prior.type, **images, **s.prior.parameters())
    except StirGpuError as exc:
        check.add("prior", str(exc))
        return None


def run_osmaposl(
    par, *, projector=None, base_dir=None, progress=None, callback=None, overwrite: bool = True
) -> OSEMResult:
    """``OSMAPOSL par``: check everything (:func:`prepare_osmaposl`), then reconstruct.

    ``progress``: a progress display for this run (``stirgpu.config(progress=...)``'s kind, e.g.
    the command line's ``stirgpu.cli.progress.TerminalProgress()``); None: the scoped
    configuration's (by default none: the library draws nothing).  ``overwrite``: as
    :func:`prepare_osmaposl`; True also removes an earlier run's estimates with the same prefix
    that this run does not rewrite, before any work."""
    ctx = config(progress=progress) if progress is not None else contextlib.nullcontext()
    with ctx:
        with prepare_osmaposl(par, projector=projector, base_dir=base_dir, overwrite=overwrite) as prepared:
            if overwrite:
                prepared.remove_earlier_estimates()
            return prepared.run(callback=callback)
