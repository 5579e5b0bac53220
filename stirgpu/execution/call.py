"""One call: a chunk program run over a plan's chunks on an engine's lanes.

:class:`Call` holds the call's state -- its stores, the lanes' slots, accumulation images and
sums, the stop flag -- and the steps every strategy of :mod:`.strategies` shares:

* set-up: each lane's slots, time reference and per-lane state (:meth:`Call.prepare_lane`);
* chunk dealing (:meth:`Call.take`): GPU lanes share one queue of chunks, so a faster device
  takes more of them; CPU lanes take theirs round-robin (they share one compute lock: no
  balance to gain, and each lane sums the same chunks in the same order on every run -- CPU
  back projections are reproducible bit for bit);
* per chunk: its :class:`~stirgpu.execution.program.ChunkData`, a CPU lane's device step, a GPU
  lane's queued copies and kernels (:meth:`Call.enqueue`: copy-in, compute and copy-out
  streams ordered by the slot's CUDA events), its stage times, its completion;
* non-finite inputs: the reader counts a staged input's NaN and ±Inf values as it reads each
  chunk; a direct input's chunks are summed on the device (:meth:`Call.check_direct_sums`);
  either stops the call with :class:`.NonFiniteInput`;
* :meth:`Call.execute`: runs a strategy, stops every thread on any exception (the calling
  thread's KeyboardInterrupt above all), synchronises the lanes, raises the first failure;
* :meth:`Call.result`: the lanes' images reduced in lane order (on the host, or on one GPU peer
  to peer), the scalars summed, the statistics.

Imports: numpy, ``stirgpu.errors``, :mod:`.direct_io` (the direct copies' layout),
:mod:`.program`, :mod:`.residency`, :mod:`.stats`, :mod:`.stopping` (and :mod:`.plan`,
:mod:`.hostio` for their types); the engine's other parts (slots, tables) are handed in.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import PipelineError
from .direct_io import direct_copies
from .hostio import DaemonPool
from .plan import Chunk, Plan
from .program import ChunkData, ChunkProgram
from .residency import Residency, reduce_on_device
from .stats import RunStats, StatsRecorder
from .stopping import SHUTDOWN_SECONDS, NonFiniteInput, StopFlag

if TYPE_CHECKING:
    from ..array_types import Array
    from .slots import Slot

__all__ = ["Call", "RunResult", "copy_direct"]


def copy_direct(lane, to_device: bool, dev_ptr: int, arrays: Mapping, chunk: Chunk, stream) -> None:
    """Queue on ``stream`` the DMA between a direct store's page-locked ``arrays`` (by segment and
    timing position, :meth:`.DirectIO.find`) and ``chunk``'s device buffer at ``dev_ptr``: one
    copy per part and timing position (:func:`.direct_copies`)."""
    for c in direct_copies(chunk):
        lane.copy_views(to_device, dev_ptr + 4 * c.offset, arrays[c.segment, c.timing_pos], c.views, stream)


@dataclasses.dataclass
class RunResult:
    """What :meth:`Engine.run` returns: the reduced image (numpy, or None), the summed
    scalars by name, the statistics, and the plan whose chunks ran (the one given, or the
    smaller one of a call retried after running out of memory)."""

    image: np.ndarray | None
    scalars: dict
    stats: RunStats
    plan: Plan | None = None


class Call:
    """One run of ``program`` over ``plan`` (the arguments of :meth:`Engine.run`, checked there),
    on ``lanes`` of ``backend`` (``devices``: the engine's lane ids), with the engine's
    ``residency`` (input images, kept accumulation images) and ``tables`` (:class:`.ChunkTableKeeper`);
    ``io_pool`` and ``io_threads`` split chunk reads and writes.  ``chunk_done(chunk)`` is
    called (from the call's threads) for each chunk done; :attr:`completed` holds the indices
    of the chunks whose outputs were all written, also when the call failed."""

    def __init__(
        self,
        *,
        program: ChunkProgram,
        plan: Plan,
        pdi,
        sources: Mapping[str, Any],
        sinks: Mapping[str, Any],
        image_shape,
        chunk_done: Callable[[Chunk], None] | None,
        operation: str,
        result_device: int | None,
        parallel_io: dict,
        after_write: dict,
        direct: dict,
        result_out,
        check_finite: frozenset[str],
        backend: str,
        devices: tuple[int, ...],
        lanes: list,
        residency: Residency,
        tables,
        io_pool: DaemonPool | None,
        io_threads: int,
        t_start: float,
    ):
        self.t_start = t_start
        self.program, self.plan, self.pdi = program, plan, pdi
        self.sources, self.sinks, self.direct = sources, sinks, direct
        self.parallel_io, self.after_write, self.chunk_done = parallel_io, after_write, chunk_done
        self.image_shape, self.result_device, self.result_out = image_shape, result_device, result_out
        self.operation = operation or program.name
        #: inputs whose NaN and ±Inf values stop the call (:class:`.NonFiniteInput`): staged ones
        #: counted by the reader as it reads them, direct ones summed on the device after their copy
        self.check_finite = check_finite
        self.backend, self.devices, self.lanes = backend, devices, lanes
        self.cuda = backend == "cuda"
        self.residency, self.tables = residency, tables
        self.n_in, self.n_out = len(program.inputs), len(program.outputs)
        # host staging buffers: one per store not copied directly (on CPU lanes, where every
        # store is staged, the slot's buffers are the compute buffers: inputs, outputs, scratch)
        self.staged = [n for n in program.inputs + program.outputs if n not in direct]
        if plan.chunks and len(self.staged) > plan.host_buffers_per_slot:
            raise PipelineError(
                f"{program.name}: the plan has {plan.host_buffers_per_slot} host buffers per "
                f"slot, {len(self.staged)} stores need one ({self.staged}); make the plan with direct="
                f"{sorted(direct)}"
            )
        #: a staged store's host buffer in the slot, by name
        self.host_index = {n: i for i, n in enumerate(self.staged)}
        self.n_direct_in = sum(1 for n in program.inputs if n in direct)
        self.n_direct_out = sum(1 for n in program.outputs if n in direct)
        self.n_host = len(self.staged) + (0 if self.cuda else program.scratch)
        self.n_dev = self.n_in + self.n_out + program.scratch
        self.recorder = StatsRecorder([lane.name for lane in lanes], t_start)
        self.io_pool = io_pool
        self.io_split = max(io_threads // len(lanes), 1)  # pieces per chunk; lanes share the pool
        #: every store copied directly (or none at all) on GPUs: one thread per device does everything
        self.all_direct = self.cuda and not self.staged
        self.n_streams = plan.concurrency  # compute streams taking this call's chunks (see Planner)
        # per lane k
        self.slots: dict[int, list[Slot]] = {}
        self.accumulation: dict[int, Array | None] = {}  # the accumulation image
        self.sums: dict[int, Array | None] = {}  # the scalars' sums, one row per compute stream
        self.time_refs: dict[int, Any] = {}  # (CUDA event, perf_counter) the GPU stage times are relative to
        self.turns = {k: 0 for k in range(len(lanes))}  # chunks queued: their compute streams
        self.unprepared: set[int] = set()  # lanes prepared by their own thread at their first chunk
        #: per lane, each checked direct input's float64 sum over its chunks, on the device
        self.input_sums: dict[int, dict[str, Any]] = {k: {} for k in range(len(lanes))}
        self.setup_seconds = 0.0
        self.stop = StopFlag()
        #: the chunks (indices) whose outputs are all written -- what a retry need not do again
        self.completed: set[int] = set()
        self._chunk_lock = threading.Lock()
        if self.cuda:
            self._shared_chunks = iter(plan.chunks)
            self._lane_chunks = None
        else:
            self._lane_chunks = [iter(list(plan.chunks)[k :: len(lanes)]) for k in range(len(lanes))]
        #: the GPU stages a chunk goes through, timed by the slot's events (start, end)
        self.timed_stages = (
            ((("h2d", "h2d0", "h2d1"),) if self.n_in else ())
            + (("compute", "c0", "c1"),)
            + ((("d2h", "d0", "d1"),) if self.n_out else ())
        )

    # -- set-up --------------------------------------------------------------------------
    def set_up_lanes(self, slot_keeper) -> None:
        """Per-lane resources, allocated before any thread starts; on the all-direct GPU path a
        lane with chunks is prepared by its own thread, once its first chunk's upload is queued
        (the copy then runs while the host does the set-up)."""
        for k, lane in enumerate(self.lanes):
            self.slots[k] = (
                slot_keeper.for_lane(k, lane, self.plan, self.n_host, self.n_dev) if self.plan.chunks else []
            )
            with lane.activate():
                if self.cuda:
                    self.time_refs[k] = lane.time_reference()
                if self.result_out is not None and lane.device_id == self.result_device:
                    # the caller's pending work on its array, queued on the caller's current
                    # stream (asked here, in the caller's thread), comes before this call's
                    lane.after_current_stream()
                if self.all_direct and self.slots[k]:
                    self.unprepared.add(k)
                else:
                    self.prepare_lane(k, lane)
        self.setup_seconds = time.perf_counter() - self.t_start

    def prepare_lane(self, k: int, lane) -> None:
        """A lane's accumulation image, sums and the program's per-lane state (on GPUs
        queued on the first compute stream, which the other compute streams then wait
        for: it precedes every kernel of the call).  Called with the lane active."""
        program, cuda = self.program, self.cuda
        self.accumulation[k] = None
        # zeroed, unless the program sets every value itself (see ChunkProgram)
        init = lane.empty_device if cuda and program.fills_accumulation else lane.zeros_device
        if self.result_out is not None and lane.device_id == self.result_device:
            # the caller's array (its pending work was put first, in set_up_lanes)
            self.accumulation[k] = init(self.image_shape, out=self.result_out)
        elif program.accumulates_image:
            # the engine's own image, kept between calls, unless it is handed out as the
            # result (a cupy result on its GPU; CPU lanes' images are the result)
            mine = self.residency.kept_accumulation(k)
            handed_out = not cuda or lane.device_id == self.result_device
            if handed_out or mine is None or tuple(mine.shape) != tuple(self.image_shape):
                mine = None
            self.accumulation[k] = init(self.image_shape, out=mine)
            if not handed_out:
                self.residency.keep_accumulation(k, self.accumulation[k])
        # one row per compute stream: chunks computing at once never add to one sum
        self.sums[k] = (
            lane.zeros_device((self.n_streams, len(program.scalars)), np.float64) if program.scalars else None
        )
        image = self.residency.input_image(k) if program.uses_image else None
        if cuda:
            with lane.s_compute:
                program.start_lane(lane, image, self.accumulation[k])
            lane.fork()
        else:
            lane.compute(lambda: program.start_lane(lane, image, self.accumulation[k]))

    def prepare_if_waiting(self, k: int, lane) -> None:
        """Prepare lane ``k`` now if its preparation waited for its first chunk (all-direct path)."""
        if k in self.unprepared:
            self.unprepared.discard(k)
            self.prepare_lane(k, lane)

    def finish_lane(self, k: int, lane) -> None:
        """The program's last step on lane ``k``, after its last chunk (GPU: after every compute
        stream's work)."""
        if self.cuda:
            lane.join()
            with lane.s_compute:
                self.program.finish_lane(lane, self.accumulation[k])
        else:
            lane.compute(lambda: self.program.finish_lane(lane, self.accumulation[k]))

    # -- chunks --------------------------------------------------------------------------
    def take(self, k: int):
        """Lane ``k``'s next chunk, or None when there is none left for it."""
        if self._lane_chunks is not None:
            return next(self._lane_chunks[k], None)
        with self._chunk_lock:
            return next(self._shared_chunks, None)

    def io_split_of(self, name: str) -> tuple[DaemonPool | None, int]:
        """(pool, pieces per part) of store ``name``'s chunk I/O: split over the I/O threads only
        where the store may be accessed by several threads at once."""
        return (self.io_pool, self.io_split) if self.parallel_io.get(name, False) else (None, 1)

    def chunk_data(self, k: int, lane, chunk, slot, tables, turn: int = 0) -> ChunkData:
        program, n = self.program, chunk.num_bins
        n_in, n_out = self.n_in, self.n_out
        sums = self.sums[k]
        return ChunkData(
            chunk=chunk,
            tables=tables,
            inputs={name: slot.dev_view(i, n) for i, name in enumerate(program.inputs)},
            outputs={name: slot.dev_view(n_in + j, n) for j, name in enumerate(program.outputs)},
            scratch=[slot.dev_view(n_in + n_out + i, n) for i in range(program.scratch)],
            image=self.residency.input_image(k),
            accum=self.accumulation[k],
            scalars=None if sums is None else sums[turn % self.n_streams],
            xp=lane.xp,
            lane=lane,
            cancel=self.stop.event,
        )

    def device_step(self, data: ChunkData) -> None:
        """A CPU lane's compute, under the compute lock: a lane that waited for the lock
        while the call stopped computes nothing."""
        self.stop.check()
        data.lane.before_allocation("chunk temporaries", self.program.workspace * data.chunk.nbytes)
        self.program.compute(data)

    def enqueue(self, k: int, lane, chunk, slot):
        """Queue one chunk on a GPU: tables and inputs up (copy-in stream), the program's
        device step (compute stream, after the copies), outputs down (copy-out stream,
        after the compute); CUDA events order the streams and time the stages.  Staged
        stores move through the slot's pinned buffers, direct ones straight from and to
        their page-locked memory.  The lane's compute streams take the chunks in turn.
        Never waits.  Returns the slot's events."""
        return self.enqueue_rest(k, lane, chunk, slot, self.enqueue_in(k, lane, chunk, slot))

    def enqueue_in(self, k: int, lane, chunk, slot):
        """The copy-in part of :meth:`enqueue`; returns the chunk's tables (kept for the lane: its
        kernels keep their own device tables of the chunk by them)."""
        ev = slot.events
        lane.record(lane.s_in, ev["h2d0"])
        tables = self.tables.for_lane(k, self.pdi, chunk)
        for i, name in enumerate(self.program.inputs):
            if name in self.direct:
                copy_direct(lane, True, slot.dev[i].data.ptr, self.direct[name], chunk, lane.s_in)
            else:
                lane.to_device(slot.dev[i], slot.host[self.host_index[name]], chunk.nbytes)
        self._sum_direct_inputs(k, lane, chunk, slot)
        lane.record(lane.s_in, ev["h2d1"])
        return tables

    def _sum_direct_inputs(self, k: int, lane, chunk, slot) -> None:
        """Add each checked direct input's chunk, just copied, into its sum on lane ``k``'s copy-in
        stream (ordered after the copy, before the chunk's compute): a float64 sum of float32
        values is finite exactly when every value is.  :meth:`check_direct_sums` looks at them
        after the call; no host thread reads these inputs, so the device counts them."""
        sums = self.input_sums[k]
        for i, name in enumerate(self.program.inputs):
            if name in self.direct and name in self.check_finite:
                with lane.s_in:
                    part = slot.dev_view(i, chunk.num_bins).sum(dtype=np.float64)
                    sums[name] = part if name not in sums else sums[name] + part

    def check_direct_sums(self) -> None:
        """Raise :class:`.NonFiniteInput` for a checked direct input whose sum on some lane is not
        finite (after the lanes are synchronised: one small read per lane and input)."""
        for k, lane in enumerate(self.lanes):
            for name, total in self.input_sums[k].items():
                if not np.isfinite(float(lane.to_numpy(total))):
                    raise NonFiniteInput(name)

    def enqueue_rest(self, k: int, lane, chunk, slot, tables):
        """The compute and copy-out parts of :meth:`enqueue`, after :meth:`enqueue_in`."""
        program, n_in = self.program, self.n_in
        nbytes = chunk.nbytes
        ev = slot.events
        turn = self.turns[k]
        self.turns[k] += 1
        s_compute = lane.compute_stream(turn, self.n_streams)
        data = self.chunk_data(k, lane, chunk, slot, tables, turn)
        s_compute.wait_event(ev["h2d1"])
        lane.record(s_compute, ev["c0"])
        lane.before_allocation("chunk temporaries", program.workspace * nbytes)
        with s_compute:
            program.compute(data)
        lane.record(s_compute, ev["c1"])
        lane.s_out.wait_event(ev["c1"])
        lane.record(lane.s_out, ev["d0"])
        for j, name in enumerate(program.outputs):
            if name in self.direct:
                copy_direct(lane, False, slot.dev[n_in + j].data.ptr, self.direct[name], chunk, lane.s_out)
            else:
                lane.to_host(slot.host[self.host_index[name]], slot.dev[n_in + j], nbytes)
        lane.record(lane.s_out, ev["d1"])
        self.recorder.add(
            bytes_uploaded=n_in * nbytes, bytes_downloaded=self.n_out * nbytes, bytes_read=self.n_direct_in * nbytes
        )
        return ev

    def gpu_stages(self, k: int, lane, chunk, ev) -> None:
        """Wait for a chunk's last event, then record its GPU stages on the host clock."""
        ev["d1"].synchronize()
        ref, t_ref = self.time_refs[k]
        elapsed = lane.cp.cuda.get_elapsed_time
        for stage, a, b in self.timed_stages:  # (a few microseconds a query: only the stages used)
            self.recorder.stage(
                lane.name, stage, chunk.index, t_ref + elapsed(ref, ev[a]) / 1e3, t_ref + elapsed(ref, ev[b]) / 1e3
            )

    def chunk_finished(self, lane, chunk, counted: bool = True) -> None:
        """A chunk is done, its outputs all written: it is :attr:`completed`; unless not
        ``counted`` (a stopped call's chunk that was in flight: it finished, but the call does
        not go on), direct outputs' ``after_write``, the counts and ``chunk_done``."""
        self.completed.add(chunk.index)
        if not counted:
            return
        for name in self.program.outputs:
            if name in self.direct and name in self.after_write:
                self.after_write[name](chunk)
        if self.n_direct_out:
            self.recorder.add(bytes_written=self.n_direct_out * chunk.nbytes)
        self.recorder.chunk_done(lane.name, chunk.num_bins)
        if self.chunk_done is not None:
            self.chunk_done(chunk)

    # -- running and results -------------------------------------------------------------
    def execute(self, strategy) -> RunResult:
        """Run ``strategy`` (:mod:`.strategies`) to the end of the call, then :meth:`result`.

        Any exception in the calling thread -- a KeyboardInterrupt above all -- sets the stop
        flag: every other thread sees it within a poll or a kernel piece, drops its queued
        chunks and leaves.  Every lane is synchronised whatever happened (a stopped GPU lane:
        only its chunks already queued)."""
        try:
            strategy.run()
        except BaseException:
            self.stop.set()
            strategy.join(time.monotonic() + SHUTDOWN_SECONDS)
            raise
        finally:
            for lane in self.lanes:
                try:
                    lane.synchronize()
                except Exception:  # the primary error is reported below
                    pass
        failure = self.stop.failure(self.operation)
        if failure is not None:
            raise failure
        self.check_direct_sums()
        if strategy.still_running():  # pragma: no cover - a thread ignored the stop flag
            raise PipelineError(f"{self.operation}: pipeline threads did not finish")
        return self.result()

    def result(self) -> RunResult:
        """The lanes' images reduced (numpy; cupy on ``result_device``), the scalars summed, and
        the statistics."""
        program, lanes, accum = self.program, self.lanes, self.accumulation
        image = None
        if program.accumulates_image:
            if self.cuda and self.result_device is not None and self.result_device in self.devices:
                image = reduce_on_device(lanes, accum, self.result_device)
            elif self.cuda:
                image = self.residency.download(
                    lanes[0], reduce_on_device(lanes, accum, lanes[0].device_id), self.io_pool
                )
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
                sums += np.asarray(lane.to_numpy(self.sums[k]), dtype=np.float64).sum(axis=0)
        stats = self.recorder.finish(
            operation=self.operation,
            backend=self.backend,
            wall_seconds=time.perf_counter() - self.t_start,
            setup_seconds=self.setup_seconds,
            host_bytes_allocated=self.plan.host_bytes,
            device_bytes_allocated=self.plan.device_bytes_per_lane,
            plan=str(self.plan),
            shared_compute=not self.cuda,
            direct=tuple(sorted(self.direct)),
        )
        return RunResult(image, {n: float(sums[i]) for i, n in enumerate(program.scalars)}, stats, self.plan)
