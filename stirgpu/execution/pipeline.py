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

Queues are bounded (a lane never has more than ``depth`` chunks in flight), so host
memory is bounded by the plan, not by the data: no full-size projection array exists
anywhere.  Images accumulated by a program are kept one per lane and reduced (in lane
order) once at the end.

Failure: every blocking step polls a shared stop event; the first exception in any
thread sets it, all threads leave promptly, the streams are synchronised, and
:meth:`Engine.run` raises :class:`~stirgpu.errors.PipelineError` chaining the cause.
Committing outputs is the caller's business (the projectors abort output stores on
error), so a failed call never leaves data that looks complete.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import time
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import DeviceError, PipelineError
from ..kernels.tables import pack_tables, packed_length
from . import devices as _devices
from .hostio import DaemonPool, parallel_copy, run_pieces, split_ranges
from .plan import Plan, default_gpu_budget, make_plan
from .program import ChunkData, ChunkProgram
from .stats import RunStats, StatsRecorder

__all__ = ["Engine", "RunResult"]

#: how often blocked threads look at the stop flag (seconds)
_POLL = 0.05
#: how long threads get to leave after a failure before the call gives up on them
_SHUTDOWN_SECONDS = 30.0


class _Stopped(Exception):
    """Raised inside pipeline threads when another thread failed."""


_END = object()


@dataclasses.dataclass
class RunResult:
    """What :meth:`Engine.run` returns: the reduced image (numpy, or None), the summed
    scalars by name, and the statistics."""

    image: np.ndarray | None
    scalars: dict
    stats: RunStats


class _Slot:
    """Chunk buffers of one slot: ``host`` (pinned on GPUs) and ``dev`` flat float32 arrays; on
    GPUs also a pinned/device pair for the chunk's geometry tables (float64), so that they go
    up asynchronously with the data (a copy from pageable memory would wait for the GPU)."""

    def __init__(self, lane, capacity: int, n_host: int, n_dev: int, table_capacity: int):
        self.capacity = int(capacity)
        self.table_capacity = int(table_capacity)
        self.host = [lane.alloc_host(capacity) for _ in range(n_host)]
        self.dev = self.host if lane.shares_host_buffers else [lane.alloc_device(capacity) for _ in range(n_dev)]
        if lane.shares_host_buffers:
            self.tab_host = self.tab_dev = None
            self.events = None
        else:
            self.tab_host = lane.alloc_host(table_capacity, np.float64)
            self.tab_dev = lane.alloc_device(table_capacity, np.float64)
            # the stage events of the slot's chunk, recorded again for every chunk (the writer
            # has read them before it hands the slot back)
            self.events = {k: lane.new_event() for k in _EVENTS}


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

    def __init__(self, backend: str, devices, io_threads: int | None = None):
        if backend not in ("cpu", "cuda"):
            raise DeviceError(f"engine backend must be 'cpu' or 'cuda', not {backend!r}")
        self.backend = backend
        self.devices = tuple(int(d) for d in devices)
        #: threads that split chunks' host reads/writes (and image staging) by views; default 4
        #: per lane, at most half the cores (one host thread copies only a few GB/s)
        if io_threads is None:
            io_threads = min(4 * len(self.devices), max((os.cpu_count() or 2) // 2, 1))
        self.io_threads = max(int(io_threads), 1)
        self._lanes: list | None = None
        self._slots: dict[int, list[_Slot]] = {}
        self._images: dict[int, Any] = {}
        self._staging = None  # pinned copy of the input image (GPU)
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

    # -- lanes and memory ----------------------------------------------------------------
    @property
    def lanes(self) -> list:
        if self._lanes is None:
            self._lanes = _devices.make_lanes(self.backend, self.devices)
        return self._lanes

    def _cached_bytes(self, k: int) -> int:
        slots = self._slots.get(k, [])
        n = sum(4 * s.capacity * (len(s.dev) if s.dev is not s.host else 0) for s in slots)
        img = self._images.get(k)
        return n + (int(img.nbytes) if img is not None else 0)

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

    def make_plan(self, program: ChunkProgram, proj_data_info, segments, views,
                  image_shape: tuple[int, int, int], host_budget: int, gpu_budget: int | None,
                  max_views_per_chunk: int | None = None, depth: int = 2,
                  target_chunk_bytes: int | None = None) -> Plan:
        """The plan for ``program`` on this engine's lanes (see :func:`stirgpu.execution.plan.make_plan`)."""
        nz, ny, nx = (int(n) for n in image_shape)
        image_bytes = 4 * nz * ny * nx
        padded_bytes = 4 * (nz + 2) * (ny + 2) * (nx + 2)
        n_io = len(program.inputs) + len(program.outputs)
        # temporaries exist once per lane (one chunk computes at a time): spread over the slots
        extra = program.scratch + -(-int(program.workspace) // max(int(depth), 1))
        images_per_lane = int(program.uses_image) + int(program.accumulates_image)
        # small first chunks (the device starts sooner) and small last ones (a short drain:
        # the last kernel, download and write); see make_plan
        shape = dict(ramp_up=True, taper=True)
        lanes = len(self.devices)
        if self.backend == "cpu":
            # CPU lanes share one input image; each keeps its own accumulation image
            host_fixed = image_bytes * (int(program.uses_image) + lanes * int(program.accumulates_image)
                                        + int(program.accumulates_image))
            return make_plan(proj_data_info, segments, views, lanes=lanes,
                             host_buffers_per_slot=n_io + extra, device_buffers_per_slot=None,
                             host_budget=host_budget, gpu_budget=None, host_fixed_bytes=host_fixed,
                             depth=depth, max_views_per_chunk=max_views_per_chunk,
                             target_chunk_bytes=target_chunk_bytes, **shape)
        if gpu_budget is None:
            gpu_budget = self.gpu_budget()
        # host: the reduced result and one pinned staging copy of the image
        host_fixed = image_bytes * (int(program.accumulates_image) + int(program.uses_image))
        return make_plan(proj_data_info, segments, views, lanes=lanes, host_buffers_per_slot=n_io,
                         device_buffers_per_slot=n_io + extra, host_budget=host_budget,
                         gpu_budget=gpu_budget, host_fixed_bytes=host_fixed,
                         device_fixed_bytes=image_bytes * images_per_lane
                         + padded_bytes * program.image_workspace, depth=depth,
                         max_views_per_chunk=max_views_per_chunk, target_chunk_bytes=target_chunk_bytes,
                         **shape)

    def _slots_for(self, k: int, lane, plan: Plan, n_host: int, n_dev: int) -> list[_Slot]:
        capacity = plan.buffer_bytes // 4
        tables = max(_table_length(c) for c in plan.chunks)
        cached = self._slots.get(k)
        if (cached is not None and len(cached) == plan.depth
                and all(s.capacity >= capacity and len(s.host) >= n_host and len(s.dev) >= n_dev
                        and s.table_capacity >= tables for s in cached)
                and cached[0].capacity <= 2 * capacity):  # do not sit on far too much memory
            return cached
        self._slots.pop(k, None)
        if lane.kind == "cuda":
            with lane.device:
                lane.cp.get_default_memory_pool().free_all_blocks()
        with lane.activate():
            slots = [_Slot(lane, capacity, n_host, n_dev, 2 * tables)  # tiny; headroom for later plans
                     for _ in range(plan.depth)]
        self._slots[k] = slots
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

    def release(self) -> None:
        """Drop cached buffers and images (GPU memory returns to cupy's pool)."""
        with self._lock:
            self._wait_uploads()
            self._slots.clear()
            self._images.clear()
            self._tables.clear()
            self._staging = None

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
        return uploaded, time.perf_counter() - t0

    #: z slabs of a pipelined image upload (measured on an H200 host: 1, 2 and 4 about equal, 8 slower)
    _UPLOAD_SLABS = 2

    def _upload_host_image(self, image: np.ndarray, fov_mask) -> int:
        from ..kernels import apply_cylindrical_fov
        import cupyx
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
        edges = np.linspace(0, image.shape[0], min(self._UPLOAD_SLABS, max(image.shape[0], 1)) + 1).round()
        for a, b in zip(edges[:-1].astype(int), edges[1:].astype(int)):
            if b <= a:
                continue
            parallel_copy(self.io_pool, self._staging[a:b], image[a:b])
            for lane, dst in zip(lanes, dsts):
                with lane.device:
                    lane.to_device(dst[a:b], self._staging[a:b], self._staging[a:b].nbytes)
        self._uploads = []
        for k, (lane, dst) in enumerate(zip(lanes, dsts)):
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
    def run(self, program: ChunkProgram, plan: Plan, proj_data_info, sources: Mapping[str, Any],
            sinks: Mapping[str, Any], image_shape: tuple[int, int, int] | None = None,
            progress: Callable[[int], None] | None = None, operation: str = "",
            result_device: int | None = None, parallel_io: Mapping[str, bool] | None = None,
            after_write: Mapping[str, Callable] | None = None) -> RunResult:
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
        """
        missing = [n for n in program.inputs if n not in sources] + [n for n in program.outputs if n not in sinks]
        if missing:
            raise PipelineError(f"{program.name}: no store given for {missing}")
        if program.uses_image and not self.has_image():
            raise PipelineError(f"{program.name}: no input image was set")
        if program.accumulates_image and image_shape is None:
            raise PipelineError(f"{program.name}: accumulating an image needs its shape")
        with self._lock:
            return self._run(program, plan, proj_data_info, sources, sinks, image_shape, progress, operation,
                             result_device, dict(parallel_io or {}), dict(after_write or {}))

    def _run(self, program, plan, pdi, sources, sinks, image_shape, progress, operation,
             result_device, parallel_io, after_write) -> RunResult:
        t_start = time.perf_counter()
        lanes = self.lanes
        n_in, n_out = len(program.inputs), len(program.outputs)
        cuda = self.backend == "cuda"
        n_host = n_in + n_out + (0 if cuda else program.scratch)
        n_dev = n_in + n_out + program.scratch
        rec = StatsRecorder([lane.name for lane in lanes], t_start)
        io_pool = self.io_pool
        io_split = max(self.io_threads // len(lanes), 1)  # pieces per chunk; lanes share the pool
        if cuda:
            from ..kernels.cuda_backend import DeviceTables

        # per-lane resources (allocated before any thread starts; synchronised on GPUs so
        # the non-blocking streams never see an unfinished memset)
        slots, accum, scalars, refs = {}, {}, {}, {}
        for k, lane in enumerate(lanes):
            slots[k] = self._slots_for(k, lane, plan, n_host, n_dev) if plan.chunks else []
            with lane.activate():
                accum[k] = lane.zeros_device(image_shape) if program.accumulates_image else None
                scalars[k] = lane.zeros_device((max(len(program.scalars), 1),), np.float64)
                if cuda:
                    # a reference event and the host time it fired: puts GPU stage times on the
                    # host clock of the timeline
                    lane.device.synchronize()
                    ref = lane.record(lane.s_compute)
                    lane.s_compute.synchronize()
                    refs[k] = (ref, time.perf_counter())
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
            lane_chunks = [iter(list(plan.chunks)[k::len(lanes)]) for k in range(len(lanes))]

        def fail(stage: str, lane, exc: BaseException) -> None:
            with err_lock:
                errors.append((stage, lane.name, exc))
            stop.set()

        def take(k):
            if lane_chunks is not None:
                return next(lane_chunks[k], None)
            with chunk_lock:
                return next(shared_chunks, None)

        def get(q):
            while True:
                try:
                    return q.get(timeout=_POLL)
                except queue.Empty:
                    if stop.is_set():
                        raise _Stopped from None

        def put(q, item):
            while True:
                try:
                    q.put(item, timeout=_POLL)
                    return
                except queue.Full:
                    if stop.is_set():
                        raise _Stopped from None

        def views_of(bufs, chunk, names, offset):
            n = chunk.num_bins
            return {name: bufs[offset + i][:n] for i, name in enumerate(names)}

        def part_view(buf, part):
            return buf[part.offset:part.stop].reshape(part.shape)

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
            run_pieces(io_pool if split else None, lambda i, j: fn(*pieces[i]),
                       [(i, i + 1) for i in range(len(pieces))])

        def read_chunk(store, chunk, flat, split):
            def piece(seg, views, buf):
                got = store.read_views(seg, views, out=buf)
                if got is not buf and got is not None:  # a store that ignores ``out``
                    np.copyto(buf, got)
            run_io(chunk_pieces(chunk, flat, split), split, piece)

        def write_chunk(store, chunk, flat, split):
            run_io(chunk_pieces(chunk, flat, split), split, lambda seg, views, buf: store.write_views(buf, seg, views))

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
                        tables = [self._chunk_tables(pdi, p) for p in chunk.parts]
                        if slot.tab_host is not None:
                            pack_tables(tables, slot.tab_host)
                        bufs = views_of(slot.host, chunk, program.inputs, 0)
                        for name in program.inputs:
                            read_chunk(sources[name], chunk, bufs[name], parallel_io.get(name, False))
                        if n_in:
                            rec.stage(lane.name, "read", chunk.index, t0, time.perf_counter())
                            rec.add(bytes_read=n_in * chunk.nbytes)
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
                            if cuda:
                                with lane.s_compute:
                                    program.finish_lane(lane, accum[k])
                            else:
                                lane.compute(lambda: program.finish_lane(lane, accum[k]))
                            put(done_q, _END)
                            return
                        chunk, slot, tables = item
                        nbytes = chunk.nbytes
                        data = ChunkData(chunk=chunk, tables=tables,
                                         inputs=views_of(slot.dev, chunk, program.inputs, 0),
                                         outputs=views_of(slot.dev, chunk, program.outputs, n_in),
                                         scratch=[slot.dev[n_in + n_out + i][:chunk.num_bins]
                                                  for i in range(program.scratch)],
                                         image=self._images.get(k), accum=accum[k], scalars=scalars[k],
                                         xp=lane.xp, lane=lane)
                        if not cuda:
                            t0, t1 = lane.compute(lambda: program.compute(data))
                            rec.stage(lane.name, "compute", chunk.index, t0, t1)
                            put(done_q, (chunk, slot, None))
                            continue
                        ev = dict(slot.events)
                        lane.record(lane.s_in, ev["h2d0"])
                        nt64 = _table_length(chunk)
                        lane.to_device(slot.tab_dev, slot.tab_host, 8 * nt64)
                        data.tables = DeviceTables(tables, slot.tab_dev[:nt64], lane.device_id)
                        for i in range(n_in):
                            lane.to_device(slot.dev[i], slot.host[i], nbytes)
                        lane.record(lane.s_in, ev["h2d1"])
                        lane.s_compute.wait_event(ev["h2d1"])
                        lane.record(lane.s_compute, ev["c0"])
                        with lane.s_compute:
                            program.compute(data)
                        lane.record(lane.s_compute, ev["c1"])
                        lane.s_out.wait_event(ev["c1"])
                        lane.record(lane.s_out, ev["d0"])
                        for j in range(n_out):
                            lane.to_host(slot.host[n_in + j], slot.dev[n_in + j], nbytes)
                        lane.record(lane.s_out, ev["d1"])
                        rec.add(bytes_uploaded=n_in * nbytes, bytes_downloaded=n_out * nbytes)
                        put(done_q, (chunk, slot, ev))
            except _Stopped:
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
                            ev["d1"].synchronize()
                            ref, t_ref = refs[k]
                            at = {key: t_ref + lane.cp.cuda.get_elapsed_time(ref, e) / 1e3 for key, e in ev.items()}
                            if n_in:
                                rec.stage(lane.name, "h2d", chunk.index, at["h2d0"], at["h2d1"])
                            rec.stage(lane.name, "compute", chunk.index, at["c0"], at["c1"])
                            if n_out:
                                rec.stage(lane.name, "d2h", chunk.index, at["d0"], at["d1"])
                        if stop.is_set():
                            return
                        if n_out:
                            t0 = time.perf_counter()
                            outs = views_of(slot.host, chunk, program.outputs, n_in)
                            for name in program.outputs:
                                write_chunk(sinks[name], chunk, outs[name], parallel_io.get(name, False))
                                if name in after_write:
                                    after_write[name](chunk)
                            rec.stage(lane.name, "write", chunk.index, t0, time.perf_counter())
                            rec.add(bytes_written=n_out * chunk.nbytes)
                        rec.chunk_done(lane.name, chunk.num_bins)
                        if progress is not None:
                            progress(1)
                        free_q.put(slot)
            except _Stopped:
                return
            except BaseException as exc:  # noqa: BLE001
                fail("writer", lane, exc)

        threads = []
        for k, lane in enumerate(lanes):
            free_q: queue.Queue = queue.Queue()
            for s in slots[k]:
                free_q.put(s)
            ready_q: queue.Queue = queue.Queue(maxsize=plan.depth + 1)
            done_q: queue.Queue = queue.Queue(maxsize=plan.depth + 1)
            if not slots[k]:
                continue
            for fn, args, tag in ((reader, (k, lane, free_q, ready_q), "read"),
                                  (worker, (k, lane, ready_q, done_q), "work"),
                                  (writer, (k, lane, done_q, free_q), "write")):
                threads.append(threading.Thread(target=fn, args=args, name=f"stirgpu-{tag}-{lane.name}",
                                                daemon=True))
        try:
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
            stop.set()  # KeyboardInterrupt in the caller: let the threads go
            for t in threads:
                t.join(_SHUTDOWN_SECONDS / max(len(threads), 1))
            raise
        finally:
            for lane in lanes:
                try:
                    lane.synchronize()
                except Exception:  # the primary error is reported below
                    pass
        if errors:
            stage, lane_name, exc = errors[0]
            raise PipelineError(f"{operation or program.name}: the {stage} of {lane_name} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
        if any(t.is_alive() for t in threads):  # pragma: no cover - a thread ignored the stop flag
            raise PipelineError(f"{operation or program.name}: pipeline threads did not finish")

        image = None
        if program.accumulates_image:
            if cuda and result_device is not None and result_device in self.devices:
                image = self._reduce_on_device(lanes, accum, result_device)
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
                sums += np.asarray(lane.to_numpy(scalars[k]), dtype=np.float64)
        host_alloc = plan.host_bytes
        stats = rec.finish(operation=operation or program.name, backend=self.backend,
                           wall_seconds=time.perf_counter() - t_start, setup_seconds=setup_seconds,
                           host_bytes_allocated=host_alloc, device_bytes_allocated=plan.device_bytes_per_lane,
                           plan=str(plan), shared_compute=not cuda)
        return RunResult(image, {n: float(sums[i]) for i, n in enumerate(program.scalars)}, stats)

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
            lanes[home].device.synchronize()
        return out

