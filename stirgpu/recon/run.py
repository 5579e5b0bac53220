"""From an OSMAPOSL parameter file to a finished reconstruction, like STIR's ``OSMAPOSL FILE.par``.

:func:`prepare_osmaposl` does every check that can fail before any work -- the
parameter file (grammar, keys, types, unsupported features), the existence of every
input file, the headers and geometries of the data, the subset balance, the image
geometry, the output folders -- and raises a :class:`~stirgpu.errors.ParFileError`
naming the file and the line of the key at fault (or the data file's own error).
Nothing is written until it has returned.  :func:`run_osmaposl` then computes the
sensitivities and runs the subiterations, writing the same files as STIR:
``<prefix>_<n>.hv`` and, when asked for, the sensitivities.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from ..config import config, get_config
from ..errors import FormatError, GeometryError, ParFileError, StirGpuError
from ..formats import read_from_file, read_image
from ..geometry import ImageInfo
from ..parfile import OsmaposlSettings, read_osmaposl_par
from .naming import interfile_image_name
from .objective import PoissonLogLikelihood
from .osem import OSEM, OSEMResult
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
        raise ParFileError("the forward and back projectors differ in 'restrict to cylindrical FOV'; "
                           "stirgpu runs both in one engine and needs them equal", projectors.path, projectors.line)
    if fwd.config_changes() != back.config_changes():
        raise ParFileError("the forward and back projectors have different execution settings (backend, "
                           "devices, memory budgets); give them once", projectors.path, projectors.line)
    cfg = dataclasses.replace(get_config(), **fwd.config_changes())
    return ProjectorPair(backend=cfg.backend, devices=cfg.devices, gpu_memory_budget=cfg.gpu_memory_budget,
                         host_memory_budget=cfg.host_memory_budget, max_views_per_chunk=cfg.max_views_per_chunk,
                         restrict_to_cylindrical_fov=fwd.restrict_to_cylindrical_fov)


@dataclasses.dataclass
class PreparedRun:
    """Everything checked and opened; :meth:`run` does the work.  Close (or use ``with``) to
    release the data files."""

    settings: OsmaposlSettings
    osem: OSEM
    initial: object
    files: list

    def run(self, callback=None) -> OSEMResult:
        return self.osem.reconstruct(self.initial, callback=callback)

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open(settings: OsmaposlSettings, field: str, path: Path):
    try:
        return read_from_file(path)
    except FormatError as exc:
        raise settings.error(field, f"cannot read {path}: {exc}") from None


def _writable_folder(settings: OsmaposlSettings, field: str, path: Path) -> None:
    folder = path.parent
    if not folder.is_dir():
        raise settings.error(field, f"output folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise settings.error(field, f"output folder {folder} is not writable")


def prepare_osmaposl(par, *, projector=None, base_dir: str | os.PathLike | None = None) -> PreparedRun:
    """Check and open everything an OSMAPOSL run needs (see the module docstring).

    ``par``: a parameter file path or :class:`~stirgpu.parfile.OsmaposlSettings`.
    ``projector``: a ``ProjectorPair`` to use instead of the one the file describes.
    ``base_dir``: where relative names in the file are taken from (default: the working
    directory, as STIR).
    """
    s = par if isinstance(par, OsmaposlSettings) else read_osmaposl_par(par, base_dir=base_dir)
    s.check_input_files()
    files = []
    try:
        y = _open(s, "input_file", s.input_file)
        files.append(y)
        if getattr(y, "is_template", False):
            raise s.error("input_file", f"{s.input_file} is a template without data")
        pdi = y.get_proj_data_info()
        extra = {}
        for field, name in (("additive_sinogram", "additive"), ("normalisation", "normalisation")):
            path = getattr(s, field)
            if path is None:
                continue
            pd = _open(s, field, path)
            files.append(pd)
            if getattr(pd, "is_template", False):
                raise s.error(field, f"{path} is a template without data")
            if pd.get_proj_data_info() != pdi:
                raise s.error(field, f"{path}: its geometry differs from the input file's "
                                     f"({pd.get_proj_data_info()!r} vs {pdi!r})")
            extra[name] = pd
        m = s.max_segment_num_to_process
        if m is not None and m > min(-pdi.get_min_segment_num(), pdi.get_max_segment_num()):
            raise s.error("max_segment_num_to_process",
                          f"'maximum absolute segment number to process := {m}' is too large: the data have "
                          f"segments {pdi.get_min_segment_num()}..{pdi.get_max_segment_num()}")
        objective = PoissonLogLikelihood(y, additive=extra.get("additive"), normalisation=extra.get("normalisation"),
                                         zero_end_planes_of_segment_0=s.zero_end_planes_of_segment_0,
                                         max_segment_num_to_process=m)
        # the image: STIR's target is the initial estimate when it is a file, else the default image
        if isinstance(s.initial_estimate, Path):
            try:
                init_img = read_image(s.initial_estimate)
            except FormatError as exc:
                raise s.error("initial_estimate", f"cannot read {s.initial_estimate}: {exc}") from None
            info: ImageInfo = init_img.info
            initial = init_img
        else:
            try:
                # STIR's default image to the last bit (its float32 voxel sizes and sizes)
                from ..kernels.stir_lors import stir_default_image_info
                info = stir_default_image_info(pdi, **s.image_arguments())
            except GeometryError as exc:
                raise s.error("xy_output_image_size", str(exc)) from None
            initial = float(s.initial_estimate)
        nv = objective.proj_data_info.get_num_views()
        if s.num_subsets > nv:
            raise s.error("num_subsets", f"'number of subsets := {s.num_subsets}' exceeds the number of views ({nv})")
        # OSMAPOSLReconstruction::set_up refuses unbalanced subsets whatever 'use subset
        # sensitivities' says (checked with STIR 6.5); so does a .par run here
        if not objective.subsets_are_balanced(s.num_subsets):
            raise s.error("num_subsets",
                          f"{s.num_subsets} subsets of {nv} views are unbalanced (not every subset has as many "
                          f"views); STIR's OSMAPOSL refuses this (with or without subset sensitivities): "
                          f"choose a number of subsets that divides {nv}")
        spec = SensitivitySpec(use_subset_sensitivities=s.use_subset_sensitivities,
                               recompute=s.recompute_sensitivity, filename=s.sensitivity_filename,
                               subset_filenames=s.subset_sensitivity_filenames)
        if spec.computes:
            field = "subset_sensitivity_filenames" if s.use_subset_sensitivities else "sensitivity_filename"
            for f in spec.files(s.num_subsets):
                _writable_folder(s, field, f)
        else:
            for f in spec.files(s.num_subsets):
                try:
                    sens = read_image(f)
                except FormatError as exc:
                    raise s.error("subset_sensitivity_filenames" if s.use_subset_sensitivities
                                  else "sensitivity_filename", f"cannot read {f}: {exc}") from None
                if sens.info != info:
                    raise s.error("subset_sensitivity_filenames" if s.use_subset_sensitivities
                                  else "sensitivity_filename",
                                  f"{f}: geometry {sens.info!r} differs from the reconstruction's {info!r}")
        prefix = None if s.disable_output else s.output_filename_prefix
        if prefix is not None:
            _writable_folder(s, "output_filename_prefix", interfile_image_name(f"{prefix}_1"))
        if projector is None:
            projector = make_projector(s.projectors)
        try:
            osem = OSEM(objective, projector, info, num_subsets=s.num_subsets,
                        num_subiterations=s.num_subiterations, start_subiteration_num=s.start_subiteration_num,
                        start_subset_num=s.start_subset_num, save_interval=s.save_interval,
                        output_filename_prefix=prefix, enforce_initial_positivity=s.enforce_initial_positivity,
                        minimum_relative_change=s.minimum_relative_change,
                        maximum_relative_change=s.maximum_relative_change, sensitivity=spec,
                        report_objective_interval=s.report_objective_function_values_interval)
        except StirGpuError as exc:
            raise ParFileError(str(exc), s.path) from None
        return PreparedRun(s, osem, initial, files)
    except BaseException:
        for f in files:
            f.close()
        raise


def run_osmaposl(par, *, projector=None, base_dir=None, progress: bool | None = None,
                 callback=None) -> OSEMResult:
    """``OSMAPOSL par``: check everything (:func:`prepare_osmaposl`), then reconstruct.

    ``progress``: show tqdm bars (None: as the scoped configuration says)."""
    ctx = config(progress=progress) if progress is not None else contextlib.nullcontext()
    with ctx:
        with prepare_osmaposl(par, projector=projector, base_dir=base_dir) as prepared:
            return prepared.run(callback=callback)
