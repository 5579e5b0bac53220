"""The streaming pipeline: reader -> (pinned) host slot -> H2D -> compute -> D2H -> writer.

Per lane (one GPU, or one CPU worker) three threads and ``depth`` slots:

* the **reader** takes a free slot, then the next chunk from the call's *shared* chunk
  list (so a faster lane, whose slots come back sooner, takes more chunks), computes the
  geometry tables of the chunk's parts (one per segment) and reads the program's inputs,
  part by part, into the slot's host buffers;
* the **worker** queues, on the GPU, the host->device copies on the copy-in stream, the
  program's device step on the compute stream (after a CUDA event of the copy) and the
  device->host copies of the outputs on the copy-out stream (after an event of the
  compute); it never waits, so copies of one slot overlap the kernels of the other.  On
  a CPU lane it runs the device step on the host buffers under the CPU compute lock;
* the **writer** waits for the slot's last event, writes the outputs into the output
  stores part by part, by views, and hands the slot back to the reader.

Direct transfers: a store that keeps its bins in host memory (``host_array``; stirgpu's
``ProjDataInMemory``) is page-locked once (:mod:`stirgpu.execution.pinning`) and its
chunks go straight between it and the GPU by DMA -- no read or write stage, no staging
buffer.  When every store of a call is direct (or there is none), the reader and writer
have nothing to do: one thread per GPU (the calling thread for the first, kept pool
threads for the others) queues each chunk's copies and kernels and waits only when all of
the lane's slots are in flight.  Chunk tables stay on each device once uploaded, and plans
are kept per request, so a repeated call (an OSEM subset) does no set-up work beyond
queueing.

Queues are bounded (a lane never has more than ``depth`` chunks in flight), so host
memory is bounded by the plan, not by the data: no full-size projection array exists
anywhere.  Images accumulated by a program are kept one per lane and reduced (in lane
order) once at the end.

Failure and cancellation: every thread looks at a shared stop event before each hand-off
and every blocking step polls it; the first exception in any thread -- or one in the
calling thread, a KeyboardInterrupt above all -- sets it.  Then no queued chunk is
processed any further: readers read no more, workers compute no more (a CPU kernel in
flight stops after its current piece of LORs, :func:`stirgpu.kernels.cpu.lor_ranges`; a
GPU lane queues nothing more), writers write no more; all threads leave within a poll or
a piece (a fraction of a second), the streams are synchronised (a GPU finishes only what
was queued: at most ``depth`` chunks per lane, milliseconds), and :meth:`Engine.run` raises
:class:`~stirgpu.errors.PipelineError` chaining the cause -- or the KeyboardInterrupt
itself.  No thread of the call outlives it.  Committing outputs is the caller's business
(the projectors abort output stores on error), so a failed or interrupted call never
leaves data that looks complete.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import itertools
import os
import queue
import threading
import time
import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import PIN_POLICIES
from ..errors import Cancelled, DeviceError, PipelineError, PlanError
from ..kernels.tables import pack_tables, packed_length
from . import devices as _devices
from .hostio import DaemonPool, parallel_copy, run_pieces, split_ranges
from .pinning import HostPinning
from .plan import Plan, default_gpu_budget, default_host_budget, make_plan
from .program import ChunkData, ChunkProgram
from .stats import RunStats, StatsRecorder

if TYPE_CHECKING:
    from ..array_types import Array

__all__ = ["Engine", "RunResult"]

#: how often blocked threads look at the stop flag (seconds)
_POLL = 0.05
#: how long threads get to leave after a failure before the call gives up on them
_SHUTDOWN_SECONDS = 30.0


def _weak(obj):
    """A weak reference to ``obj``, or None when it cannot be weakly referenced."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


class _Stopped(Exception):
    """Raised inside pipeline threads when another thread failed."""


def _join_all(threads, futures, deadline: float) -> None:
    """Wait for a stopped call's threads and lane futures, until ``deadline`` (monotonic).
    (An interrupt may come while the threads are being started: some never were.)"""
    for t in threads:
        if t.is_alive():
            t.join(max(deadline - time.monotonic(), 0.0))
    concurrent.futures.wait(futures, timeout=max(deadline - time.monotonic(), 0.0))


def _failure(errors: list, operation: str) -> BaseException:
    """What a failed call raises: a KeyboardInterrupt (or SystemExit) caught in a lane run by
    the calling thread as it is -- the caller is being interrupted, not the pipeline failing --
    else a PipelineError chaining the first error."""
    for _, _, exc in errors:
        if not isinstance(exc, Exception):
            return exc
    stage, lane_name, exc = errors[0]
    err = PipelineError(f"{operation}: the {stage} of {lane_name} failed: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


_END = object()


@dataclasses.dataclass
class RunResult:
    """What :meth:`Engine.run` returns: the reduced image (numpy, or None), the summed
    scalars by name, and the statistics."""

    image: np.ndarray | None
    scalars: dict
    stats: RunStats


class _Slot:
    """Chunk buffers of one slot: ``host`` (pinned on GPUs; one per staged store) and ``dev``
    flat float32 arrays; on GPUs also a pinned buffer for packing a chunk's geometry tables
    (float64) the first time they go up, asynchronously with the data (a copy from pageable
    memory would wait for the copy stream)."""

    def __init__(self, lane, capacity: int, n_host: int, n_dev: int, table_capacity: int):
        self.capacity = int(capacity)
        self.table_capacity = int(table_capacity)
        self.host: list[np.ndarray] = [lane.alloc_host(capacity) for _ in range(n_host)]
        self.dev: Sequence[Array] = (
            self.host if lane.shares_host_buffers else [lane.alloc_device(capacity) for _ in range(n_dev)]
        )
        if lane.shares_host_buffers:
            self.tab_host = None
            self.events = None
        else:
            self.tab_host = lane.alloc_host(table_capacity, np.float64)
            # the stage events of the slot's chunk, recorded again for every chunk (the writer
            # has read them before it hands the slot back)
            self.events = {k: lane.new_event() for k in _EVENTS}
        self._views: dict[tuple[int, int], Array] = {}

    def dev_view(self, i: int, n: int) -> Array:
        """The first ``n`` elements of device buffer ``i``, made once per size (slicing a cupy
        array costs microseconds of Python, several times per chunk)."""
        v = self._views.get((i, n))
        if v is None:
            if len(self._views) >= 256:  # chunk sizes of many different plans
                self._views.clear()
            v = self._views[(i, n)] = self.dev[i][:n]
        return v


#: CUDA events of a chunk's stages: copy-in start/end, compute start/end, copy-out start/end
_EVENTS = ("h2d0", "h2d1", "c0", "c1", "d0", "d1")


def _table_length(chunk) -> int:
    return packed_length([p.shape for p in chunk.parts])


class Engine:
    """Lanes, their cached buffers and input images; runs chunk programs over a plan.

    One engine per projector (pair).  ``backend`` is "cpu" or "cuda" (already resolved),
    ``devices`` the lane ids.  Buffers and uploaded images stay allocated between calls
    (GPU memory comes from cupy's pool), so repeated calls -- OSEM subiterations -- pay
    no allocation and, for an unchanged image, no upload.
    """

    def __init__(
        self,
        backend: str,
        devices,
        io_threads: int | None = None,
        pin_host_memory: str = "reused",
        compute_streams: int = 2,
    ):
        if backend not in ("cpu", "cuda"):
            raise DeviceError(f"engine backend must be 'cpu' or 'cuda', not {backend!r}")
        self.backend = backend
        self.devices = tuple(int(d) for d in devices)
        #: when in-memory stores are page-locked so that GPUs copy straight to/from them (see
        #: :mod:`stirgpu.execution.pinning`): "reused" (at a store's second use), "always",
        #: "never" (every chunk through the staging buffers)
        if pin_host_memory not in PIN_POLICIES:
            raise DeviceError(f"pin_host_memory must be one of {PIN_POLICIES}, not {pin_host_memory!r}")
        self.pin_host_memory = pin_host_memory
        #: compute streams per GPU, taking the chunks in turn (see CudaLane); 1 on the CPU
        if int(compute_streams) < 1:
            raise DeviceError(f"compute_streams must be at least 1, not {compute_streams!r}")
        self.compute_streams = int(compute_streams) if backend == "cuda" else 1
        self._seen: dict = {}  # stores met once (weakly held): "reused" page-locks them next time
        self._pinning = HostPinning()
        # plans by their arguments (OSEM asks for the same subsets' plans every iteration), and
        # per lane the chunks' packed tables already on the device, by (geometry, parts)
        self._plans: dict = {}
        self._measured: tuple | None = None  # (monotonic time, default host budget, default GPU budget)
        self._device_tables: dict[int, dict] = {}
        self._lane_pool: DaemonPool | None = None  # lanes other than the first, on direct calls
        self._direct: dict = {}  # direct_io's answers per store (weakly held)
        self._prepared: dict[int, Any] = {}  # per GPU lane: the input image in the tiled kernels' layouts
        # per lane: device workspaces kept from call to call (the accumulation image, and what
        # programs keep through ChunkProgram.start_lane), by name
        self._kept: dict[int, dict] = {}
        #: threads that split chunks' host reads/writes (and image staging) by views; default 4
        #: per lane, at most half the cores (one host thread copies only a few GB/s)
        if io_threads is None:
            io_threads = min(4 * len(self.devices), max((os.cpu_count() or 2) // 2, 1))
        self.io_threads = max(int(io_threads), 1)
        self._lanes: list | None = None
        self._slots: dict[int, list[_Slot]] = {}
        self._slots_fit: dict[int, tuple] = {}  # per lane: the (plan, n_host, n_dev) its slots last fitted
        self._images: dict[int, Any] = {}
        self._staging: np.ndarray | None = None  # pinned copy of the input image (GPU)
        self._uploads: list = []  # CUDA events: the last upload's DMAs out of _staging
        self._io: DaemonPool | None = None
        self._lock = threading.Lock()  # one call at a time per engine
        # geometry tables of chunk parts, by (geometry object, segment, views): OSEM revisits the same
        # subsets every iteration, and building tables is Python work in the reader threads
        self._tables: dict = {}

    @property
    def io_pool(self) -> DaemonPool | None:
        if self.io_threads <= 1:
            return None
        if self._io is None:
            self._io = DaemonPool(self.io_threads - 1, "stirgpu-io")  # the caller does one share
        return self._io

    @property
    def lane_pool(self) -> DaemonPool | None:
        """Kept threads for the lanes after the first on direct calls (None with one lane)."""
        if len(self.devices) < 2:
            return None
        if self._lane_pool is None:
            self._lane_pool = DaemonPool(len(self.devices) - 1, "stirgpu-lane")
        return self._lane_pool

    # -- lanes and memory ----------------------------------------------------------------
    @property
    def lanes(self) -> list:
        if self._lanes is None:
            self._lanes = _devices.make_lanes(self.backend, self.devices, self.compute_streams)
        return self._lanes

    def _cached_bytes(self, k: int) -> int:
        slots = self._slots.get(k, [])
        n = sum(4 * s.capacity * (len(s.dev) if s.dev is not s.host else 0) for s in slots)
        img = self._images.get(k)
        prep = self._prepared.get(k)
        layouts = sum(int(x.nbytes) for x in (prep.a, prep.b) if x is not None) if prep is not None else 0
        kept = sum(
            int(getattr(x, "nbytes", 0))
            for v in self._kept.get(k, {}).values()
            for x in (v if isinstance(v, tuple) else (v,))
        )
        return n + layouts + kept + (int(img.nbytes) if img is not None else 0)

    def gpu_budget(self) -> int | None:
        """Default per-device GPU budget: the smallest over the lanes (None on the CPU).
        Memory this engine already holds counts as available (it is reused)."""
        if self.backend != "cuda":
            return None
        budgets = []
        for k, lane in enumerate(self.lanes):
            free, total = _devices.gpu_memory(lane.device_id)
            budgets.append(default_gpu_budget(free + self._cached_bytes(k), total))
        return min(budgets)

    #: plans kept at most
    _PLANS_KEPT = 256

    def make_plan(
        self,
        program: ChunkProgram,
        proj_data_info,
        segments,
        views,
        image_shape: tuple[int, int, int],
        host_budget: int | None = None,
        gpu_budget: int | None = None,
        max_views_per_chunk: int | None = None,
        depth: int = 2,
        target_chunk_bytes: int | None = None,
        direct=(),
    ) -> Plan:
        """The plan for ``program`` on this engine's lanes (see :func:`stirgpu.execution.plan.make_plan`).

        ``host_budget`` / ``gpu_budget`` None: the defaults, from the memory free now.
        ``direct``: names of the program's stores that GPUs copy straight to and from
        (:meth:`direct_io`): they need no host staging buffers.  A plan asked for again with
        the same arguments is the one made before, as long as it still fits the budgets (default
        ones measured within the last second count as current)."""
        views = np.asarray(views, dtype=np.int64).reshape(-1)
        direct = frozenset(direct) if self.backend == "cuda" else frozenset()
        key = (
            type(program),
            program.inputs,
            program.outputs,
            program.scratch,
            program.workspace,
            program.image_workspace,
            program.uses_image,
            program.accumulates_image,
            id(proj_data_info),
            tuple(int(s) for s in segments),
            views.tobytes(),
            tuple(int(n) for n in image_shape),
            host_budget,
            gpu_budget,
            max_views_per_chunk,
            int(depth),
            target_chunk_bytes,
            direct,
        )
        hit = self._plans.get(key)
        if hit is not None and hit[0] is not proj_data_info:
            hit = None
        host, gpu = self._budgets(host_budget, gpu_budget, recent=hit is not None)
        if hit is not None and hit[1].host_bytes <= host and (gpu is None or hit[1].device_bytes_per_lane <= gpu):
            return hit[1]
        plan = self._new_plan(
            program,
            proj_data_info,
            segments,
            views,
            image_shape,
            host,
            gpu,
            max_views_per_chunk,
            depth,
            target_chunk_bytes,
            direct,
        )
        if len(self._plans) >= self._PLANS_KEPT:
            self._plans.clear()
        self._plans[key] = (proj_data_info, plan)  # holding the geometry keeps its id from being reused
        return plan

    #: the smallest first chunk of a call whose inputs are all copied directly (see _new_plan_for)
    _DIRECT_HEAD_BYTES = 1 << 20

    #: default budgets measured less than this long ago (seconds) are taken as they are for a
    #: kept plan: measuring them costs ~0.1 ms (reading /proc/meminfo, asking each GPU), as much
    #: as an OSEM subset's whole engine overhead
    _BUDGETS_RECENT = 1.0

    def _budgets(self, host_budget, gpu_budget, recent: bool) -> tuple[int, int | None]:
        """(host, GPU) budgets of a plan: the explicit ones, else the defaults -- measured now,
        or, with ``recent``, the last measurement when it is recent enough."""
        host, gpu = host_budget, gpu_budget
        if host is not None and (gpu is not None or self.backend != "cuda"):
            return int(host), gpu
        now = time.monotonic()
        last = self._measured
        if not (recent and last is not None and now - last[0] < self._BUDGETS_RECENT):
            last = self._measured = (now, default_host_budget(), self.gpu_budget())
        return (last[1] if host is None else int(host)), (last[2] if gpu is None else gpu)

    def _new_plan(
        self,
        program,
        proj_data_info,
        segments,
        views,
        image_shape,
        host_budget,
        gpu_budget,
        max_views_per_chunk,
        depth,
        target_chunk_bytes,
        direct,
    ) -> Plan:
        # several compute streams only where only the GPU sets the pace (every store copied
        # directly); one where chunks move through host staging (disk, foreign stores), whose
        # reads, copies and writes set it -- there a chunk computed alone is done, downloaded
        # and written sooner, and overlapping kernels gain nothing
        staged = [n for n in program.inputs + program.outputs if n not in direct]
        streams = self.compute_streams if self.backend == "cuda" and not staged else 1
        if streams > 1 and program.workspace:
            # each chunk computing at once has its own temporaries: a budget that fits one
            # chunk's but not several gets the plan of one compute stream
            try:
                plan = self._new_plan_for(
                    streams,
                    program,
                    proj_data_info,
                    segments,
                    views,
                    image_shape,
                    host_budget,
                    gpu_budget,
                    max_views_per_chunk,
                    depth,
                    target_chunk_bytes,
                    direct,
                )
            except PlanError:
                streams = 1
            else:
                return plan
        return self._new_plan_for(
            streams,
            program,
            proj_data_info,
            segments,
            views,
            image_shape,
            host_budget,
            gpu_budget,
            max_views_per_chunk,
            depth,
            target_chunk_bytes,
            direct,
        )

    def _new_plan_for(
        self,
        streams,
        program,
        proj_data_info,
        segments,
        views,
        image_shape,
        host_budget,
        gpu_budget,
        max_views_per_chunk,
        depth,
        target_chunk_bytes,
        direct,
    ) -> Plan:
        nz, ny, nx = (int(n) for n in image_shape)
        image_bytes = 4 * nz * ny * nx
        padded_bytes = 4 * (nz + 2) * (ny + 2) * (nx + 2)
        n_io = len(program.inputs) + len(program.outputs)
        # temporaries exist once per chunk computing at a time (``streams``): spread over the slots
        extra = program.scratch + -(-int(program.workspace) * streams // max(int(depth), 1))
        images_per_lane = int(program.uses_image) + int(program.accumulates_image)
        # small first chunks (the device starts sooner) and small last ones (a short drain:
        # the last kernel, download and write); see make_plan
        shape: dict[str, Any] = dict(ramp_up=True, taper=True)  # make_plan's chunk-size shaping
        if program.inputs and all(n in direct for n in program.inputs):
            # the first kernel waits for the first chunk's upload alone, and direct uploads
            # need no read: a smaller first chunk starts the device sooner (a subset's too)
            shape["min_head_bytes"] = self._DIRECT_HEAD_BYTES
        lanes = len(self.devices)
        if self.backend == "cpu":
            # CPU lanes share one input image; each keeps its own accumulation image
            host_fixed = image_bytes * (
                int(program.uses_image) + lanes * int(program.accumulates_image) + int(program.accumulates_image)
            )
            return make_plan(
                proj_data_info,
                segments,
                views,
                lanes=lanes,
                host_buffers_per_slot=n_io + extra,
                device_buffers_per_slot=None,
                host_budget=host_budget,
                gpu_budget=None,
                host_fixed_bytes=host_fixed,
                depth=depth,
                max_views_per_chunk=max_views_per_chunk,
                target_chunk_bytes=target_chunk_bytes,
                **shape,
            )
        # host: the reduced result and one pinned staging copy of the image; staging buffers
        # only for the stores that are not copied directly
        host_fixed = image_bytes * (int(program.accumulates_image) + int(program.uses_image))
        staged = sum(1 for n in program.inputs + program.outputs if n not in direct)
        plan = make_plan(
            proj_data_info,
            segments,
            views,
            lanes=lanes,
            host_buffers_per_slot=staged,
            device_buffers_per_slot=n_io + extra,
            host_budget=host_budget,
            gpu_budget=gpu_budget,
            host_fixed_bytes=host_fixed,
            device_fixed_bytes=image_bytes * images_per_lane + padded_bytes * program.image_workspace,
            depth=depth,
            max_views_per_chunk=max_views_per_chunk,
            target_chunk_bytes=target_chunk_bytes,
            **shape,
        )
        return dataclasses.replace(plan, concurrency=streams)

    def _slots_for(self, k: int, lane, plan: Plan, n_host: int, n_dev: int) -> list[_Slot]:
        cached = self._slots.get(k)
        fit = self._slots_fit.get(k)
        if cached is not None and fit is not None and fit[0] is plan and fit[1:] == (n_host, n_dev):
            return cached  # checked for this very plan already (OSEM asks for the same plans)
        capacity = plan.buffer_bytes // 4
        tables = max(_table_length(c) for c in plan.chunks)
        if (
            cached is not None
            and len(cached) == plan.depth
            and all(
                s.capacity >= capacity and len(s.host) >= n_host and len(s.dev) >= n_dev and s.table_capacity >= tables
                for s in cached
            )
            and cached[0].capacity <= 2 * capacity
        ):  # do not sit on far too much memory
            self._slots_fit[k] = (plan, n_host, n_dev)
            return cached
        self._slots.pop(k, None)
        self._slots_fit.pop(k, None)
        if lane.kind == "cuda":
            with lane.device:
                lane.cp.get_default_memory_pool().free_all_blocks()
        with lane.activate():
            slots = [
                _Slot(lane, capacity, n_host, n_dev, 2 * tables)  # tiny; headroom for later plans
                for _ in range(plan.depth)
            ]
        self._slots[k] = slots
        self._slots_fit[k] = (plan, n_host, n_dev)
        return slots

    #: geometry tables kept at most (a few KiB each)
    _TABLES_KEPT = 4096

    def _chunk_tables(self, pdi, part):
        """The (read-only, so shareable) ChunkTables of ``part``, made once per engine.  Keyed by
        the geometry object itself, not by equality: ProjDataInfo equality tolerates header
        rounding, and tables must come from the very geometry of the call."""
        key = (id(pdi), part.segment, part.views)
        hit = self._tables.get(key)
        if hit is not None and hit[0] is pdi:
            return hit[1]
        if len(self._tables) >= self._TABLES_KEPT:
            self._tables.clear()
        t = pdi.chunk_tables(part.segment, part.views)
        self._tables[key] = (pdi, t)  # holding pdi keeps its id from being reused
        return t

    def direct_io(self, stores: Mapping[str, Any], proj_data_info, segments) -> dict:
        """Which of ``stores`` (by name) GPUs can copy straight to and from: those whose
        ``host_array(segment)`` is float32 view-order memory for every one of ``segments``,
        page-locked (:mod:`stirgpu.execution.pinning`) -- here at the store's second use
        ("reused"; page-locking 290 MB costs ~14 ms, more than one call gains from it) or
        first ("always"), or by its owner already.  Returns ``{name: {segment: array}}``;
        empty on the CPU backend or with ``pin_host_memory="never"``.  Everything else goes
        through the host staging buffers."""
        if self.backend != "cuda" or self.pin_host_memory == "never":
            return {}
        with self._lock:  # one page-locking at a time (two threads sharing a projector)
            return self._direct_io(stores, proj_data_info, tuple(int(s) for s in segments))

    def _direct_io(self, stores, proj_data_info, segments) -> dict:
        found = {}
        for name, store in stores.items():
            # a store's host memory is the same for its whole life (ProjData.host_array): the
            # answer is kept per store, so a call does not check every segment again
            key = (id(store), id(proj_data_info), segments)
            hit = self._direct.get(key)
            if hit is not None and hit[0]() is store and hit[1] is proj_data_info:
                arrays = hit[2]
            else:
                register = self.pin_host_memory == "always" or self._met_before(store)
                arrays = self._host_arrays(store, proj_data_info, segments, register)
                if arrays is not None and (ref := _weak(store)) is not None:
                    self._direct = {k: v for k, v in self._direct.items() if v[0]() is not None}
                    self._direct[key] = (ref, proj_data_info, arrays)
            if arrays is not None:
                found[name] = arrays
        return found

    def _met_before(self, store) -> bool:
        """Whether this engine has met ``store`` before (and remembers it now)."""
        hit = self._seen.get(id(store))
        if hit is not None and hit() is store:
            return True
        if (ref := _weak(store)) is not None:  # a store that cannot be weakly held stays staged
            self._seen = {k: v for k, v in self._seen.items() if v() is not None}
            self._seen[id(store)] = ref
        return False

    def _host_arrays(self, store, pdi, segments, register: bool) -> dict | None:
        """``{segment: host_array(segment)}`` when every one fits and is page-locked (by this
        call when ``register``, else already), or None."""
        if not store.abilities.host_memory:
            return None
        get = store.host_array
        nt, nv = pdi.get_num_tangential_poss(), pdi.get_num_views()
        arrays = {}
        for seg in segments:
            a = get(seg)
            if not (
                isinstance(a, np.ndarray)
                and a.dtype == np.float32
                and a.flags.c_contiguous
                and a.flags.writeable
                and a.shape == (nv, pdi.get_num_axial_poss(seg), nt)
            ):
                return None
            arrays[seg] = a
        lock = self._pinning.pin if register else self._pinning.is_pinned
        return arrays if all(lock(a) for a in arrays.values()) else None

    #: chunk tables kept on each device at most (a few KiB each)
    _DEVICE_TABLES_KEPT = 4096

    def _tables_on(self, k: int, lane, pdi, chunk, slot):
        """The chunk's packed tables on lane ``k``'s GPU, uploaded (on the copy-in stream, from
        the slot's pinned table buffer) the first time these parts are seen, then kept."""
        from ..kernels.cuda_backend import DeviceTables

        kept = self._device_tables.setdefault(k, {})
        key = (id(pdi), chunk.parts)
        hit = kept.get(key)
        if hit is not None and hit[0] is pdi:
            return hit[1]
        tables = [self._chunk_tables(pdi, p) for p in chunk.parts]
        packed = pack_tables(tables, slot.tab_host)
        dev = lane.alloc_device(len(packed), np.float64)
        lane.to_device(dev, packed, packed.nbytes)  # ordered before the chunk's kernels (s_in)
        if len(kept) >= self._DEVICE_TABLES_KEPT:
            kept.clear()
        dt = DeviceTables(tables, dev, lane.device_id)
        kept[key] = (pdi, dt)
        return dt

    def release(self) -> None:
        """Drop cached buffers, images, plans and tables (GPU memory returns to cupy's pool)."""
        with self._lock:
            self._wait_uploads()
            self._slots.clear()
            self._slots_fit.clear()
            self._images.clear()
            self._tables.clear()
            self._device_tables.clear()
            self._plans.clear()
            self._measured = None
            self._direct.clear()
            self._prepared.clear()
            self._kept.clear()
            self._staging = None

    def kept_workspaces(self, lane: int) -> Mapping[str, Any]:
        """What lane ``lane`` (an index into :attr:`devices`) keeps on its device from call to call,
        by name: the accumulation image, and what programs keep through ``ChunkProgram.start_lane``
        (device arrays, launchers, or tuples of them).  A read-only view for tests and diagnostics,
        meaningful between calls; empty before the lane's first call and after :meth:`release`."""
        return types.MappingProxyType(self._kept.get(lane, {}))

    # -- the input image -----------------------------------------------------------------
    def set_image(self, image, fov_mask: np.ndarray | None) -> tuple[int, float]:
        """Put ``image`` ((nz, ny, nx) float32: numpy, or cupy on any GPU) on every lane, zeroed
        outside ``fov_mask`` when given.  Returns (bytes uploaded, seconds).

        A numpy image goes up in z slabs: each slab is copied into one pinned buffer (by the
        I/O threads) while the previous slab's DMA runs, and the call returns once the host
        copy is done: the last DMAs finish while the next call starts its pipeline, and each
        lane's compute stream waits for them (CUDA events) before its first kernel."""
        from ..kernels import apply_cylindrical_fov

        t0 = time.perf_counter()
        uploaded = 0
        with self._lock:
            self._wait_uploads()  # the lanes' images may still receive the last upload's DMAs
            if self.backend == "cpu":
                host = np.array(image, dtype=np.float32, copy=True, order="C")
                if fov_mask is not None:
                    apply_cylindrical_fov(host, fov_mask, out=host)
                for k in range(len(self.devices)):
                    self._images[k] = host  # CPU lanes share one read-only copy
            elif isinstance(image, np.ndarray):
                uploaded = self._upload_host_image(image, fov_mask)
            else:
                for k, lane in enumerate(self.lanes):
                    dst = lane.upload_image(image, self._images.get(k), pinned=True)
                    if fov_mask is not None:
                        with lane.device:
                            apply_cylindrical_fov(dst, fov_mask, out=dst)
                            lane.device.synchronize()
                    self._images[k] = dst
                    uploaded += int(dst.nbytes)
            if self.backend == "cuda":
                self._prepare_images()
        return uploaded, time.perf_counter() - t0

    def _prepare_images(self) -> None:
        """The tiled forward kernels' layouts of each lane's image, made once per image (on the
        compute stream, after the upload) rather than once per call: repeated projections of
        one image -- a subset after another -- skip the copies."""
        from ..kernels.cuda_backend import prepare_image

        self._prepared.clear()  # the old layouts go back to the pool before the new ones are made
        for k, lane in enumerate(self.lanes):
            with lane.device, lane.s_compute:
                self._prepared[k] = prepare_image(self._images[k])

    #: z slabs of a pipelined image upload (measured on an H200 host: 1, 2 and 4 about equal, 8 slower)
    _UPLOAD_SLABS = 2

    def _upload_host_image(self, image: np.ndarray, fov_mask) -> int:
        import cupyx

        from ..kernels import apply_cylindrical_fov

        lanes = self.lanes
        if self._staging is None or self._staging.shape != image.shape:
            self._staging = None
            self._staging = cupyx.empty_pinned(image.shape, dtype=np.float32)
        dsts = []
        for k, lane in enumerate(lanes):
            dst = self._images.get(k)
            if dst is None or tuple(dst.shape) != tuple(image.shape):
                with lane.device:  # no memset: the copy-in stream does not wait for other streams
                    dst = lane.cp.empty(image.shape, dtype=lane.cp.float32)
            dsts.append(dst)
            with lane.device:  # the last image's FOV masking and layouts (compute stream) read it first
                lane.s_in.wait_event(lane.record(lane.s_compute))
        edges = np.linspace(0, image.shape[0], min(self._UPLOAD_SLABS, max(image.shape[0], 1)) + 1).round()
        for a, b in itertools.pairwise(edges.astype(int)):
            if b <= a:
                continue
            parallel_copy(self.io_pool, self._staging[a:b], image[a:b])
            for lane, dst in zip(lanes, dsts, strict=True):
                with lane.device:
                    lane.to_device(dst[a:b], self._staging[a:b], self._staging[a:b].nbytes)
        self._uploads = []
        for k, (lane, dst) in enumerate(zip(lanes, dsts, strict=True)):
            with lane.device:
                done = lane.record(lane.s_in)
                lane.s_compute.wait_event(done)
                if fov_mask is not None:
                    with lane.s_compute:
                        apply_cylindrical_fov(dst, fov_mask, out=dst)
            self._uploads.append(done)
            self._images[k] = dst
        return int(image.nbytes) * len(lanes)

    def _wait_uploads(self) -> None:
        for ev in self._uploads:
            ev.synchronize()
        self._uploads = []

    def has_image(self) -> bool:
        return len(self._images) == len(self.devices)

    # -- running a program ---------------------------------------------------------------
    def run(
        self,
        program: ChunkProgram,
        plan: Plan,
        proj_data_info,
        sources: Mapping[str, Any],
        sinks: Mapping[str, Any],
        image_shape: tuple[int, int, int] | None = None,
        progress: Callable[[int], None] | None = None,
        operation: str = "",
        result_device: int | None = None,
        parallel_io: Mapping[str, bool] | None = None,
        after_write: Mapping[str, Callable] | None = None,
        direct: Mapping[str, Mapping] | None = None,
        result_out=None,
    ) -> RunResult:
        """Run ``program`` over ``plan``'s chunks.

        ``sources[name]`` provides ``read_views(segment, views, out=...)`` for each input,
        ``sinks[name]`` ``write_views(array, segment, views)`` for each output.  The lanes'
        input images must have been set (:meth:`set_image`) when the program uses one;
        ``image_shape`` is needed when it accumulates one.  ``progress(n)`` is called from
        writer threads with the number of chunks just finished.  The lanes' accumulated
        images are reduced on the host (numpy result), or, with ``result_device`` (a GPU of
        this engine), on that GPU (cupy result: no round trip through host memory).
        ``parallel_io[name]`` says a store may be accessed by several threads at once (for
        disjoint views): its chunk reads/writes are then split over the I/O threads.
        ``after_write[name](chunk)`` is called by the writer after each chunk written to that
        output (the projectors use it to start a disk file's write-back early).
        ``direct`` is what :meth:`direct_io` returned for these stores (None: asked here);
        the plan must have been made with the same names.  ``result_out``: a cupy array on
        GPU ``result_device`` ((nz, ny, nx) float32, C-contiguous) that becomes that GPU's
        accumulation image, so the result is reduced into it (its values replaced) and
        returned -- no image-sized copy.  It must not be used elsewhere during the call; if
        the call fails, its values are undefined.
        """
        missing = [n for n in program.inputs if n not in sources] + [n for n in program.outputs if n not in sinks]
        if missing:
            raise PipelineError(f"{program.name}: no store given for {missing}")
        if program.uses_image and not self.has_image():
            raise PipelineError(f"{program.name}: no input image was set")
        if program.accumulates_image and image_shape is None:
            raise PipelineError(f"{program.name}: accumulating an image needs its shape")
        if result_out is not None:
            ok = (
                program.accumulates_image
                and image_shape is not None
                and self.backend == "cuda"
                and result_device in self.devices
                and getattr(result_out, "device", None) is not None
                and result_out.device.id == result_device
                and result_out.dtype == np.float32
                and result_out.flags.c_contiguous
                and tuple(result_out.shape) == tuple(image_shape)
            )
            if not ok:
                raise PipelineError(
                    f"{program.name}: result_out must be a C-contiguous float32 "
                    f"{'image' if image_shape is None else tuple(image_shape)} "
                    f"cupy array on result_device {result_device} (one of this engine's GPUs "
                    f"{list(self.devices)}) of a program that accumulates an image"
                )
        if direct is None:
            segments = sorted({p.segment for c in plan.chunks for p in c.parts})
            direct = self.direct_io({**sources, **sinks}, proj_data_info, segments)
        direct = {n: a for n, a in direct.items() if n in program.inputs + program.outputs}
        with self._lock:
            return self._run(
                program,
                plan,
                proj_data_info,
                sources,
                sinks,
                image_shape,
                progress,
                operation,
                result_device,
                dict(parallel_io or {}),
                dict(after_write or {}),
                direct,
                result_out,
            )

    def _run(
        self,
        program,
        plan,
        pdi,
        sources,
        sinks,
        image_shape,
        progress,
        operation,
        result_device,
        parallel_io,
        after_write,
        direct,
        result_out,
    ) -> RunResult:
        t_start = time.perf_counter()
        lanes = self.lanes
        n_in, n_out = len(program.inputs), len(program.outputs)
        cuda = self.backend == "cuda"
        # host staging buffers: one per store not copied directly (on CPU lanes, where every
        # store is staged, the slot's buffers are the compute buffers: inputs, outputs, scratch)
        staged = [n for n in program.inputs + program.outputs if n not in direct]
        if plan.chunks and len(staged) > plan.host_buffers_per_slot:
            raise PipelineError(
                f"{program.name}: the plan has {plan.host_buffers_per_slot} host buffers per "
                f"slot, {len(staged)} stores need one ({staged}); make the plan with direct="
                f"{sorted(direct)}"
            )
        host_of = {n: i for i, n in enumerate(staged)}
        n_direct_in = sum(1 for n in program.inputs if n in direct)
        n_direct_out = sum(1 for n in program.outputs if n in direct)
        n_host = len(staged) + (0 if cuda else program.scratch)
        n_dev = n_in + n_out + program.scratch
        rec = StatsRecorder([lane.name for lane in lanes], t_start)
        io_pool = self.io_pool
        io_split = max(self.io_threads // len(lanes), 1)  # pieces per chunk; lanes share the pool

        slots: dict[int, list[_Slot]] = {}
        accum: dict[int, Array | None] = {}  # per lane: its accumulation image
        scalars: dict[int, Array | None] = {}  # per lane: its sums, one row per compute stream
        refs: dict[int, Any] = {}  # per GPU lane: its time reference (event, perf_counter)
        all_direct = cuda and not staged
        n_streams = plan.concurrency  # compute streams taking this call's chunks (see _new_plan)
        turns = {k: 0 for k in range(len(lanes))}  # chunks queued per lane: their compute streams

        def prepare_lane(k, lane):
            """A lane's accumulation image, sums and the program's per-lane state (on GPUs
            queued on the first compute stream, which the other compute streams then wait
            for: it precedes every kernel of the call).  Called with the lane active."""
            kept = self._kept.setdefault(k, {})
            accum[k] = None
            # zeroed, unless the program sets every value itself (see ChunkProgram)
            init = lane.empty_device if cuda and program.fills_accumulation else lane.zeros_device
            if result_out is not None and lane.device_id == result_device:
                # the caller's array (its pending work was put first, below)
                accum[k] = init(image_shape, out=result_out)
            elif program.accumulates_image:
                # the engine's own image, kept between calls, unless it is handed out as the
                # result (a cupy result on its GPU; CPU lanes' images are the result)
                mine = kept.get("accumulation image")
                handed_out = not cuda or lane.device_id == result_device
                if handed_out or mine is None or tuple(mine.shape) != tuple(image_shape):
                    mine = None
                accum[k] = init(image_shape, out=mine)
                if not handed_out:
                    kept["accumulation image"] = accum[k]
            # one row per compute stream: chunks computing at once never add to one sum
            scalars[k] = lane.zeros_device((n_streams, len(program.scalars)), np.float64) if program.scalars else None
            image = self._prepared.get(k, self._images.get(k)) if program.uses_image else None
            if cuda:
                with lane.s_compute:
                    program.start_lane(lane, image, accum[k], kept)
                lane.fork()
            else:
                lane.compute(lambda: program.start_lane(lane, image, accum[k], kept))

        # per-lane resources, allocated before any thread starts; on the all-direct GPU path
        # a lane with chunks is prepared by its own thread, once its first chunk's upload is
        # queued (the copy then runs while the host does the set-up)
        deferred = set()
        for k, lane in enumerate(lanes):
            slots[k] = self._slots_for(k, lane, plan, n_host, n_dev) if plan.chunks else []
            with lane.activate():
                if cuda:
                    refs[k] = lane.time_reference()
                if result_out is not None and lane.device_id == result_device:
                    # the caller's pending work on its array, queued on the caller's current
                    # stream (asked here, in the caller's thread), comes before this call's
                    lane.after_current_stream()
                if all_direct and slots[k]:
                    deferred.add(k)
                else:
                    prepare_lane(k, lane)
        setup_seconds = time.perf_counter() - t_start

        stop = threading.Event()
        errors: list[tuple[str, str, BaseException]] = []
        err_lock = threading.Lock()
        chunk_lock = threading.Lock()
        if cuda:
            # GPU lanes share one queue of chunks, so a faster device takes more of them
            shared_chunks = iter(plan.chunks)
            lane_chunks = None
        else:
            # CPU lanes share one compute lock, so there is no balance to gain: they take the
            # chunks round-robin, and each lane sums the same chunks in the same order on every
            # run -- CPU back projections are reproducible bit for bit
            lane_chunks = [iter(list(plan.chunks)[k :: len(lanes)]) for k in range(len(lanes))]

        def fail(stage: str, lane, exc: BaseException) -> None:
            with err_lock:
                errors.append((stage, lane.name, exc))
            stop.set()

        def take(k):
            if lane_chunks is not None:
                return next(lane_chunks[k], None)
            with chunk_lock:
                return next(shared_chunks, None)

        # a stopped call hands nothing on: queued chunks are dropped, not processed
        def get(q):
            while True:
                if stop.is_set():
                    raise _Stopped
                try:
                    return q.get(timeout=_POLL)
                except queue.Empty:
                    pass

        def put(q, item):
            while True:
                if stop.is_set():
                    raise _Stopped
                try:
                    q.put(item, timeout=_POLL)
                    return
                except queue.Full:
                    pass

        def part_view(buf, part):
            return buf[part.offset : part.stop].reshape(part.shape)

        def chunk_pieces(chunk, flat, split):
            """(segment, views, buffer) pieces of a chunk's I/O: each part split by views
            into pieces of at least MIN_PIECE_BYTES; all pieces, of all parts, are run
            together on the I/O pool (a subset's chunk has several small parts)."""
            pieces = []
            for part in chunk.parts:
                buf = part_view(flat, part)
                for a, b in split_ranges(len(part.views), buf[0].nbytes, io_split if split else 1):
                    pieces.append((part.segment, part.views[a:b], buf[a:b]))
            return pieces

        def run_io(pieces, split, fn):
            run_pieces(
                io_pool if split else None, lambda i, j: fn(*pieces[i]), [(i, i + 1) for i in range(len(pieces))]
            )

        def read_chunk(store, chunk, flat, split):
            def piece(seg, views, buf):
                got = store.read_views(seg, views, out=buf)
                if got is not buf and got is not None:  # a store that ignores ``out``
                    np.copyto(buf, got)

            run_io(chunk_pieces(chunk, flat, split), split, piece)

        def write_chunk(store, chunk, flat, split):
            run_io(chunk_pieces(chunk, flat, split), split, lambda seg, views, buf: store.write_views(buf, seg, views))

        def chunk_data(k, lane, chunk, slot, tables, turn=0):
            n, sums = chunk.num_bins, scalars[k]
            return ChunkData(
                chunk=chunk,
                tables=tables,
                inputs={name: slot.dev_view(i, n) for i, name in enumerate(program.inputs)},
                outputs={name: slot.dev_view(n_in + j, n) for j, name in enumerate(program.outputs)},
                scratch=[slot.dev_view(n_in + n_out + i, n) for i in range(program.scratch)],
                image=self._prepared.get(k, self._images.get(k)),
                accum=accum[k],
                scalars=None if sums is None else sums[turn % n_streams],
                xp=lane.xp,
                lane=lane,
                cancel=stop,
            )

        def device_step(data):
            """A CPU lane's compute, under the compute lock: a lane that waited for the lock
            while the call stopped computes nothing."""
            if stop.is_set():
                raise _Stopped
            program.compute(data)

        def enqueue(k, lane, chunk, slot):
            """Queue one chunk on a GPU: tables and inputs up (copy-in stream), the program's
            device step (compute stream, after the copies), outputs down (copy-out stream,
            after the compute); CUDA events order the streams and time the stages.  Staged
            stores move through the slot's pinned buffers, direct ones straight from and to
            their page-locked memory.  The lane's compute streams take the chunks in turn.
            Never waits."""
            return enqueue_rest(k, lane, chunk, slot, enqueue_in(k, lane, chunk, slot))

        def enqueue_in(k, lane, chunk, slot):
            """The copy-in part of :func:`enqueue`; returns the chunk's tables on the device."""
            ev = slot.events
            lane.record(lane.s_in, ev["h2d0"])
            tables = self._tables_on(k, lane, pdi, chunk, slot)
            for i, name in enumerate(program.inputs):
                if name in direct:
                    arrays, base = direct[name], slot.dev[i].data.ptr
                    for part in chunk.parts:
                        lane.copy_views(True, base + 4 * part.offset, arrays[part.segment], part.views, lane.s_in)
                else:
                    lane.to_device(slot.dev[i], slot.host[host_of[name]], chunk.nbytes)
            lane.record(lane.s_in, ev["h2d1"])
            return tables

        def enqueue_rest(k, lane, chunk, slot, tables):
            """The compute and copy-out parts of :func:`enqueue`, after :func:`enqueue_in`."""
            nbytes = chunk.nbytes
            ev = slot.events
            turn = turns[k]
            turns[k] += 1
            s_compute = lane.compute_stream(turn, n_streams)
            data = chunk_data(k, lane, chunk, slot, tables, turn)
            s_compute.wait_event(ev["h2d1"])
            lane.record(s_compute, ev["c0"])
            with s_compute:
                program.compute(data)
            lane.record(s_compute, ev["c1"])
            lane.s_out.wait_event(ev["c1"])
            lane.record(lane.s_out, ev["d0"])
            for j, name in enumerate(program.outputs):
                if name in direct:
                    arrays, base = direct[name], slot.dev[n_in + j].data.ptr
                    for part in chunk.parts:
                        lane.copy_views(False, base + 4 * part.offset, arrays[part.segment], part.views, lane.s_out)
                else:
                    lane.to_host(slot.host[host_of[name]], slot.dev[n_in + j], nbytes)
            lane.record(lane.s_out, ev["d1"])
            rec.add(bytes_uploaded=n_in * nbytes, bytes_downloaded=n_out * nbytes, bytes_read=n_direct_in * nbytes)
            return ev

        timed_stages = (
            ((("h2d", "h2d0", "h2d1"),) if n_in else ())
            + (("compute", "c0", "c1"),)
            + ((("d2h", "d0", "d1"),) if n_out else ())
        )

        def gpu_stages(k, lane, chunk, ev):
            """Wait for a chunk's last event, then record its GPU stages on the host clock."""
            ev["d1"].synchronize()
            ref, t_ref = refs[k]
            elapsed = lane.cp.cuda.get_elapsed_time
            for stage, a, b in timed_stages:  # (a few microseconds a query: only the stages used)
                rec.stage(
                    lane.name, stage, chunk.index, t_ref + elapsed(ref, ev[a]) / 1e3, t_ref + elapsed(ref, ev[b]) / 1e3
                )

        def chunk_finished(lane, chunk):
            for name in program.outputs:
                if name in direct and name in after_write:
                    after_write[name](chunk)
            if n_direct_out:
                rec.add(bytes_written=n_direct_out * chunk.nbytes)
            rec.chunk_done(lane.name, chunk.num_bins)
            if progress is not None:
                progress(1)

        def finish_lane(k, lane):
            if cuda:
                lane.join()
                with lane.s_compute:
                    program.finish_lane(lane, accum[k])
            else:
                lane.compute(lambda: program.finish_lane(lane, accum[k]))

        # -- every store copied directly: one thread per GPU queues everything ----------
        def direct_lane(k, lane):
            """The whole pipeline of one GPU when no store needs staging: nothing to read
            or write on the host, so one thread queues each chunk's copies and kernels and
            only waits when all of the lane's slots are in flight (for the oldest one)."""
            try:
                with lane.activate():
                    free = list(slots[k])
                    flight: collections.deque = collections.deque()

                    def retire():
                        chunk, slot, ev = flight.popleft()
                        gpu_stages(k, lane, chunk, ev)
                        if not stop.is_set():  # a stopped call's chunks do not count as done
                            chunk_finished(lane, chunk)
                        free.append(slot)

                    try:
                        while not stop.is_set():
                            chunk = take(k)
                            if chunk is None:
                                if k in deferred:  # no chunk came this lane's way
                                    deferred.discard(k)
                                    prepare_lane(k, lane)
                                finish_lane(k, lane)
                                break
                            if not free:
                                retire()
                            slot = free.pop()
                            tables = enqueue_in(k, lane, chunk, slot)
                            if k in deferred:  # the first chunk's upload runs meanwhile
                                deferred.discard(k)
                                prepare_lane(k, lane)
                            flight.append((chunk, slot, enqueue_rest(k, lane, chunk, slot, tables)))
                    finally:
                        while flight:  # the queued work finishes anyway: let it, and count it
                            retire()
            except BaseException as exc:  # noqa: BLE001 - reported through PipelineError
                fail("worker", lane, exc)

        # -- staged stores: reader, worker and writer threads per lane --------------------
        def reader(k, lane, free_q, ready_q):
            try:
                with lane.activate():
                    while True:
                        slot = get(free_q)
                        if stop.is_set():
                            return
                        chunk = take(k)
                        if chunk is None:
                            put(ready_q, _END)
                            return
                        t0 = time.perf_counter()
                        # GPU lanes keep their chunks' tables on the device (the worker uploads them)
                        tables = None if cuda else [self._chunk_tables(pdi, p) for p in chunk.parts]
                        n = chunk.num_bins
                        read = 0
                        for name in program.inputs:
                            if name not in direct:
                                read_chunk(
                                    sources[name], chunk, slot.host[host_of[name]][:n], parallel_io.get(name, False)
                                )
                                read += 1
                        if read:
                            rec.stage(lane.name, "read", chunk.index, t0, time.perf_counter())
                            rec.add(bytes_read=read * chunk.nbytes)
                        put(ready_q, (chunk, slot, tables))
            except _Stopped:
                return
            except BaseException as exc:  # noqa: BLE001 - reported through PipelineError
                fail("reader", lane, exc)

        def worker(k, lane, ready_q, done_q):
            try:
                with lane.activate():
                    while True:
                        item = get(ready_q)
                        if item is _END:
                            finish_lane(k, lane)
                            put(done_q, _END)
                            return
                        chunk, slot, tables = item
                        if cuda:
                            put(done_q, (chunk, slot, enqueue(k, lane, chunk, slot)))
                        else:
                            data = chunk_data(k, lane, chunk, slot, tables)
                            t0, t1 = lane.compute(functools.partial(device_step, data))
                            rec.stage(lane.name, "compute", chunk.index, t0, t1)
                            put(done_q, (chunk, slot, None))
            except (_Stopped, Cancelled):  # (CPU kernels given cancel=stop raise Cancelled)
                return
            except BaseException as exc:  # noqa: BLE001
                fail("worker", lane, exc)

        def writer(k, lane, done_q, free_q):
            try:
                with lane.activate():
                    while True:
                        item = get(done_q)
                        if item is _END:
                            return
                        chunk, slot, ev = item
                        if ev is not None:
                            gpu_stages(k, lane, chunk, ev)
                        if stop.is_set():
                            return
                        t0 = time.perf_counter()
                        written = 0
                        for name in program.outputs:
                            if name in direct:
                                continue
                            write_chunk(
                                sinks[name],
                                chunk,
                                slot.host[host_of[name]][: chunk.num_bins],
                                parallel_io.get(name, False),
                            )
                            if name in after_write:
                                after_write[name](chunk)
                            written += 1
                        if written:
                            rec.stage(lane.name, "write", chunk.index, t0, time.perf_counter())
                            rec.add(bytes_written=written * chunk.nbytes)
                        chunk_finished(lane, chunk)
                        free_q.put(slot)
            except _Stopped:
                return
            except BaseException as exc:  # noqa: BLE001
                fail("writer", lane, exc)

        threads, futures = [], []
        if not all_direct:
            for k, lane in enumerate(lanes):
                if not slots[k]:
                    continue
                free_q: queue.Queue = queue.Queue()
                for s in slots[k]:
                    free_q.put(s)
                ready_q: queue.Queue = queue.Queue(maxsize=plan.depth + 1)
                done_q: queue.Queue = queue.Queue(maxsize=plan.depth + 1)
                for fn, args, tag in (
                    (reader, (k, lane, free_q, ready_q), "read"),
                    (worker, (k, lane, ready_q, done_q), "work"),
                    (writer, (k, lane, done_q, free_q), "write"),
                ):
                    threads.append(
                        threading.Thread(target=fn, args=args, name=f"stirgpu-{tag}-{lane.name}", daemon=True)
                    )
        try:
            if all_direct:
                # the first lane runs in this thread, the others on kept threads: a call
                # starts no thread
                busy = [k for k in range(len(lanes)) if slots[k]]
                pool = self.lane_pool if len(busy) > 1 else None
                assert pool is not None or len(busy) < 2  # (two busy lanes: two devices)
                futures = [pool.submit(direct_lane, k, lanes[k]) for k in busy[1:]] if pool is not None else []
                if busy:
                    direct_lane(busy[0], lanes[busy[0]])
                concurrent.futures.wait(futures)
            else:
                for t in threads:
                    t.start()
                deadline = None
                for t in threads:
                    while t.is_alive():
                        t.join(_POLL)
                        if stop.is_set():
                            deadline = deadline or time.monotonic() + _SHUTDOWN_SECONDS
                            if time.monotonic() > deadline:
                                break
        except BaseException:
            # a KeyboardInterrupt (or any error) in the calling thread: every other thread sees
            # the flag within a poll or a kernel piece, drops its queued chunks and leaves
            stop.set()
            _join_all(threads, futures, time.monotonic() + _SHUTDOWN_SECONDS)
            raise
        finally:
            for lane in lanes:
                try:
                    lane.synchronize()  # (a stopped GPU lane: only its chunks already queued)
                except Exception:  # the primary error is reported below
                    pass
        if errors:
            raise _failure(errors, operation or program.name)
        if any(t.is_alive() for t in threads):  # pragma: no cover - a thread ignored the stop flag
            raise PipelineError(f"{operation or program.name}: pipeline threads did not finish")

        image = None
        if program.accumulates_image:
            if cuda and result_device is not None and result_device in self.devices:
                image = self._reduce_on_device(lanes, accum, result_device)
            elif cuda:
                image = self._download(lanes[0], self._reduce_on_device(lanes, accum, lanes[0].device_id))
            else:
                for k, lane in enumerate(lanes):
                    part = lane.to_numpy(accum[k])  # a fresh array per call: no copy needed
                    if image is None:
                        image = part
                    else:
                        np.add(image, part, out=image)
        sums = np.zeros(max(len(program.scalars), 1), dtype=np.float64)
        if program.scalars:
            for k, lane in enumerate(lanes):
                sums += np.asarray(lane.to_numpy(scalars[k]), dtype=np.float64).sum(axis=0)
        host_alloc = plan.host_bytes
        stats = rec.finish(
            operation=operation or program.name,
            backend=self.backend,
            wall_seconds=time.perf_counter() - t_start,
            setup_seconds=setup_seconds,
            host_bytes_allocated=host_alloc,
            device_bytes_allocated=plan.device_bytes_per_lane,
            plan=str(plan),
            shared_compute=not cuda,
            direct=tuple(sorted(direct)),
        )
        return RunResult(image, {n: float(sums[i]) for i, n in enumerate(program.scalars)}, stats)

    def _download(self, lane, image):
        """A new numpy copy of a device image: DMA into the engine's pinned image buffer (the
        one uploads use; no upload is pending at the end of a call), then a host copy split
        over the I/O threads -- a pageable download is driver-staged at a few GB/s."""
        import cupyx

        self._wait_uploads()
        if self._staging is None or self._staging.shape != image.shape:
            self._staging = None
            self._staging = cupyx.empty_pinned(image.shape, dtype=np.float32)
        lane.to_host(self._staging, image, image.nbytes)
        lane.s_out.synchronize()
        out = np.empty(image.shape, dtype=np.float32)
        parallel_copy(self.io_pool, out, self._staging)
        return out

    @staticmethod
    def _reduce_on_device(lanes, accum, device_id: int):
        """Sum the lanes' images on GPU ``device_id`` (others copied over peer to peer), in lane
        order like the host reduction."""
        home = next(k for k, lane in enumerate(lanes) if lane.device_id == device_id)
        cp = lanes[home].cp
        with lanes[home].device:
            out = None
            tmp = None
            for k, lane in enumerate(lanes):
                part = accum[k]
                if k != home:
                    if tmp is None:
                        tmp = cp.empty_like(accum[home])
                    cp.cuda.runtime.memcpyPeer(tmp.data.ptr, device_id, part.data.ptr, lane.device_id, part.nbytes)
                    part = tmp
                if out is None:
                    out = part.copy() if k != home else part
                else:
                    out += part
            if len(lanes) > 1:  # one lane: nothing was queued here (its streams are synchronised)
                lanes[home].device.synchronize()
        return out
