"""A projector's front end over a :class:`~stirgpu.projectors.session.ProjectionSession`.

:class:`StreamingProjector` is what every stirgpu projector has: the options and the set-up
(both the session's), the checks of a call's arguments against the set-up, running a chunk
program on the session's engine, FOV truncation of back projections, output images, aborting
new output stores, and the call's statistics (``last_stats``, ``last_plan``: the projector's
own, never another's on the same session).  Options: see :mod:`stirgpu.projectors.session`.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from ..arrays import is_cupy
from ..config import get_config
from ..distributed import complete_on_every_rank, share_viewgrams, written_by_ranks
from ..errors import GeometryError, StirGpuError
from ..execution import RunResult
from ..execution.plan import Plan
from ..execution.progress import progress_bar
from ..execution.stats import RunStats
from ..formats import ProjData
from ..formats.finite import input_label
from ..geometry import ImageInfo, ProjDataInfo
from ..interop import as_proj_data, image_info_of, is_stir_image, is_stir_proj_data, store_image
from ..kernels import apply_cylindrical_fov
from .adjoint import adjointness_test
from .session import ProjectionSession

if TYPE_CHECKING:
    from .back import BackProjector
    from .forward import ForwardProjector
    from .pair import ProjectorPair

__all__ = ["StreamingProjector"]


def _option(name: str, doc: str) -> property:
    """A read-only projector attribute: the session's option ``name``."""
    return property(lambda self: getattr(self.session.options, name), doc=doc)


class StreamingProjector:
    """Base class: a projector's front end over a session (see the module docstring).

    Keywords: the options of :mod:`stirgpu.projectors.session`, for a new session of this
    projector's own; or ``session=`` (and no options) to project on an existing
    :class:`~stirgpu.projectors.session.ProjectionSession`, shared with the projectors made
    on it.  Subclasses say which directions they project (:meth:`_forward_and_back`).
    """

    def __init__(
        self,
        backend: str | None = None,
        devices=None,
        gpu_memory_budget=None,
        host_memory_budget=None,
        max_views_per_chunk: int | None = None,
        restrict_to_cylindrical_fov: bool = True,
        units: str = "stir",
        max_segment_num_to_process: int | None = None,
        num_slots: int = 3,
        *,
        session: ProjectionSession | None = None,
        comm=None,
    ):
        options = dict(
            backend=backend,
            devices=devices,
            gpu_memory_budget=gpu_memory_budget,
            host_memory_budget=host_memory_budget,
            max_views_per_chunk=max_views_per_chunk,
            restrict_to_cylindrical_fov=restrict_to_cylindrical_fov,
            units=units,
            max_segment_num_to_process=max_segment_num_to_process,
            num_slots=num_slots,
            comm=comm,
        )
        if session is None:
            session = ProjectionSession(**options)
        else:
            _refuse_options_beside(session, options, type(self).__name__)
        #: the :class:`~stirgpu.projectors.session.ProjectionSession` this projector projects on
        self.session = session
        #: :class:`~stirgpu.execution.RunStats` of this projector's last call (None before the first)
        self.last_stats: RunStats | None = None
        #: :class:`~stirgpu.execution.Plan` of this projector's last call
        self.last_plan: Plan | None = None

    backend_requested = _option("backend", 'The backend asked for ("auto", "cpu" or "cuda").')
    devices_requested = _option("devices", "The devices asked for (None: the backend's default).")
    gpu_memory_budget = _option("gpu_memory_budget", "Bytes per GPU (None: free memory less a reserve).")
    host_memory_budget = _option("host_memory_budget", "Bytes of host memory (None: a quarter of the available).")
    max_views_per_chunk = _option("max_views_per_chunk", "An upper bound on chunk size (None: none).")
    restrict_to_cylindrical_fov = _option("restrict_to_cylindrical_fov", "STIR's cylindrical-FOV truncation.")
    units = _option("units", '"stir" (x-voxel units) or "mm".')
    max_segment_num_to_process = _option("max_segment_num_to_process", "Segments with |segment| <= this (None: all).")
    num_slots = _option("num_slots", "Chunks in flight per lane.")
    pin_host_memory = _option("pin_host_memory", "When in-memory stores are page-locked.")
    compute_streams = _option("compute_streams", "Chunks a GPU may compute at once.")

    @property
    def comm(self):
        """The session's :class:`~stirgpu.distributed.Communicator` (the MPI ranks sharing each call)."""
        return self.session.comm

    # -- set-up (the session's) ------------------------------------------------------------
    def set_up(self, proj_data_info, image_info) -> None:
        """Fix the projection-data and image geometry (STIR's ``set_up``) of the session: every
        projector on it is set up.  See :meth:`ProjectionSession.set_up
        <stirgpu.projectors.session.ProjectionSession.set_up>`."""
        self.session.set_up(proj_data_info, image_info)

    def is_set_up(self) -> bool:
        return self.session.is_set_up()

    def get_proj_data_info(self) -> ProjDataInfo:
        self._require_set_up()
        return self.session.proj_data_info

    def get_image_info(self) -> ImageInfo:
        self._require_set_up()
        return self.session.image_info

    @property
    def backend(self) -> str | None:
        """The backend in use ("cpu" or "cuda"), known after set-up."""
        return self.session.backend

    @property
    def devices(self) -> tuple[int, ...] | None:
        return self.session.devices

    def segments_to_process(self) -> tuple[int, ...]:
        self._require_set_up()
        return self.session.segments_to_process()

    def _require_set_up(self) -> None:
        if not self.session.is_set_up():
            raise StirGpuError(f"{type(self).__name__}: call set_up(proj_data_info, image_info) first")

    def _auto_set_up(self, store, image) -> None:
        """Set up from the arguments of the first call when possible (a stirgpu store and an
        image that knows its geometry)."""
        if self.session.is_set_up():
            return
        info = image_info_of(image) if image is not None else None
        if store is None or info is None:
            self._require_set_up()
        self.set_up(store.get_proj_data_info(), info)  # (a STIR ProjData gives STIR's ProjDataInfo)

    def _store(self, obj, name: str):
        """``obj`` as a chunk store (STIR ProjData through their own, converted geometry),
        checked against the set-up."""
        store = as_proj_data(obj, name=name)
        pdi, own = store.get_proj_data_info(), self.session.proj_data_info
        if pdi != own:
            raise GeometryError(f"{name}: its geometry differs from the projector's set-up ({pdi!r} vs {own!r})")
        return store

    def _check_image(self, image, name: str) -> None:
        """A STIR image must have the set-up's geometry (STIR's ``has_same_characteristics``);
        arrays carry no geometry and are checked by shape only."""
        if image is None or not is_stir_image(image):
            return
        info, own = image_info_of(image, name), self.session.image_info
        if info != own:
            raise GeometryError(f"{name}: its geometry differs from the projector's set-up ({info!r} vs {own!r})")

    # -- the input image (the session's) ---------------------------------------------------
    def set_input(self, image) -> None:
        """Upload ``image`` ((z, y, x): numpy, cupy, torch, stirgpu or stir image) to every lane
        now, zeroed outside the cylindrical FOV when that option is on (on the copy): the
        input of every projector on the session."""
        self._require_set_up()
        self.session.set_input(image)

    def _prepare_input(self, image) -> tuple[int, float]:
        """The session's input for this call (``image``, or the current one for None); returns
        the (bytes, seconds) of the upload this made, for the call's statistics."""
        if image is None and not self.session.has_input():
            raise StirGpuError(f"{type(self).__name__}: no input image; call set_input(image) or pass image=")
        return self.session.use_input(image)

    # -- the adjoint pair ------------------------------------------------------------------
    def _forward_and_back(self) -> tuple[ForwardProjector | ProjectorPair, BackProjector | ProjectorPair]:
        """The forward and back projector this projector's adjointness is tested with: itself
        for the direction(s) it projects, one on its session for the other."""
        raise NotImplementedError(f"{type(self).__name__} projects in no direction")

    def adjointness_test(self, seed: int = 0) -> float:
        """Relative difference of ``<A x, y>`` and ``<x, B y>`` for random non-negative x, y,
        with A and B this projector and its adjoint on the same session (0 for an exact
        adjoint, float32 rounding in practice): :func:`stirgpu.projectors.adjoint.adjointness_test`.
        Replaces the session's input image."""
        forward, back = self._forward_and_back()
        return adjointness_test(forward, back, seed)

    # -- running -------------------------------------------------------------------------
    def _views(self, subset_num: int, num_subsets: int, views=None) -> np.ndarray:
        """The views a call projects: subset ``subset_num`` of ``num_subsets`` (STIR's rule), or
        ``views`` itself when given (any distinct views, in ascending order)."""
        if views is None:
            return self.session.proj_data_info.subset_views(subset_num, num_subsets)
        if (subset_num, num_subsets) != (0, 1):
            raise StirGpuError("give either views= or a subset (subset_num, num_subsets), not both")
        v = np.asarray(views)
        if v.ndim != 1 or v.size == 0 or v.dtype.kind not in "iu":
            raise GeometryError(f"views must be a non-empty 1-D sequence of integers, got {views!r}")
        v = v.astype(np.int64)
        num_views = self.session.proj_data_info.get_num_views()
        if np.any(np.diff(v) <= 0) or v[0] < 0 or v[-1] >= num_views:
            raise GeometryError(f"views must be distinct, ascending and in [0, {num_views - 1}], got {v.tolist()}")
        return v

    def _result_target(self, image_out, accumulate: bool) -> dict:
        """Where the engine puts a back projection: on the GPU of a cupy ``image_out`` when it
        is one of this projector's GPUs (the result then never visits host memory), and, when
        the result replaces ``image_out``'s values and it has the image's layout, into
        ``image_out`` itself (that GPU accumulates there: no image-sized copy)."""
        if self.backend != "cuda" or image_out is None or not is_cupy(image_out):
            return {}
        d = int(image_out.device.id)
        if d not in (self.devices or ()):  # (a cuda backend: set up, its devices known)
            return {}
        fits = (
            not accumulate
            and image_out.dtype == np.float32
            and image_out.flags.c_contiguous
            and tuple(image_out.shape) == tuple(self.session.image_info.shape)
        )
        return {"result_device": d, "result_out": image_out if fits else None}

    def _run(
        self,
        program,
        views,
        sources: dict,
        sinks: dict,
        operation: str,
        result_device: int | None = None,
        result_out=None,
        subset: tuple[int, int] = (0, 1),
        upload: tuple[int, float] = (0, 0.0),
    ) -> RunResult:
        """Plan and run ``program`` over ``views`` (those of subset ``subset`` = (num, of)) on
        the session's engine.  The statistics, ``last_stats``, name the operation and the
        subset, and count ``upload`` ((bytes, seconds): the call's upload of its input image).

        Under MPI (the session's ``comm`` has several ranks) this rank runs its share of the
        viewgrams (:func:`~stirgpu.distributed.share_viewgrams`); then the accumulated image and
        the scalars are summed over the ranks, and each output that is not one file written
        by the ranks gets the other ranks' shares -- every rank ends with the result a single
        process would have.  A failure on any rank fails the call on every rank alike
        (:class:`~stirgpu.errors.RankFailure`)."""
        comm = self.session.comm
        with comm.together(operation):
            _check_stores(sources, sinks)
            segments = self.session.segments_to_process()
            if comm.parallel:
                views_here = share_viewgrams(self.session.proj_data_info, segments, views, comm.rank, comm.size)
            else:
                views_here = views
            result = self._run_share(program, views_here, sources, sinks, operation, result_device, result_out)
        if comm.parallel:  # (only once every rank has its share: no rank waits for a failed one)
            with comm.together(f"{operation}: adding up the ranks' shares"):
                self._combine(result, sinks, segments, views)
        up_bytes, up_seconds = upload
        result.stats.bytes_uploaded += up_bytes
        result.stats.setup_seconds += up_seconds
        result.stats.wall_seconds += up_seconds
        result.stats.subset_num, result.stats.num_subsets = int(subset[0]), int(subset[1])
        self.last_stats = result.stats
        return result

    def _run_share(self, program, views, sources, sinks, operation, result_device, result_out) -> RunResult:
        """Plan and run ``program`` over ``views`` (a sequence, or views per segment: this
        rank's share) on the session's engine."""
        session = self.session
        engine = session.engine
        pdi, image_shape = session.proj_data_info, session.image_info.shape
        segments = session.segments_to_process()
        # in-memory stores are page-locked once and copied straight to/from the GPUs
        direct = engine.direct_io({**sources, **sinks}, pdi, segments)
        plan = engine.make_plan(
            program,
            pdi,
            segments,
            views,
            image_shape,
            host_budget=session.options.host_memory_budget,
            gpu_budget=session.options.gpu_memory_budget,
            max_views_per_chunk=session.options.max_views_per_chunk,
            depth=session.options.num_slots,
            direct=direct,
        )
        self.last_plan = plan
        # one progress bar, rank 0's (its share), under MPI
        with progress_bar(len(plan.chunks) if session.comm.is_root else 0, operation) as update:
            with contextlib.ExitStack() as stack:
                behind = {
                    n: stack.enter_context(_WriteBehind(st)) for n, st in sinks.items() if st.abilities.write_behind
                }
                result = engine.run(
                    program,
                    plan,
                    pdi,
                    sources,
                    sinks,
                    image_shape=image_shape,
                    progress=update,
                    operation=operation,
                    result_device=result_device,
                    result_out=result_out,
                    parallel_io=_parallel_io(sources, sinks),
                    after_write=behind,
                    direct=direct,
                    check_finite=_finite_checks(sources),
                )
        if result.plan is not None:  # (smaller than asked for when the call ran out of memory)
            self.last_plan = result.plan
        return result

    def _combine(self, result: RunResult, sinks: dict, segments, views) -> None:
        """Under MPI: the image and the scalars summed over the ranks (in place), the outputs
        completed with the other ranks' shares unless the ranks write one file; the bytes and
        seconds go into the call's statistics."""
        comm = self.session.comm
        t0 = time.perf_counter()
        sent = 0
        if result.image is not None:
            sent += comm.sum_image(result.image)
            result.stats.image_sum = comm.last_image_sum
        if result.scalars:
            result.scalars = comm.sum_scalars(result.scalars)
            sent += 8 * len(result.scalars)
        for store in sinks.values():
            if not written_by_ranks(store):
                sent += complete_on_every_rank(comm, store, self.session.proj_data_info, segments, views)
        seconds = time.perf_counter() - t0
        stats = result.stats
        stats.ranks, stats.rank = comm.size, comm.rank
        stats.exchanged_bytes, stats.exchange_seconds = sent, seconds
        stats.wall_seconds += seconds

    def _finish_image(self, image):
        """STIR's back projector zeroes its result outside the cylindrical FOV (numpy or cupy)."""
        mask = self.session.fov_mask
        if mask is None:
            return image
        if isinstance(image, np.ndarray):
            return apply_cylindrical_fov(image, mask, out=image)
        import cupy

        with cupy.cuda.Device(image.device.id):
            return apply_cylindrical_fov(image, mask, out=image)

    @staticmethod
    def _abort_new_store(store) -> None:
        """A store of new, uncommitted data (``abilities.abortable``: a new disk store) whose
        filling failed is discarded, never committed (stores updated in place keep what was
        written; see docs/execution.md)."""
        if store.abilities.abortable:
            store.abort()

    @staticmethod
    def _output_image(image_out, values: np.ndarray, accumulate: bool):
        if image_out is None or values is image_out:  # (the engine wrote into image_out)
            return values
        return store_image(image_out, values, accumulate)

    def __repr__(self) -> str:
        where = "not set up" if not self.session.is_set_up() else f"{self.backend} {list(self.devices or ())}"
        return f"{type(self).__name__}({where}, units={self.units!r})"


def _refuse_options_beside(session: ProjectionSession, options: dict, who: str) -> None:
    """A projector made on a session takes the session's options: any other given is refused
    (they would silently not apply)."""
    defaults = inspect.signature(ProjectionSession).parameters
    given = sorted(k for k, v in options.items() if v is not defaults[k].default and v != defaults[k].default)
    if given:
        raise StirGpuError(
            f"{who}(session=...) projects with the session's options; {', '.join(given)} cannot be given beside it"
        )


def _pdi_source(obj):
    """``obj`` if it can say its geometry (a stirgpu store, a STIR ProjData; for automatic
    set-up), else None."""
    return obj if isinstance(obj, ProjData) or is_stir_proj_data(obj) else None


def _check_stores(sources: dict, sinks: dict) -> None:
    """Refuse, before any work, inputs that are not ``abilities.readable`` (a template: a header
    whose data file is missing) and outputs that are not ``abilities.writable`` (read-only): a
    StoreAbilityError, the store's own, names it (and its file).  Without this, the pipeline's
    reader or writer thread would fail mid-call."""
    for store in sources.values():
        store.check_readable()
    for store in sinks.values():
        store.check_writable()


#: the argument each input of the programs is given as, where its name is another
_ARGUMENTS = {"data": "proj_data"}


def _finite_checks(sources: dict) -> dict[str, tuple[str, str | None]]:
    """The inputs whose NaN and ±Inf values the engine refuses (every one, unless the
    configuration's ``check_finite`` is off), each with (what a message calls it: its file, else
    its argument; its file or None)."""
    if not get_config().check_finite:
        return {}
    return {n: (input_label(st, _ARGUMENTS.get(n, n)), st.source_file) for n, st in sources.items()}


def _parallel_io(sources: dict, sinks: dict) -> dict[str, bool]:
    """Which stores' chunk reads (inputs) and writes (outputs) the engine splits over its I/O
    threads: those whose abilities say such calls run in parallel."""
    return {
        **{n: st.abilities.parallel_reads for n, st in sources.items()},
        **{n: st.abilities.parallel_writes for n, st in sinks.items()},
    }


class _WriteBehind:
    """Starts the write-back of an output with ``abilities.write_behind`` (a disk store) while
    the projection still runs.

    Linux keeps written pages in the page cache until memory pressure, a timer or ``fsync``
    (at commit) writes them; for a file smaller than the dirty-page thresholds nothing
    reaches the disk before the commit, so disk time adds to compute time instead of
    overlapping it.  After every ``step_bytes`` written this asks the store to start the
    write-back (``ProjDataFromFile.start_writeback``: asynchronous; pages already written
    leave the page cache, which a streamed output should not crowd anyway).
    """

    step_bytes = 64 * 1024 * 1024

    def __init__(self, store):
        self._store = store
        self._pending = 0
        self._lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def __call__(self, chunk) -> None:
        with self._lock:
            self._pending += chunk.nbytes
            if self._pending < self.step_bytes:
                return
            self._pending = 0
        self._store.start_writeback()
