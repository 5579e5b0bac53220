"""What every stirgpu projector shares: options, set-up, the engine, the cached input image.

Options (constructor keywords; ``None`` takes the value of :func:`stirgpu.config.get_config`):

* ``backend`` -- "auto" (CUDA when cupy sees a GPU), "cpu" or "cuda";
* ``devices`` -- GPU ids (default: all visible GPUs) or, for the CPU backend, worker ids
  (default two workers);
* ``gpu_memory_budget`` / ``host_memory_budget`` -- bytes (or "512M", "2G"); default: free GPU
  memory less a reserve, a quarter of the available host memory;
* ``max_views_per_chunk`` -- an upper bound on chunk size;
* ``restrict_to_cylindrical_fov`` -- STIR's Parallelproj behaviour (default True): the input
  image is zeroed outside STIR's cylinder before forward projection (a copy; the caller's
  image is untouched), the back projection after back projection;
* ``units`` -- "stir" (line integrals in x-voxel units, like STIR's Parallelproj projector;
  the default) or "mm";
* ``numerics`` -- "stir" (the default with STIR units: STIR's float32 LOR endpoints and
  libparallelproj 2.0.3's float32 Joseph arithmetic, so forward projections equal STIR's bit
  for bit) or "exact" (float64 geometry: the exact Joseph integral of the exact LOR; the
  default with ``units="mm"``; the tuned CUDA kernels).  docs/joseph.md, "Precision";
* ``max_segment_num_to_process`` -- like STIR: only segments with ``|segment| <=`` this
  (default all); other segments of an output are not touched;
* ``num_slots`` -- chunks in flight per lane (default 3: one being read or written, one
  computing, one queued, so per-chunk host work never leaves the GPU waiting; 2 is plain
  double buffering and uses less memory).

In-memory stores (``ProjDataInMemory``) used more than once by a GPU projector are
page-locked, once, so that chunks go straight between them and the GPUs by DMA (no staging
copy); a store used once (a fresh output) is not worth it and goes through the staging
buffers.  The configuration's ``pin_host_memory`` ("reused", "always", "never") sets the
policy (see docs/execution.md, "Direct transfers").  Its ``compute_streams`` (default 2) is
the number of chunks a GPU may compute at once (their kernels overlap where one's last
blocks leave SMs idle).

The input image and its upload.  ``set_input(image)`` uploads ``image`` to every lane
now (STIR's ``set_input``); a later call with ``image=None`` uses it as uploaded.  A call
given ``image=`` re-uploads unless it is the very object of the last upload *and* that
object carries a version stamp that has not changed (torch tensors' ``_version``, objects
with a ``version`` attribute); numpy and cupy arrays carry none, since they can change in
place without trace, so passing one always uploads it.  To project one unchanged image
many times, call ``set_input`` once and pass ``image=None``.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

import numpy as np

from ..config import get_config
from ..errors import GeometryError, StirGpuError
from ..execution import Engine, RunResult, resolve_backend, resolve_devices
from ..execution.plan import Plan, parse_bytes
from ..execution.progress import progress_bar
from ..execution.stats import RunStats
from ..geometry import ImageInfo, ProjDataInfo
from ..interop import (
    as_image_array,
    as_proj_data,
    image_info_of,
    is_stir_image,
    is_stir_proj_data_info,
    proj_data_info_from_stir,
    store_image,
    version_stamp,
)
from ..kernels import apply_cylindrical_fov, cylindrical_fov_mask, stir_rim, stir_scaled_geometry

__all__ = ["StreamingProjector"]


class _Shared:
    """State the projectors of one pair share: the engine and what input image it holds."""

    def __init__(self):
        self.engine: Engine | None = None
        self.input_ref: Any = None  # weakref (or the object itself if not weak-referenceable)
        self.input_stamp: Any = None
        self.input_valid = False


def _budget(value, name: str) -> int | None:
    if value is None:
        return None
    v = parse_bytes(value)
    if v <= 0:
        raise StirGpuError(f"{name} must be positive")
    return v


class StreamingProjector:
    """Base class: set-up, options and the machinery shared by forward and back projectors."""

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
        numerics: str | None = None,
    ):
        cfg = get_config()
        self.backend_requested = cfg.backend if backend is None else str(backend)
        if self.backend_requested not in ("auto", "cpu", "cuda"):
            raise StirGpuError(f"backend must be 'auto', 'cpu' or 'cuda', not {backend!r}")
        self.devices_requested = cfg.devices if devices is None else tuple(int(d) for d in devices)
        self.gpu_memory_budget = _budget(
            cfg.gpu_memory_budget if gpu_memory_budget is None else gpu_memory_budget, "gpu_memory_budget"
        )
        self.host_memory_budget = _budget(
            cfg.host_memory_budget if host_memory_budget is None else host_memory_budget, "host_memory_budget"
        )
        mv = cfg.max_views_per_chunk if max_views_per_chunk is None else max_views_per_chunk
        if mv is not None and int(mv) < 1:
            raise StirGpuError(f"max_views_per_chunk must be >= 1, not {mv}")
        self.max_views_per_chunk = None if mv is None else int(mv)
        self.restrict_to_cylindrical_fov = bool(restrict_to_cylindrical_fov)
        if units not in ("stir", "mm"):
            raise StirGpuError(f"units must be 'stir' (x-voxel units, like STIR) or 'mm', not {units!r}")
        self.units = units
        numerics = cfg.numerics if numerics is None else numerics
        if numerics is None:
            numerics = "stir" if units == "stir" else "exact"
        if numerics not in ("stir", "exact"):
            raise StirGpuError(
                f"numerics must be 'stir' (STIR's numbers) or 'exact' (float64 geometry), not {numerics!r}"
            )
        if numerics == "stir" and units != "stir":
            raise StirGpuError("numerics='stir' gives STIR's numbers in STIR's units: it needs units='stir'")
        self.numerics = numerics
        if max_segment_num_to_process is not None and int(max_segment_num_to_process) < 0:
            raise StirGpuError(f"max_segment_num_to_process must be >= 0, not {max_segment_num_to_process}")
        self.max_segment_num_to_process = (
            None if max_segment_num_to_process is None else int(max_segment_num_to_process)
        )
        if int(num_slots) < 1:
            raise StirGpuError(f"num_slots must be >= 1, not {num_slots}")
        self.num_slots = int(num_slots)
        self.pin_host_memory = cfg.pin_host_memory
        self.compute_streams = cfg.compute_streams
        self._shared = _Shared()
        self._pdi: ProjDataInfo | None = None
        self._image_info: ImageInfo | None = None
        self._geometry = None
        self._fov_mask: np.ndarray | None = None
        #: :class:`~stirgpu.execution.RunStats` of the last call (None before the first)
        self.last_stats: RunStats | None = None
        #: :class:`~stirgpu.execution.Plan` of the last call
        self.last_plan: Plan | None = None
        self._pending_upload = (0, 0.0)  # (bytes, seconds) of the upload the next call reports

    # -- set-up --------------------------------------------------------------------------
    def set_up(self, proj_data_info, image_info) -> None:
        """Fix the projection-data and image geometry (STIR's ``set_up``).

        ``proj_data_info``: a stirgpu ``ProjDataInfo`` or a STIR ``ProjDataInfo`` (converted
        exactly, :func:`~stirgpu.interop.proj_data_info_from_stir`); ``image_info``: an
        ``ImageInfo``, or an image that knows its geometry (a ``stir.FloatVoxelsOnCartesianGrid``,
        as STIR's own ``set_up`` takes, or a stirgpu image).
        """
        proj_data_info = _as_proj_data_info(proj_data_info)
        image_info = _as_image_info(image_info)
        _check_projectable(proj_data_info)
        m = self.max_segment_num_to_process
        if m is not None and m > max(-proj_data_info.get_min_segment_num(), proj_data_info.get_max_segment_num()):
            m = None
        self._pdi = proj_data_info
        self._image_info = image_info
        self._geometry = stir_scaled_geometry(
            image_info, stir_units=self.units == "stir", numerics=self.numerics, proj_data_info=proj_data_info
        )
        self._fov_mask = (
            cylindrical_fov_mask(
                image_info, stir_rim(image_info.shape[2], proj_data_info.get_scanner().inner_ring_radius)
            )
            if self.restrict_to_cylindrical_fov
            else None
        )
        self._shared.input_valid = False
        if self._shared.engine is None:
            backend = resolve_backend(self.backend_requested)
            self._shared.engine = Engine(
                backend,
                resolve_devices(backend, self.devices_requested),
                pin_host_memory=self.pin_host_memory,
                compute_streams=self.compute_streams,
            )

    def is_set_up(self) -> bool:
        return self._pdi is not None

    def get_proj_data_info(self) -> ProjDataInfo:
        self._require_set_up()
        return self._pdi

    def get_image_info(self) -> ImageInfo:
        self._require_set_up()
        return self._image_info

    @property
    def backend(self) -> str | None:
        """The backend in use ("cpu" or "cuda"), known after set-up."""
        e = self._shared.engine
        return None if e is None else e.backend

    @property
    def devices(self) -> tuple[int, ...] | None:
        e = self._shared.engine
        return None if e is None else e.devices

    def segments_to_process(self) -> tuple[int, ...]:
        self._require_set_up()
        m = self.max_segment_num_to_process
        return tuple(s for s in self._pdi.segment_nums if m is None or abs(s) <= m)

    def _require_set_up(self) -> None:
        if self._pdi is None:
            raise StirGpuError(f"{type(self).__name__}: call set_up(proj_data_info, image_info) first")

    def _auto_set_up(self, store, image) -> None:
        """Set up from the arguments of the first call when possible (a stirgpu store and an
        image that knows its geometry)."""
        if self._pdi is not None:
            return
        info = image_info_of(image) if image is not None else None
        if store is None or info is None:
            self._require_set_up()
        self.set_up(store.get_proj_data_info(), info)  # (a STIR ProjData gives STIR's ProjDataInfo)

    def _store(self, obj, name: str):
        """``obj`` as a chunk store (STIR ProjData through their own, converted geometry),
        checked against the set-up."""
        store = as_proj_data(obj, name=name)
        pdi = store.get_proj_data_info()
        if pdi != self._pdi:
            raise GeometryError(f"{name}: its geometry differs from the projector's set-up ({pdi!r} vs {self._pdi!r})")
        return store

    def _check_image(self, image, name: str) -> None:
        """A STIR image must have the set-up's geometry (STIR's ``has_same_characteristics``);
        arrays carry no geometry and are checked by shape only."""
        if image is None or not is_stir_image(image):
            return
        info = image_info_of(image, name)
        if info != self._image_info:
            raise GeometryError(
                f"{name}: its geometry differs from the projector's set-up ({info!r} vs {self._image_info!r})"
            )

    # -- the input image -----------------------------------------------------------------
    def set_input(self, image) -> None:
        """Upload ``image`` ((z, y, x): numpy, cupy, torch, stirgpu or stir image) to every lane
        now, zeroed outside the cylindrical FOV when that option is on (on the copy)."""
        self._require_set_up()
        self._upload(image)

    def _upload(self, image) -> int:
        arr = as_image_array(image, self._image_info.shape)
        sh = self._shared
        nbytes, seconds = sh.engine.set_image(arr, self._fov_mask)
        try:
            sh.input_ref = weakref.ref(image)
        except TypeError:
            sh.input_ref = None
        sh.input_stamp = version_stamp(image)
        sh.input_valid = True
        self._pending_upload = (nbytes, seconds)
        return nbytes

    def _prepare_input(self, image) -> None:
        sh = self._shared
        self._pending_upload = (0, 0.0)
        if image is None:
            if not sh.input_valid:
                raise StirGpuError(f"{type(self).__name__}: no input image; call set_input(image) or pass image=")
            return
        same = sh.input_ref is not None and sh.input_ref() is image
        stamp = version_stamp(image)
        if sh.input_valid and same and stamp is not None and stamp == sh.input_stamp:
            return
        self._upload(image)

    # -- running -------------------------------------------------------------------------
    def _views(self, subset_num: int, num_subsets: int, views=None) -> np.ndarray:
        """The views a call projects: subset ``subset_num`` of ``num_subsets`` (STIR's rule), or
        ``views`` itself when given (any distinct views, in ascending order)."""
        if views is None:
            return self._pdi.subset_views(subset_num, num_subsets)
        if (subset_num, num_subsets) != (0, 1):
            raise StirGpuError("give either views= or a subset (subset_num, num_subsets), not both")
        v = np.asarray(views)
        if v.ndim != 1 or v.size == 0 or v.dtype.kind not in "iu":
            raise GeometryError(f"views must be a non-empty 1-D sequence of integers, got {views!r}")
        v = v.astype(np.int64)
        if np.any(np.diff(v) <= 0) or v[0] < 0 or v[-1] >= self._pdi.get_num_views():
            raise GeometryError(
                f"views must be distinct, ascending and in [0, {self._pdi.get_num_views() - 1}], got {v.tolist()}"
            )
        return v

    def _result_target(self, image_out, accumulate: bool) -> dict:
        """Where the engine puts a back projection: on the GPU of a cupy ``image_out`` when it
        is one of this projector's GPUs (the result then never visits host memory), and, when
        the result replaces ``image_out``'s values and it has the image's layout, into
        ``image_out`` itself (that GPU accumulates there: no image-sized copy)."""
        if self.backend != "cuda" or image_out is None or type(image_out).__module__.split(".")[0] != "cupy":
            return {}
        d = int(image_out.device.id)
        if d not in self.devices:
            return {}
        fits = (
            not accumulate
            and image_out.dtype == np.float32
            and image_out.flags.c_contiguous
            and tuple(image_out.shape) == tuple(self._image_info.shape)
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
    ) -> RunResult:
        """Plan and run ``program`` over ``views`` (those of subset ``subset`` = (num, of); the
        statistics, ``last_stats``, name the operation and the subset)."""
        _check_stores(sources, sinks)
        engine = self._shared.engine
        segments = self.segments_to_process()
        # in-memory stores are page-locked once and copied straight to/from the GPUs
        direct = engine.direct_io({**sources, **sinks}, self._pdi, segments)
        plan = engine.make_plan(
            program,
            self._pdi,
            segments,
            views,
            self._image_info.shape,
            host_budget=self.host_memory_budget,
            gpu_budget=self.gpu_memory_budget,
            max_views_per_chunk=self.max_views_per_chunk,
            depth=self.num_slots,
            direct=direct,
        )
        self.last_plan = plan
        with progress_bar(len(plan.chunks), operation) as update:
            with contextlib.ExitStack() as stack:
                behind = {
                    n: stack.enter_context(_WriteBehind(st)) for n, st in sinks.items() if _WriteBehind.applies(st)
                }
                result = engine.run(
                    program,
                    plan,
                    self._pdi,
                    sources,
                    sinks,
                    image_shape=self._image_info.shape,
                    progress=update,
                    operation=operation,
                    result_device=result_device,
                    result_out=result_out,
                    parallel_io={n: _parallel_safe(st) for n, st in {**sources, **sinks}.items()},
                    after_write=behind,
                    direct=direct,
                )
        up_bytes, up_seconds = self._pending_upload
        self._pending_upload = (0, 0.0)
        result.stats.bytes_uploaded += up_bytes
        result.stats.setup_seconds += up_seconds
        result.stats.wall_seconds += up_seconds
        result.stats.subset_num, result.stats.num_subsets = int(subset[0]), int(subset[1])
        self.last_stats = result.stats
        return result

    def _finish_image(self, image):
        """STIR's back projector zeroes its result outside the cylindrical FOV (numpy or cupy)."""
        if self._fov_mask is None:
            return image
        if isinstance(image, np.ndarray):
            return apply_cylindrical_fov(image, self._fov_mask, out=image)
        import cupy

        with cupy.cuda.Device(image.device.id):
            return apply_cylindrical_fov(image, self._fov_mask, out=image)

    @staticmethod
    def _abort_new_store(store) -> None:
        """A new, uncommitted disk store whose filling failed is discarded, never committed
        (stores opened for update in place keep what was written; see docs/execution.md)."""
        if getattr(store, "mode", None) == "w" and hasattr(store, "abort"):
            store.abort()

    @staticmethod
    def _output_image(image_out, values: np.ndarray, accumulate: bool):
        if image_out is None or values is image_out:  # (the engine wrote into image_out)
            return values
        return store_image(image_out, values, accumulate)

    def __repr__(self) -> str:
        where = "not set up" if self._pdi is None else f"{self.backend} {list(self.devices)}"
        return f"{type(self).__name__}({where}, units={self.units!r}, numerics={self.numerics!r})"


def _check_stores(sources: dict, sinks: dict) -> None:
    """Refuse, before any work, stores whose values cannot be read (a template: a header whose
    data file is missing) or written (read-only): the store's own error names the file.
    Without this, the pipeline's reader or writer thread would fail mid-call."""
    for stores, check in ((sources, "check_readable"), (sinks, "check_writable")):
        for store in stores.values():
            method = getattr(store, check, None)  # (STIR adapters check as they go)
            if method is not None:
                method()


def _check_projectable(proj_data_info: ProjDataInfo) -> None:
    """Raise GeometryError for projection data the stirgpu projectors cannot take (what
    ``set_up`` refuses before computing anything)."""
    ntof = proj_data_info.get_num_tof_poss()
    if ntof > 1:
        raise GeometryError(
            f"TOF projection data ({ntof} timing positions) are not supported by the stirgpu projectors"
        )


def _as_proj_data_info(obj) -> ProjDataInfo:
    if isinstance(obj, ProjDataInfo):
        return obj
    if is_stir_proj_data_info(obj):
        return proj_data_info_from_stir(obj, "set_up: proj_data_info")
    raise GeometryError(f"set_up: proj_data_info must be a stirgpu or STIR ProjDataInfo, not {type(obj).__name__}")


def _as_image_info(obj) -> ImageInfo:
    if isinstance(obj, ImageInfo):
        return obj
    info = image_info_of(obj, "set_up: image_info") if obj is not None else None
    if info is None:
        raise GeometryError(
            f"set_up: image_info must be a stirgpu ImageInfo or an image that knows its "
            f"geometry (a stir.FloatVoxelsOnCartesianGrid, a stirgpu image), not {type(obj).__name__}"
        )
    return info


def _parallel_safe(store) -> bool:
    """stirgpu's own stores allow concurrent reads/writes of disjoint views (positioned I/O,
    numpy slices); anything else is accessed from one thread at a time."""
    from ..formats import ProjData

    return isinstance(store, ProjData)


class _WriteBehind:
    """Starts the write-back of a disk output while the projection still runs.

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

    @staticmethod
    def applies(store) -> bool:
        return callable(getattr(store, "start_writeback", None)) and getattr(store, "mode", "r") != "r"

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
