"""The engine: lanes, what they keep between calls, and chunk programs run over plans.

:class:`Engine` is a façade over named parts, each readable on its own:

* :mod:`.planning` (:class:`Planner`) -- the plan of a program: buffer counts, memory budgets,
  the kept plans;
* :mod:`.direct_io` (:class:`DirectIO`) -- which stores GPUs copy straight to and from, and
  when their memory is page-locked (:mod:`.pinning`);
* :mod:`.residency` (:class:`Residency`) -- the input image on the devices (upload, FOV mask,
  prepared layouts), kept per-lane workspaces, download and peer-to-peer reduction;
* :mod:`.slots` (:class:`SlotKeeper`) and :mod:`.chunk_tables` (:class:`ChunkTableKeeper`) --
  chunk buffers and geometry tables kept from call to call;
* :mod:`.call` (:class:`Call`) -- one call's state and steps, run by a strategy of
  :mod:`.strategies`: staged (reader -> pinned slot -> H2D -> compute -> D2H -> writer threads
  per lane) or direct (one thread per GPU, when every store is copied directly);
* :mod:`.stopping` -- the call's stop flag, errors and polled hand-offs;
* :mod:`.retry` -- a call that runs out of memory: smaller chunks for what did not complete, or
  :class:`~stirgpu.errors.OutOfMemoryError` when even the smallest do not fit;
* :mod:`.identity` (:class:`IdentityCache`) -- the one cache of answers kept per object.

Host memory is bounded by the plan, not by the data: no full-size projection array exists
anywhere.  Failure and cancellation: the first exception in any thread of a call -- or in the
calling thread, a KeyboardInterrupt above all -- stops every thread of the call within a
fraction of a second; :meth:`Engine.run` then raises :class:`~stirgpu.errors.PipelineError`
chaining the cause, or the KeyboardInterrupt itself.  No thread of the call outlives it.
Committing outputs is the caller's business (the projectors abort output stores on error), so
a failed or interrupted call never leaves data that looks complete.  A call that fails because
an allocation failed (cupy's ``OutOfMemoryError``, a MemoryError) is run again over smaller
chunks, for what it did not complete (:mod:`.retry`).  See docs/execution.md.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..config import PIN_POLICIES, get_config
from ..errors import DeviceError, NonFiniteError, PipelineError
from . import devices as _devices
from .call import Call, RunResult
from .chunk_tables import ChunkTableKeeper
from .direct_io import DirectIO
from .hostio import DaemonPool, count_non_finite_in
from .plan import Plan, default_gpu_budget
from .planning import Planner
from .program import ChunkProgram
from .residency import Residency
from .retry import ChunkProgress, exhausted_error, out_of_memory, smaller_plan
from .slots import SlotKeeper
from .stopping import non_finite_input
from .strategies import DirectStrategy, StagedStrategy

__all__ = ["Engine", "RunResult", "KeptWorkspaces"]


@dataclasses.dataclass(frozen=True)
class KeptWorkspaces:
    """What one lane keeps on its device between calls (:meth:`Engine.kept_workspaces`)."""

    #: the engine's accumulation image (None: none kept, e.g. CPU lanes, whose image is the result)
    accumulation: Any
    #: what the lane's kernels keep (:class:`stirgpu.kernels.backends.CudaKept` on a GPU lane;
    #: None on the CPU, whose kernels keep nothing)
    kernels: Any

    def __bool__(self) -> bool:
        """Whether anything is kept."""
        return self.accumulation is not None or (self.kernels is not None and not self.kernels.is_empty())


class Engine:
    """Lanes, their cached buffers and input images; runs chunk programs over a plan.

    One engine per projector (pair).  ``backend`` is "cpu" or "cuda" (already resolved),
    ``devices`` the lane ids.  Buffers and uploaded images stay allocated between calls
    (GPU memory comes from cupy's pool), so repeated calls -- OSEM subiterations -- pay
    no allocation and, for an unchanged image, no upload.  One call at a time per engine.
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
        #: :mod:`stirgpu.execution.direct_io`): "reused" (at a store's second use), "always",
        #: "never" (every chunk through the staging buffers)
        if pin_host_memory not in PIN_POLICIES:
            raise DeviceError(f"pin_host_memory must be one of {PIN_POLICIES}, not {pin_host_memory!r}")
        self.pin_host_memory = pin_host_memory
        #: compute streams per GPU, taking the chunks in turn (see CudaLane); 1 on the CPU
        if int(compute_streams) < 1:
            raise DeviceError(f"compute_streams must be at least 1, not {compute_streams!r}")
        self.compute_streams = int(compute_streams) if backend == "cuda" else 1
        #: threads that split chunks' host reads/writes (and image staging) by views; default 4
        #: per lane, at most half the cores (one host thread copies only a few GB/s)
        if io_threads is None:
            io_threads = min(4 * len(self.devices), max((os.cpu_count() or 2) // 2, 1))
        self.io_threads = max(int(io_threads), 1)
        # the parts (see the module docstring)
        self.planner = Planner(backend, len(self.devices), self.compute_streams, self.gpu_budget)
        self.direct_stores = DirectIO(backend, pin_host_memory)
        self.residency = Residency(backend, len(self.devices))
        self.slots = SlotKeeper()
        self.tables = ChunkTableKeeper(len(self.devices))
        self._lanes: list | None = None
        self._allocation_hook: _devices.AllocationHook | None = None
        self._io: DaemonPool | None = None
        self._lane_pool: DaemonPool | None = None  # lanes other than the first, on direct calls
        self._lock = threading.Lock()  # one call at a time per engine

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

    @property
    def lanes(self) -> list:
        if self._lanes is None:
            self._lanes = _devices.make_lanes(self.backend, self.devices, self.compute_streams)
            for lane in self._lanes:
                lane.allocation_hook = self._allocation_hook
        return self._lanes

    @property
    def allocation_hook(self) -> _devices.AllocationHook | None:
        """**Test hook**: None, or ``hook(lane_name, what, nbytes)``, called before every buffer
        the lanes allocate for a call and before every chunk's device step (for its temporaries;
        see :mod:`stirgpu.execution.devices`).  A hook that raises ``MemoryError`` there makes
        that allocation fail, as a full device or host would: tests use it to drive the
        out-of-memory retries (:mod:`stirgpu.execution.retry`) on any backend."""
        return self._allocation_hook

    @allocation_hook.setter
    def allocation_hook(self, hook: _devices.AllocationHook | None) -> None:
        self._allocation_hook = hook
        for lane in self._lanes or ():
            lane.allocation_hook = hook

    # -- memory and plans ----------------------------------------------------------------
    def gpu_budget(self) -> int | None:
        """Default per-device GPU budget: the smallest over the lanes (None on the CPU).
        Memory this engine already holds counts as available (it is reused)."""
        if self.backend != "cuda":
            return None
        budgets = []
        for k, lane in enumerate(self.lanes):
            free, total = _devices.gpu_memory(lane.device_id)
            held = self.slots.device_bytes(k) + self.residency.device_bytes(k) + lane.kernels.kept_bytes()
            budgets.append(default_gpu_budget(free + held, total))
        return min(budgets)

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
        return self.planner.plan(
            program,
            proj_data_info,
            segments,
            views,
            image_shape,
            host_budget=host_budget,
            gpu_budget=gpu_budget,
            max_views_per_chunk=max_views_per_chunk,
            depth=depth,
            target_chunk_bytes=target_chunk_bytes,
            direct=direct,
        )

    def direct_io(self, stores: Mapping[str, Any], proj_data_info, segments) -> dict:
        """Which of ``stores`` (by name) GPUs can copy straight to and from: those whose
        ``host_array(segment, timing_pos)`` is float32 view-order memory for every one of
        ``segments`` and every timing position (TOF data: one array each), page-locked
        (:mod:`stirgpu.execution.pinning`) -- here at the store's second use ("reused";
        page-locking costs more than one call gains from it) or first ("always"), or by its
        owner already.  Returns ``{name: {(segment, timing_pos): array}}``; empty on the CPU
        backend or with ``pin_host_memory="never"``.  Everything else goes through the host
        staging buffers."""
        if self.backend != "cuda" or self.pin_host_memory == "never":
            return {}
        with self._lock:  # one page-locking at a time (two threads sharing a projector)
            return self.direct_stores.find(stores, proj_data_info, tuple(int(s) for s in segments))

    def release(self) -> None:
        """Drop cached buffers, images, plans and tables (GPU memory returns to cupy's pool)."""
        with self._lock:
            self.residency.wait_uploads()
            self.slots.clear()
            self.residency.clear()
            for lane in self._lanes or ():
                lane.kernels.release()
            self.tables.clear()
            self.planner.clear()
            self.direct_stores.clear()

    def kept_workspaces(self, lane: int) -> KeptWorkspaces:
        """What lane ``lane`` (an index into :attr:`devices`) keeps on its device from call to call:
        the engine's accumulation image, and what the lane's kernels keep (a GPU lane's
        :class:`stirgpu.kernels.backends.CudaKept`: the geometry's transaxial tables and each
        chunk's tables; None on the CPU).  For tests and diagnostics, meaningful between calls; empty
        before the lane's first call and after :meth:`release`."""
        kernels = self._lanes[lane].kernels.kept if self._lanes is not None else None
        return KeptWorkspaces(self.residency.kept_accumulation(lane), kernels)

    # -- the input image -----------------------------------------------------------------
    def set_image(self, image, fov_mask: np.ndarray | None) -> tuple[int, float]:
        """Put ``image`` ((nz, ny, nx) float32: numpy, or cupy on any GPU) on every lane, zeroed
        outside ``fov_mask`` when given.  Returns (bytes uploaded, seconds).

        A numpy image goes up in z slabs: each slab is copied into one pinned buffer (by the
        I/O threads) while the previous slab's DMA runs, and the call returns once the host
        copy is done: the last DMAs finish while the next call starts its pipeline, and each
        lane's compute stream waits for them (CUDA events) before its first kernel.  An image
        whose own memory is page-locked (``DirectIO.image_in_place``: by the store policy, from
        its second upload) goes up by DMA straight from it, and the call returns once that is
        done: the caller may change the image afterwards."""
        t0 = time.perf_counter()
        with self._lock:
            if self.backend == "cuda":
                in_place = self.direct_stores.image_in_place(image)
                uploaded = self.residency.set_image(image, fov_mask, self.lanes, self.io_pool, in_place)
            else:  # (CPU lanes share one host copy: no lane or I/O thread is involved)
                uploaded = self.residency.set_image(image, fov_mask)
        return uploaded, time.perf_counter() - t0

    def has_image(self) -> bool:
        return self.residency.has_image()

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
        check_finite: Mapping[str, tuple[str, str | None]] | None = None,
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

        Non-finite inputs: ``check_finite[name] = (what, path)`` for inputs whose NaN and ±Inf
        values are refused, ``what`` naming the input in the message (its file, else the
        argument) and ``path`` its file (or None).  Each chunk of such an input is counted as it
        is read (on the host by the reader's threads; a direct input on its GPU, summed after
        its copy), so the check adds no read; the first chunk found holding any stops the call
        (its later chunks are neither computed nor written), the input's chunks of ``plan`` are
        counted again, and :class:`~stirgpu.errors.NonFiniteError` says how many there are.

        Out of memory: when an allocation fails during the call (``lane.out_of_memory``), the
        engine drops its kept buffers and workspaces and runs the call again over ``plan``'s
        chunks that did not complete (every chunk, for a program that accumulates) cut to half
        the buffer size, and so on down to one viewgram per buffer; then it raises
        :class:`~stirgpu.errors.OutOfMemoryError`.  ``progress`` counts ``plan``'s chunks
        throughout; the result's ``plan`` is the plan that completed, its statistics those of
        that last attempt (``stats.memory_retries``: the attempts before it).
        """
        self._check_run(program, sources, sinks, image_shape, result_out, result_device)
        if direct is None:
            segments = sorted({p.segment for c in plan.chunks for p in c.parts})
            direct = self.direct_io({**sources, **sinks}, proj_data_info, segments)
        direct = {n: a for n, a in direct.items() if n in program.inputs + program.outputs}
        with self._lock:
            if self.backend == "cpu":  # the caller's cpu_threads, for the lanes' threads
                for lane in self.lanes:
                    lane.cpu_threads = get_config().cpu_threads
            t_start = time.perf_counter()
            tracker = None if progress is None else ChunkProgress(progress, plan.chunks)
            shared = dict(
                program=program,
                pdi=proj_data_info,
                sources=sources,
                sinks=sinks,
                image_shape=image_shape,
                chunk_done=None if tracker is None else tracker.done,
                operation=operation,
                result_device=result_device,
                parallel_io=dict(parallel_io or {}),
                after_write=dict(after_write or {}),
                direct=direct,
                result_out=result_out,
                check_finite=frozenset(n for n in (check_finite or {}) if n in program.inputs),
                backend=self.backend,
                devices=self.devices,
                lanes=self.lanes,
                residency=self.residency,
                tables=self.tables,
                io_pool=self.io_pool,
                io_threads=self.io_threads,
                t_start=t_start,
            )
            return self._run_retrying(plan, shared, check_finite or {}, tracker)

    def _check_run(self, program: ChunkProgram, sources, sinks, image_shape, result_out, result_device) -> None:
        """:meth:`run`'s arguments agree with ``program``, or a clear error."""
        missing = [n for n in program.inputs if n not in sources] + [n for n in program.outputs if n not in sinks]
        if missing:
            raise PipelineError(f"{program.name}: no store given for {missing}")
        if program.uses_image and not self.has_image():
            raise PipelineError(f"{program.name}: no input image was set")
        if program.accumulates_image and image_shape is None:
            raise PipelineError(f"{program.name}: accumulating an image needs its shape")
        if result_out is not None:
            self._check_result_out(program, result_out, result_device, image_shape)

    def _run_retrying(
        self,
        plan: Plan,
        shared: dict[str, Any],
        check_finite: Mapping[str, tuple[str, str | None]],
        tracker: ChunkProgress | None,
    ) -> RunResult:
        """Run the call over ``plan``, then again over smaller chunks while an allocation fails
        (:meth:`run`, "Out of memory"); a non-finite input ends it with its count."""
        attempt, retries = plan, 0
        while True:
            call = Call(plan=attempt, **shared)
            try:
                result = self._execute(call)
            except Exception as exc:  # (a KeyboardInterrupt is never retried)
                name = non_finite_input(exc, call.stop.errors)
                if name is not None:
                    what, path = check_finite[name]
                    count = count_non_finite_in(shared["sources"][name], plan.chunks, *call.io_split_of(name))
                    raise NonFiniteError(what, count, path) from None
                memory = out_of_memory(exc, [e for _, _, e in call.stop.errors], self.lanes[0])
                if memory is None:
                    raise
                attempt = self._retry_plan(call, attempt, memory, retries, exc, tracker)
                retries += 1
                continue
            result.stats.memory_retries = retries
            return result

    def _execute(self, call: Call) -> RunResult:
        """Set up ``call``'s lanes and run it with its strategy."""
        try:
            call.set_up_lanes(self.slots)
        except BaseException:
            for lane in self.lanes:  # what the set-up queued (zeroed accumulators) finishes first
                try:
                    lane.synchronize()
                except Exception:  # the set-up's error is the one raised
                    pass
            raise
        strategy: DirectStrategy | StagedStrategy
        if call.all_direct:
            strategy = DirectStrategy(call, lambda: self.lane_pool)
        else:
            strategy = StagedStrategy(call)
        return call.execute(strategy)

    def _retry_plan(
        self, call: Call, attempt: Plan, memory: str, retries: int, exc: Exception, tracker: ChunkProgress | None
    ) -> Plan:
        """After ``call`` (over ``attempt``) ran out of ``memory``: the plan of what it did not
        complete, in smaller chunks (``tracker`` told of them); the engine's kept buffers and
        workspaces are dropped for it.  Raises OutOfMemoryError when ``attempt``'s chunks were
        the smallest already."""
        program = call.program
        if program.accumulates_image or program.scalars:
            remaining = list(attempt.chunks)  # its accumulators and sums are discarded: all again
        else:
            remaining = [c for c in attempt.chunks if c.index not in call.completed]
            if tracker is not None:
                tracker.done_before_stop(c for c in attempt.chunks if c.index in call.completed)
        if remaining:
            retry = smaller_plan(attempt, remaining)
        elif attempt.chunks:  # every chunk is written; what failed came after them
            retry = (dataclasses.replace(attempt, chunks=()), [])
        else:
            retry = None
        if retry is None:
            raise exhausted_error(call.operation, memory, attempt, self.lanes, retries) from exc
        self.slots.clear()  # (the kept slots fit the last plan: far too large for the next)
        self.residency.drop_accumulation()
        for lane in self._lanes or ():  # (what the kernels keep is made again for the smaller chunks)
            lane.kernels.release()
        smaller, cut_from = retry
        if tracker is not None:
            tracker.start_attempt(smaller.chunks, cut_from)
        return smaller

    def _check_result_out(self, program, result_out, result_device, image_shape) -> None:
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
