"""OSEM and OSMAPOSL with a prior (One-Step-Late), as STIR's ``OSMAPOSL`` runs them.

One *subiteration* ``n`` (numbered from 1, as STIR does) updates the estimate with
subset ``k = (n + start_subset - 1) mod K``::

    update = B_k(y / (A_k x + a)) / s_k          (STIR's divide, threshold 0: only 0/0 -> 0)
    update = clip(update, min_rel, max_rel)     (from subiteration 2 on; STIR)
    x     *= update

With a prior whose penalisation factor is not 0 (STIR's ``prior_is_zero``), the division is by
the One-Step-Late denominator instead, computed from the prior's gradient ``g`` at ``x`` before
the update (:func:`~.arrays.osl_denominator`: ``MAP model`` additive ``clamp(g / K + s_k,
s_k / 10, 10 s_k)`` or multiplicative ``clamp(g + 1, 0.1, 10) s_k``), with STIR's 1e-6
threshold of ``divide`` (0 where both the numerator and the denominator are at most 1e-6 of
the numerator's maximum).

where ``s_k`` is subset ``k``'s sensitivity (see :mod:`.sensitivity`) and the model is
:class:`~.objective.PoissonLogLikelihood`'s.  Subsets are STIR's: subset ``k`` holds the
views ``v`` with ``v mod K == k``, in every segment.

Before the first subiteration the initial estimate is, when ``enforce initial
positivity condition`` is on (STIR's default), raised to at least 1e-6 times its
smallest positive value.  The estimate is written after subiterations that are
multiples of ``save estimates at subiteration intervals`` and after the last one, as
``<prefix>_<n>.hv``.  Restarting from such a file with ``start at subiteration
number := n+1`` continues the same subset sequence.

STIR's inter-update, inter-iteration and post-filters (``filters=``, a
:class:`~.filtering.FilterSchedule`) are applied where and when STIR applies them; the
order within a subiteration is in :mod:`.filtering`.

The estimate, the sensitivities and the update stay on the projector's device
between subiterations (cupy arrays on the CUDA backend).

Interrupted (a KeyboardInterrupt, e.g. Ctrl-C), a run stops within the projector call in
progress; every file already written is complete (written under a temporary name, then
renamed), and the KeyboardInterrupt carries a note (PEP 678, ``__notes__``) saying which
estimates are complete and how to continue from the last one -- what the command line
prints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..config import get_config
from ..distributed import Communicator, as_communicator
from ..errors import GeometryError, StirGpuError
from ..formats import ProjDataFromFile, VoxelsOnCartesianGrid, write_image
from ..formats.finite import check_finite_image
from ..formats.naming import IMAGE
from ..formats.roles import inputs_written, reads, writes
from ..geometry import ImageInfo
from .arrays import (
    FLOAT32_MAX,
    MAP_MODELS,
    SMALL_NUM,
    array_module,
    clip_update,
    osl_denominator,
    stir_divide,
    threshold_min_to_small_positive,
    to_numpy,
)
from .filtering import FilterSchedule, PreparedSchedule
from .naming import estimate_filename, estimate_save_points
from .objective import PoissonLogLikelihood
from .records import OSEMResult, SubiterationRecord
from .sensitivity import Sensitivities, SensitivitySpec
from .subsets import subsets_problem

__all__ = ["OSEM", "SubiterationRecord", "OSEMResult", "subsets_problem"]


class OSEM:
    """OSMAPOSL (OSEM, or One-Step-Late with a prior), driving a streaming
    :class:`~stirgpu.projectors.ProjectorPair`.

    Parameters
    ----------
    objective
        :class:`~.objective.PoissonLogLikelihood` (the data, additive term, normalisation).
    projector
        A ``ProjectorPair`` (not yet set up; :meth:`set_up` does it).
    image_info
        The image geometry (STIR: from the initial estimate file, else the default image).
    num_subsets, num_subiterations, start_subiteration_num, start_subset_num, save_interval
        STIR's keys (``save_interval`` None: only the last estimate).
    output_filename_prefix
        Estimates go to ``<prefix>_<n>.hv``; None: nothing is written.
    enforce_initial_positivity, minimum_relative_change, maximum_relative_change
        STIR's keys, STIR's defaults.
    sensitivity
        :class:`~.sensitivity.SensitivitySpec` (default: compute subset sensitivities, write nothing).
    report_log_likelihood
        Record each subiteration's subset log-likelihood at the estimate before the update (one
        more projector pass per subiteration).
    report_objective_interval
        STIR's ``report objective function values interval``: after subiterations that are
        multiples of it, and after the last one, record the objective function at the new
        estimate, the number STIR prints as "Objective function without penalty" (one more pass
        over all data each time); 0: never.
    prior, map_model
        STIR's ``prior type`` (a :mod:`stirgpu.priors` prior, or anything with ``is_zero``,
        ``set_up(image_info)``, ``get_value`` and ``get_gradient``; None: OSEM) and ``MAP model``
        (``"additive"``, STIR's default, or ``"multiplicative"``).
    filters
        :class:`~.filtering.FilterSchedule`: STIR's inter-update, inter-iteration and post-filters
        (default: none).
    comm
        The MPI communicator the run is shared by: None takes the projector's (its session's
        ``comm``: ``COMM_WORLD`` under an MPI launcher); one given must be the projector's.
        Every rank projects its share of each subset and computes the same estimate; rank 0
        alone writes the estimates and sensitivities (docs/distributed.md).
    """

    def __init__(
        self,
        objective: PoissonLogLikelihood,
        projector,
        image_info: ImageInfo,
        *,
        num_subsets: int = 1,
        num_subiterations: int | None = None,
        start_subiteration_num: int = 1,
        start_subset_num: int = 0,
        save_interval: int | None = None,
        output_filename_prefix: str | os.PathLike | None = None,
        enforce_initial_positivity: bool = True,
        minimum_relative_change: float = 0.0,
        maximum_relative_change: float = FLOAT32_MAX,
        sensitivity: SensitivitySpec | None = None,
        report_log_likelihood: bool = False,
        report_objective_interval: int = 0,
        overwrite: bool = True,
        prior=None,
        map_model: str = "additive",
        filters: FilterSchedule | None = None,
        comm=None,
    ):
        if not isinstance(objective, PoissonLogLikelihood):
            raise StirGpuError(f"OSEM: objective must be a PoissonLogLikelihood, not {type(objective).__name__}")
        if not isinstance(image_info, ImageInfo):
            raise GeometryError(f"OSEM: image_info must be an ImageInfo, not {type(image_info).__name__}")
        self.objective = objective
        self.projector = projector
        #: the MPI ranks sharing the run: the projector's (``comm``, when given, must be the
        #: same); every rank computes the same estimates, rank 0 alone writes the files
        self.comm = _communicator_of(projector, comm)
        self.image_info = image_info
        self.num_subsets = int(num_subsets)
        self.num_subiterations = self.num_subsets if num_subiterations is None else int(num_subiterations)
        self.start_subiteration_num = int(start_subiteration_num)
        self.start_subset_num = int(start_subset_num)
        self.save_interval = self.num_subiterations if save_interval is None else int(save_interval)
        self.output_filename_prefix = None if output_filename_prefix is None else Path(output_filename_prefix)
        self.enforce_initial_positivity = bool(enforce_initial_positivity)
        self.minimum_relative_change = float(minimum_relative_change)
        self.maximum_relative_change = float(maximum_relative_change)
        self.sensitivity_spec = sensitivity if sensitivity is not None else SensitivitySpec()
        self.report_log_likelihood = bool(report_log_likelihood)
        self.report_objective_interval = int(report_objective_interval)
        self.overwrite = bool(overwrite)
        self.prior = prior
        self.map_model = map_model
        self.filters = filters if filters is not None else FilterSchedule()
        if not isinstance(self.filters, FilterSchedule):
            raise StirGpuError(f"OSEM: filters must be a FilterSchedule, not {type(self.filters).__name__}")
        self._prepared_filters: PreparedSchedule | None = None
        self.sensitivities: Sensitivities | None = None
        self.sensitivity_files: list[Path] = []
        self._check()

    # -- validation (before any work) -----------------------------------------------------
    def _check(self) -> None:
        K = self.num_subsets
        problem = subsets_problem(K, self.objective.proj_data_info.get_num_views())
        if problem is not None:
            raise StirGpuError(problem)
        if self.num_subiterations < 1:
            raise StirGpuError(f"number of subiterations {self.num_subiterations}: must be at least 1")
        if self.start_subiteration_num < 1:
            raise StirGpuError(f"start at subiteration number {self.start_subiteration_num}: must be at least 1")
        if not 0 <= self.start_subset_num < K:
            raise StirGpuError(f"start at subset {self.start_subset_num}: must be in 0..{K - 1}")
        if not 1 <= self.save_interval <= self.num_subiterations:
            raise StirGpuError(
                f"save estimates at subiteration intervals {self.save_interval}: must be in "
                f"1..{self.num_subiterations} (the number of subiterations)"
            )
        if self.report_objective_interval < 0:
            raise StirGpuError(
                f"report objective function values interval {self.report_objective_interval}: must be >= 0"
            )
        if not 0 <= self.minimum_relative_change <= self.maximum_relative_change:
            raise StirGpuError("relative change limits: need 0 <= minimum <= maximum")
        self._check_prior()
        self._check_inputs_kept()

    def _check_prior(self) -> None:
        if self.map_model not in MAP_MODELS:
            raise StirGpuError(f"MAP model {self.map_model!r}: must be 'additive' or 'multiplicative'")
        missing = [m for m in ("is_zero", "set_up", "get_value", "get_gradient") if not hasattr(self.prior, m)]
        if self.prior is not None and missing:
            raise StirGpuError(f"OSEM: prior {type(self.prior).__name__} has no {', '.join(missing)}")

    def _check_inputs_kept(self) -> None:
        """An input is never written, whatever ``overwrite`` says: no estimate and no computed
        sensitivity may be a file the objective's data or a sensitivity read come from."""
        spec = self.sensitivity_spec
        files = {role: _file_of(pd) for role, pd in self.objective.given_inputs.items()}
        read = [reads(role, path) for role, path in files.items() if path is not None]
        sensitivities = spec.files(self.num_subsets)
        read += [] if spec.computes else [reads("sensitivity", f) for f in sensitivities]
        written = [writes("estimate", f, IMAGE) for f in self.output_files()]
        written += [writes("sensitivity", f, IMAGE) for f in sensitivities] if spec.computes else []
        found = inputs_written(written, read)
        if found:
            raise StirGpuError(found[0][2])

    @property
    def prior_is_zero(self) -> bool:
        """STIR's ``prior_is_zero``: no prior, or a penalisation factor of 0 (plain OSEM)."""
        return self.prior is None or bool(self.prior.is_zero)

    # -- helpers ----------------------------------------------------------------------------
    def subset_num(self, subiteration_num: int) -> int:
        """STIR's subset of a subiteration: ``(n + start_subset - 1) mod K``."""
        return (int(subiteration_num) + self.start_subset_num - 1) % self.num_subsets

    def save_points(self) -> list[int]:
        return estimate_save_points(self.start_subiteration_num, self.num_subiterations, self.save_interval)

    def output_files(self) -> list[Path]:
        """Every estimate file the run will write (empty without a prefix)."""
        if self.output_filename_prefix is None:
            return []
        return [estimate_filename(self.output_filename_prefix, n) for n in self.save_points()]

    def _xp(self):
        backend = getattr(self.projector, "backend", "cpu")
        if backend == "cuda":
            import cupy

            return cupy
        return np

    def zeros(self):
        """A zero image on the projector's device."""
        return self._xp().zeros(self.image_info.shape, dtype=np.float32)

    def to_device(self, host: np.ndarray):
        return self._xp().asarray(np.ascontiguousarray(host, dtype=np.float32))

    # -- set up -------------------------------------------------------------------------------
    def set_up(self) -> float:
        """Set up the projector and get the sensitivities (compute+write, or read).  Returns seconds.
        Inputs holding NaN or ±Inf are refused first (the objective's ``check_finite``, unless
        the configuration's ``check_finite`` is off), before anything is computed or written."""
        t0 = time.perf_counter()
        if get_config().check_finite:
            self.objective.check_finite()
        self.objective.set_up(self.projector, self.image_info)
        if self.prior is not None:
            self.prior.set_up(self.image_info)  # STIR: the objective function sets up its prior
        self._prepared_filters = self.filters.prepare(self.image_info)
        spec = self.sensitivity_spec
        try:
            self._sensitivities(spec)
        except KeyboardInterrupt as exc:
            exc.add_note(
                "no estimate written: the run stopped while "
                + ("computing the sensitivities" if spec.computes else "reading the sensitivities")
            )
            raise
        return time.perf_counter() - t0

    def _sensitivities(self, spec: SensitivitySpec) -> None:
        if spec.computes:
            bar = self._bar(self.num_subsets if spec.use_subset_sensitivities else 1, "sensitivities", "subset")
            try:
                self.sensitivities = Sensitivities.compute(
                    self.num_subsets,
                    spec.use_subset_sensitivities,
                    self._subset_sensitivity,
                    self.zeros,
                    progress=(lambda _msg: bar.update(1)) if bar is not None else None,
                )
            finally:
                if bar is not None:
                    bar.close()
            files = spec.files(self.num_subsets)
            with self.comm.together("writing the sensitivities"):
                if self.comm.is_root:
                    self.sensitivities.write(spec, self.image_info, to_numpy, overwrite=self.overwrite)
            self.sensitivity_files = files
        else:
            self.sensitivities = Sensitivities.read(spec, self.num_subsets, self.image_info, self.to_device)
            self.sensitivity_files = []

    def set_up_files(self) -> list[Path]:
        """The files :meth:`set_up` wrote (the sensitivities it computed)."""
        return list(self.sensitivity_files)

    def _subset_sensitivity(self, out, subset_num: int, num_subsets: int):
        res = self.objective.subset_sensitivity(self.projector, out, subset_num, num_subsets)
        return out if res is None else res

    def _bar(self, total: int, desc: str, unit: str):
        """A task of the configured progress display (``stirgpu.config(progress=...)``, see
        stirgpu.execution.progress; rank 0's alone under MPI), or None: the library draws nothing."""
        display = get_config().progress
        if display is None or not self.comm.is_root or total <= 0:
            return None
        return display.start(total, desc, unit)

    def _initial_positivity(self, x) -> None:
        """STIR's ``enforce initial positivity condition`` (OSMAPOSL's threshold, 1e-6)."""
        threshold_min_to_small_positive(x)

    # -- one subiteration -------------------------------------------------------------------------
    def update(self, image, subiteration_num: int) -> tuple[object, float | None]:
        """Apply subiteration ``subiteration_num`` to ``image`` (in place).  Returns
        ``(image, subset log-likelihood before the update or None)``."""
        if self.sensitivities is None:
            raise StirGpuError("OSEM.update: call set_up() first")
        k = self.subset_num(subiteration_num)
        upd = self.zeros()
        res = self.objective.gradient_plus_sensitivity(
            self.projector, image, upd, k, self.num_subsets, return_loglik=self.report_log_likelihood
        )
        loglik = None
        if self.report_log_likelihood:
            upd, loglik = res
            loglik = float(loglik)
        elif res is not None:
            upd = res
        self._divide_update(upd, image, self.sensitivities[k])
        self._inter_update_filter(image, int(subiteration_num))
        if int(subiteration_num) != 1:
            clip_update(upd, self.minimum_relative_change, self.maximum_relative_change)
        image *= upd
        return image, loglik

    def _divide_update(self, upd, image, sens) -> None:
        """``upd /= s_k`` (OSEM) or ``upd /= OSL denominator`` (a non-zero prior), in place."""
        if self.prior_is_zero:
            # OSMAPOSL without a prior divides with a threshold of 0 (update_estimate passes 0.F):
            # only exact 0/0 gives 0; tiny sensitivities still divide (see docs/conventions.md)
            stir_divide(upd, sens, small_num=0.0)
            return
        denominator = osl_denominator(self._prior_gradient(image), sens, self.num_subsets, self.map_model)
        stir_divide(upd, denominator, small_num=SMALL_NUM)

    def _prior_gradient(self, image):
        """The prior's gradient at the estimate.  Under MPI every rank computes it on the whole
        estimate (the same on every rank: it is not summed over the ranks, as the back
        projections are) and rank 0 alone writes its file (STIR's ``gradient filename prefix``),
        in a step the ranks take together."""
        if not self.comm.parallel:
            return self.prior.get_gradient(image)
        writes_files = getattr(self.prior, "get_gradient_filename_prefix", lambda: None)() is not None
        with self.comm.together("the prior's gradient"):
            if self.comm.is_root or not writes_files:
                return self.prior.get_gradient(image)
            return self.prior.get_gradient(image, write_file=False)

    def _inter_update_filter(self, image, subiteration_num: int) -> None:
        """STIR's inter-update filter: the estimate, before the update multiplies it."""
        if self._prepared_filters is not None:
            self._prepared_filters.before_multiplying(image, subiteration_num)

    def _end_of_subiteration_filters(self, image, subiteration_num: int) -> None:
        """STIR's inter-iteration filter, then (after the last subiteration) its post-filter."""
        if self._prepared_filters is not None:
            last = subiteration_num == self.num_subiterations
            self._prepared_filters.end_of_subiteration(image, subiteration_num, last)

    def _objective_report(self, image, subiteration_num: int) -> tuple[float | None, float | None]:
        """STIR's ``end_of_iteration_processing`` report: (objective function without penalty,
        penalty or None without a prior) after subiterations that are multiples of the interval,
        and after the last one; (None, None) elsewhere."""
        k = self.report_objective_interval
        if k <= 0 or (subiteration_num % k and subiteration_num != self.num_subiterations):
            return None, None
        penalty = None if self.prior is None else (0.0 if self.prior_is_zero else self.prior.get_value(image))
        return self.objective.log_likelihood(self.projector, image), penalty

    def log_likelihood(self, image) -> float:
        """The Poisson log-likelihood of all data at ``image`` (after :meth:`set_up`)."""
        if self.sensitivities is None:
            raise StirGpuError("OSEM.log_likelihood: call set_up() first")
        return self.objective.log_likelihood(self.projector, image)

    # -- the whole run --------------------------------------------------------------------------------
    def initial_image(self, value: float | np.ndarray | VoxelsOnCartesianGrid = 1.0):
        """A new initial estimate on the device: a constant (STIR's ``1``/``0``), an image, or an
        array (numpy or cupy; copied).  One holding NaN or ±Inf is refused (NonFiniteError)."""
        self._check_initial(value)
        return self._initial_copy(value)

    @staticmethod
    def _check_initial(value) -> None:
        """Refuse an initial estimate holding NaN or ±Inf (NonFiniteError), unless the
        configuration's ``check_finite`` is off."""
        if not get_config().check_finite:
            return
        if isinstance(value, VoxelsOnCartesianGrid):
            value = value.array
        elif isinstance(value, (int, float, np.floating, np.integer)):
            value = np.float32(value)
        elif array_module(value) is np:
            value = np.asarray(to_numpy(value))
        check_finite_image(value, "initial estimate")

    def _initial_copy(self, value):
        if isinstance(value, VoxelsOnCartesianGrid):
            if value.info != self.image_info:
                raise GeometryError(f"initial estimate: geometry {value.info!r} differs from {self.image_info!r}")
            return self.to_device(value.array.copy())
        if isinstance(value, (int, float, np.floating, np.integer)):
            x = self.zeros()
            x[...] = np.float32(value)
            return x
        shape = tuple(getattr(value, "shape", ()))
        if shape != self.image_info.shape:
            raise GeometryError(
                f"initial estimate: shape {shape} differs from the image geometry {self.image_info.shape}"
            )
        xp = self._xp()
        if array_module(value) is xp and xp is not np:
            return xp.array(value, dtype=np.float32, copy=True)
        return self.to_device(np.array(to_numpy(value), dtype=np.float32, copy=True))

    def reconstruct(
        self, image=None, callback: Callable[[SubiterationRecord, object], None] | None = None
    ) -> OSEMResult:
        """Run subiterations ``start .. num_subiterations`` from ``image`` (default: ones).

        ``image`` (a constant, an image or an array) is copied, never modified.
        ``callback(record, image)`` is called after every subiteration.
        """
        self._check_initial(1.0 if image is None else image)  # (before the sensitivities are written)
        setup_seconds = self.set_up() if self.sensitivities is None else 0.0
        x = self.initial_image(1.0 if image is None else image)
        if self.enforce_initial_positivity:
            self._initial_positivity(x)
        save = set(self.save_points())
        records: list[SubiterationRecord] = []
        saved: list[tuple[int, Path]] = []  # (subiteration, estimate) of every complete estimate
        writing = None  # (subiteration, estimate, its header's identity before) while one is written
        todo = range(self.start_subiteration_num, self.num_subiterations + 1)
        bar = self._bar(len(todo), "OSEM", "subiteration")
        n = self.start_subiteration_num
        try:
            for n in todo:
                t0 = time.perf_counter()
                x, loglik = self.update(x, n)
                # the update's own call (the objective report below is another, over all views)
                stats = getattr(self.projector, "last_stats", None)
                objective, penalty = self._objective_report(x, n)
                self._end_of_subiteration_filters(x, n)
                path = None
                if n in save and self.output_filename_prefix is not None:
                    path = estimate_filename(self.output_filename_prefix, n)
                    writing = (n, path, _file_identity(path))
                    with self.comm.together(f"writing {path}"):
                        if self.comm.is_root:  # (every rank holds the same estimate)
                            write_image(
                                path, VoxelsOnCartesianGrid(self.image_info, fill=to_numpy(x)), overwrite=self.overwrite
                            )
                        saved.append((n, path))
                    writing = None
                rec = SubiterationRecord(
                    n, self.subset_num(n), time.perf_counter() - t0, loglik, path, stats, objective, penalty
                )
                records.append(rec)
                if bar is not None:
                    bar.update(1)
                if callback is not None:
                    callback(rec, x)
        except KeyboardInterrupt as exc:
            if (
                writing is not None
                and writing[:2] not in saved
                and _file_identity(writing[1]) not in (None, writing[2])
            ):
                saved.append(writing[:2])  # renamed into place (header last) before the interrupt: complete
            # interrupted after subiteration n's estimate was complete: n's work is kept, the
            # first subiteration not done is the next one
            stopped = n + 1 if saved and saved[-1][0] == n else n
            exc.add_note(self._interrupted_note(stopped, saved))
            raise
        finally:
            if bar is not None:
                bar.close()
        paths = [p for _, p in saved]
        return OSEMResult(x, self.image_info, records, paths, list(self.sensitivity_files), setup_seconds)

    def _interrupted_note(self, subiteration_num: int, saved: list[tuple[int, Path]]) -> str:
        """What an interrupted run kept: its complete estimates (``saved``: subiteration and
        file of each), and how to go on from the last."""
        where = f"stopped in subiteration {subiteration_num}"
        if not saved:
            if self.output_filename_prefix is None:
                return f"{where}; no estimate is written by this run (no output filename prefix)"
            first = next((p for p in self.save_points() if p >= subiteration_num), None)
            return f"{where}: no estimate written yet" + (f" (the first after subiteration {first})" if first else "")
        (last, last_path), paths = saved[-1], [p for _, p in saved]
        if last == self.num_subiterations:
            return f"the run had finished: every estimate is complete ({_names(paths)})"
        return (
            f"{where}: estimates up to subiteration {last} are complete "
            f"({_names(paths)}); to continue: 'initial estimate := {last_path}' and "
            f"'start at subiteration number := {last + 1}'"
        )


def _communicator_of(projector, comm) -> Communicator:
    """The projector's communicator (this process alone for a projector without one); a ``comm``
    given beside it must be the same."""
    own = getattr(projector, "comm", None)
    if comm is None:
        return own if isinstance(own, Communicator) else Communicator(None)
    given = as_communicator(comm)
    if own is not None and not (given.mpi is own.mpi or (given.mpi is not None and given.mpi == own.mpi)):
        raise StirGpuError(
            "OSEM: comm differs from the projector's communicator; make the projector with comm= "
            "(ProjectorPair(comm=...)) and leave OSEM's out"
        )
    return given


def _file_of(store) -> Path | None:
    """The header a store was read from; None for one in memory or computed."""
    return store.path if isinstance(store, ProjDataFromFile) else None


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, modification time) of ``path``, None where there is none: an estimate's
    header renamed into place while it was written has another identity than before (a new
    inode), and the header goes last, so its data are complete."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def _names(paths: list[Path]) -> str:
    """A short list of file names for one line: all of up to three, else the first and last."""
    names = [os.fspath(p) for p in paths]
    return ", ".join(names) if len(names) <= 3 else f"{names[0]}, ..., {names[-1]} ({len(names)} files)"
