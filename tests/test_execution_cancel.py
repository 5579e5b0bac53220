"""The pipeline stopping: a KeyboardInterrupt in the calling thread, or a failure in a chunk
callback, ends the call promptly -- no queued chunk is computed after the stop, a device step
in flight sees the call's cancel flag, no thread of the call is left -- and the engine runs
the next call normally.

Guards against what made Ctrl-C take ~10 s: threads that took chunks already queued after the
stop (a CPU lane waiting for the compute lock then computed a whole chunk), and a device step
that could not be told to stop.  The programs here wait up to 60 s per chunk unless cancelled,
so "promptly" is a wide bound (< 3 s) that still tells stopping from finishing.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time

import pytest
from helpers import random_proj_data, small_geometry

from stirgpu.errors import PipelineError
from stirgpu.execution import ChunkProgram, Engine

#: the threads a staged call starts (one reader, worker and writer per lane)
CALL_THREADS = ("stirgpu-read-", "stirgpu-work-", "stirgpu-write-")


def call_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(CALL_THREADS)]


def threads_gone(within: float = 1.0) -> bool:
    """No thread of a call is alive, at the latest ``within`` seconds from now.  (A thread whose
    start the interrupt cut short is not yet seen as alive by the call's join, so it may still
    be leaving when the call has returned: it sees the stop flag within a poll, 50 ms.)"""
    deadline = time.monotonic() + within
    while call_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return call_threads() == []


class _Slow(ChunkProgram):
    """Each chunk's device step waits for the call's cancel flag (at most ``seconds``); records
    when each chunk started computing, and runs ``on_first`` when the first one starts."""

    name = "slow program"
    inputs = ("data",)
    accumulates_image = True

    def __init__(self, seconds=60.0, on_first=None):
        self.seconds = seconds
        self.on_first = on_first
        self.started: list[tuple[int, float]] = []
        self._lock = threading.Lock()

    def compute(self, d):
        with self._lock:
            self.started.append((d.chunk.index, time.monotonic()))
            first = len(self.started) == 1
        if first and self.on_first is not None:
            self.on_first()
        d.cancel.wait(self.seconds)


def _engine_and_plan(backend, program):
    pdi, info = small_geometry()
    eng = Engine(backend, (0,) if backend == "cuda" else (0, 1))
    plan = eng.make_plan(
        program,
        pdi,
        pdi.segment_nums,
        range(24),
        info.shape,
        host_budget=1 << 26,
        gpu_budget=None if backend == "cpu" else 1 << 28,
        max_views_per_chunk=1,
    )
    return eng, plan, pdi, info


def test_keyboard_interrupt_in_the_caller_stops_the_call(backend):
    """Ctrl-C (SIGINT in the main thread) while the first chunk computes: the call raises the
    KeyboardInterrupt itself (not a PipelineError) within 3 s, the device step in flight saw the
    cancel flag, no other chunk started, no thread of the call is alive; the engine works on."""
    interrupted = []

    def interrupt():
        interrupted.append(time.monotonic())
        _thread.interrupt_main(signal.SIGINT)

    prog = _Slow(on_first=interrupt)
    eng, plan, pdi, info = _engine_and_plan(backend, prog)
    data = random_proj_data(pdi)
    assert len(plan.chunks) > 10
    with pytest.raises(KeyboardInterrupt):
        eng.run(prog, plan, pdi, {"data": data}, {}, image_shape=info.shape)
    stopped = time.monotonic()
    assert interrupted and stopped - interrupted[0] < 3.0
    assert [i for i, _ in prog.started] == [prog.started[0][0]]  # queued chunks were dropped
    assert threads_gone()
    quick = _Slow(seconds=0.0)
    res = eng.run(quick, plan, pdi, {"data": data}, {}, image_shape=info.shape)
    assert res.stats.chunks == len(plan.chunks) == len(quick.started)


class Boom(RuntimeError):
    pass


def test_failing_chunk_callback_drops_queued_chunks(backend):
    """A progress callback that raises (in a writer thread, or the GPU lane's thread) ends the
    call with PipelineError chaining it; the chunk computing then is cancelled, and no chunk
    starts computing after the failure."""
    failed = []

    def progress(_n):
        failed.append(time.monotonic())
        raise Boom("progress display failed")

    prog = _Slow(seconds=0.05)  # chunks queue up behind the first ones meanwhile
    eng, plan, pdi, info = _engine_and_plan(backend, prog)
    t0 = time.monotonic()
    with pytest.raises(PipelineError) as err:
        eng.run(prog, plan, pdi, {"data": random_proj_data(pdi)}, {}, image_shape=info.shape, progress=progress)
    assert isinstance(err.value.__cause__, Boom) and time.monotonic() - t0 < 3.0
    assert len(failed) == 1
    # a lane may have handed its next chunk to the device step in the microseconds between the
    # callback's failure and the stop flag (a GPU lane computes the next chunk while the previous
    # one is written): at most that one per lane starts later, and its step is cancelled at once
    late = [i for i, t in prog.started if t > failed[0]]
    assert len(late) <= plan.lanes, (late, prog.started, failed)
    assert len(prog.started) < len(plan.chunks)
    assert threads_gone()
