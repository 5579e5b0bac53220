"""How a call's chunks move: the staged strategy (reader, worker and writer threads per lane)
and the direct strategy (one thread per GPU).

**Staged** (:class:`StagedStrategy`; some store goes through host memory: a disk file, a STIR
ProjData, or the CPU backend), per lane with ``depth`` slots::

    reader ──(ready queue)──► worker ──(done queue)──► writer ──(free queue)──► reader
    take a free slot and        GPU: queue H2D, compute,   wait for the slot's last
    the next chunk; read the    D2H (Call.enqueue), never  event; write the outputs
    staged inputs into its      wait.  CPU: the device     by views; the chunk is
    host buffers (by views,     step under the compute     done; hand the slot back
    over the I/O threads; each  lock
    piece's NaN/±Inf counted
    as it is read)

  Queues are bounded (a lane never has more than ``depth`` chunks in flight).  Threads are
  named ``stirgpu-read-LANE``, ``stirgpu-work-LANE``, ``stirgpu-write-LANE`` and started per
  call.

**Direct** (:class:`DirectStrategy`; on GPUs, every store copied straight to and from
page-locked memory, or none at all): nothing to read or write on the host, so one thread per
GPU -- the calling thread for the first, the engine's kept ``stirgpu-lane-N`` threads for the
others: a call starts no thread -- queues each chunk's copies and kernels and waits only when
all of the lane's slots are in flight (for the oldest one).  Its set-up waits for its first
chunk's upload to be queued, so the copy runs meanwhile.

Both share the call's chunk dealing, steps, stop flag and error collection (:class:`.Call`);
every hand-off looks at the stop flag first, so after a stop no queued chunk is processed.

Imports: the standard library, ``stirgpu.errors``, :mod:`.call`, :mod:`.hostio`, :mod:`.stopping`.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import queue
import threading
import time
from collections.abc import Callable

from ..errors import Cancelled
from .call import Call
from .hostio import DaemonPool, announce_chunk, read_chunk, write_chunk
from .stopping import POLL, SHUTDOWN_SECONDS, NonFiniteInput, Stopped, join_all

__all__ = ["StagedStrategy", "DirectStrategy"]

#: the end of a lane's chunks, handed from the reader to the worker to the writer
_END = object()


class StagedStrategy:
    """Reader -> pinned slot -> H2D -> compute -> D2H -> writer threads per lane (made here,
    started by :meth:`run`)."""

    def __init__(self, call: Call):
        self.call = call
        self.threads: list[threading.Thread] = []
        depth = call.plan.depth
        for k, lane in enumerate(call.lanes):
            if not call.slots[k]:
                continue
            free_q: queue.Queue = queue.Queue()
            for s in call.slots[k]:
                free_q.put(s)
            ready_q: queue.Queue = queue.Queue(maxsize=depth + 1)
            done_q: queue.Queue = queue.Queue(maxsize=depth + 1)
            for fn, args, tag in (
                (self.reader, (k, lane, free_q, ready_q), "read"),
                (self.worker, (k, lane, ready_q, done_q), "work"),
                (self.writer, (k, lane, done_q, free_q), "write"),
            ):
                self.threads.append(
                    threading.Thread(target=fn, args=args, name=f"stirgpu-{tag}-{lane.name}", daemon=True)
                )

    def run(self) -> None:
        """Start the threads and wait for them (polling the stop flag: after a stop, at most
        :data:`~.stopping.SHUTDOWN_SECONDS` more)."""
        stop = self.call.stop
        for t in self.threads:
            t.start()
        deadline = None
        for t in self.threads:
            while t.is_alive():
                t.join(POLL)
                if stop.is_set():
                    deadline = deadline or time.monotonic() + SHUTDOWN_SECONDS
                    if time.monotonic() > deadline:
                        break

    def join(self, deadline: float) -> None:
        join_all(self.threads, (), deadline)

    def still_running(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def reader(self, k: int, lane, free_q: queue.Queue, ready_q: queue.Queue) -> None:
        call = self.call
        stop, rec, program = call.stop, call.recorder, call.program
        staged = [name for name in program.inputs if name not in call.direct]
        try:
            with lane.activate():
                # one chunk ahead: the next chunk is taken, and announced to its stores, before
                # this one is read, so a file's reads stay queued across the chunks' boundary
                upcoming = self._take_announced(k, staged)
                while True:
                    slot = stop.get(free_q)
                    if stop.is_set():
                        return
                    chunk = upcoming
                    if chunk is None:
                        stop.put(ready_q, _END)
                        return
                    upcoming = self._take_announced(k, staged)
                    t0 = time.perf_counter()
                    # GPU lanes keep their chunks' tables on the device (the worker uploads them)
                    tables = None if call.cuda else [call.tables.host(call.pdi, p) for p in chunk.parts]
                    n = chunk.num_bins
                    for name in staged:
                        flat = slot.host[call.host_index[name]][:n]
                        checked = name in call.check_finite
                        if read_chunk(call.sources[name], chunk, flat, *call.io_split_of(name), count=checked):
                            raise NonFiniteInput(name)  # (before the chunk is computed or written)
                    if staged:
                        rec.stage(lane.name, "read", chunk.index, t0, time.perf_counter())
                        rec.add(bytes_read=len(staged) * chunk.nbytes)
                    stop.put(ready_q, (chunk, slot, tables))
        except Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - reported through PipelineError
            stop.fail("reader", lane, exc)

    def _take_announced(self, k: int, staged: list[str]):
        """Lane ``k``'s next chunk (None: no more), announced to the stores it is read from."""
        chunk = self.call.take(k)
        if chunk is not None:
            for name in staged:
                announce_chunk(self.call.sources[name], chunk)
        return chunk

    def worker(self, k: int, lane, ready_q: queue.Queue, done_q: queue.Queue) -> None:
        call = self.call
        stop = call.stop
        try:
            with lane.activate():
                while True:
                    item = stop.get(ready_q)
                    if item is _END:
                        call.finish_lane(k, lane)
                        stop.put(done_q, _END)
                        return
                    chunk, slot, tables = item
                    if call.cuda:
                        stop.put(done_q, (chunk, slot, call.enqueue(k, lane, chunk, slot)))
                    else:
                        data = call.chunk_data(k, lane, chunk, slot, tables)
                        t0, t1 = lane.compute(functools.partial(call.device_step, data))
                        call.recorder.stage(lane.name, "compute", chunk.index, t0, t1)
                        stop.put(done_q, (chunk, slot, None))
        except (Stopped, Cancelled):  # (CPU kernels given cancel=stop raise Cancelled)
            return
        except BaseException as exc:  # noqa: BLE001
            stop.fail("worker", lane, exc)

    def writer(self, k: int, lane, done_q: queue.Queue, free_q: queue.Queue) -> None:
        call = self.call
        stop, rec = call.stop, call.recorder
        try:
            with lane.activate():
                while True:
                    item = stop.get(done_q)
                    if item is _END:
                        return
                    chunk, slot, ev = item
                    if ev is not None:
                        call.gpu_stages(k, lane, chunk, ev)
                    if stop.is_set():
                        return
                    t0 = time.perf_counter()
                    written = 0
                    for name in call.program.outputs:
                        if name in call.direct:
                            continue
                        flat = slot.host[call.host_index[name]][: chunk.num_bins]
                        write_chunk(call.sinks[name], chunk, flat, *call.io_split_of(name))
                        if name in call.after_write:
                            call.after_write[name](chunk)
                        written += 1
                    if written:
                        rec.stage(lane.name, "write", chunk.index, t0, time.perf_counter())
                        rec.add(bytes_written=written * chunk.nbytes)
                    call.chunk_finished(lane, chunk)
                    free_q.put(slot)
        except Stopped:
            return
        except BaseException as exc:  # noqa: BLE001
            stop.fail("writer", lane, exc)


class DirectStrategy:
    """One thread per GPU queues everything (``lane_pool()``: the engine's kept threads for the
    lanes after the first, asked for only when a second lane has chunks)."""

    def __init__(self, call: Call, lane_pool: Callable[[], DaemonPool | None]):
        self.call = call
        self._lane_pool = lane_pool
        self.futures: list[concurrent.futures.Future] = []

    def run(self) -> None:
        """The first lane with chunks runs in this thread, the others on kept threads."""
        call = self.call
        busy = [k for k in range(len(call.lanes)) if call.slots[k]]
        if busy[1:]:
            pool = self._lane_pool()
            assert pool is not None  # (an engine of two lanes or more has one)
            self.futures = [pool.submit(self.lane, k, call.lanes[k]) for k in busy[1:]]
        if busy:
            self.lane(busy[0], call.lanes[busy[0]])
        concurrent.futures.wait(self.futures)

    def join(self, deadline: float) -> None:
        join_all((), self.futures, deadline)

    def still_running(self) -> bool:
        return False  # (run waited for every lane)

    def lane(self, k: int, lane) -> None:
        """The whole pipeline of one GPU when no store needs staging: nothing to read or write
        on the host, so one thread queues each chunk's copies and kernels and only waits when
        all of the lane's slots are in flight (for the oldest one)."""
        call = self.call
        stop = call.stop
        try:
            with lane.activate():
                free = list(call.slots[k])
                flight: collections.deque = collections.deque()
                try:
                    while not stop.is_set():
                        chunk = call.take(k)
                        if chunk is None:
                            call.prepare_if_waiting(k, lane)  # no chunk came this lane's way
                            call.finish_lane(k, lane)
                            break
                        if not free:
                            self._retire(k, lane, free, flight)
                        slot = free.pop()
                        tables = call.enqueue_in(k, lane, chunk, slot)
                        call.prepare_if_waiting(k, lane)  # the first chunk's upload runs meanwhile
                        flight.append((chunk, slot, call.enqueue_rest(k, lane, chunk, slot, tables)))
                finally:
                    while flight:  # the queued work finishes anyway: let it, and count it
                        self._retire(k, lane, free, flight)
        except BaseException as exc:  # noqa: BLE001 - reported through PipelineError
            stop.fail("worker", lane, exc)

    def _retire(self, k: int, lane, free: list, flight: collections.deque) -> None:
        """Wait for the oldest chunk in flight; it is done, its slot free.  A stopped call's
        chunk counts as done for no one (no progress, no statistics), but its queued work did
        finish: its outputs are whole, and a retry after running out of memory leaves it be."""
        chunk, slot, ev = flight.popleft()
        self.call.gpu_stages(k, lane, chunk, ev)
        self.call.chunk_finished(lane, chunk, counted=not self.call.stop.is_set())
        free.append(slot)
