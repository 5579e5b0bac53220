"""A call's stop flag, the errors that set it, and the polled hand-offs that look at it.

The first exception in any thread of a call -- or one in the calling thread, a
KeyboardInterrupt above all -- sets the flag; every hand-off between threads looks at it
first and every blocking step polls it (:data:`POLL`), so after a stop no queued chunk is
taken, computed or written and every thread leaves within a poll.  The call then raises what
:meth:`StopFlag.failure` says: the KeyboardInterrupt itself, or a
:class:`~stirgpu.errors.PipelineError` naming the stage and lane and chaining the first error.

Imports: the standard library and ``stirgpu.errors`` only.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Iterable

from ..errors import PipelineError

__all__ = ["StopFlag", "Stopped", "NonFiniteInput", "non_finite_input", "POLL", "SHUTDOWN_SECONDS", "join_all"]

#: how often blocked threads look at the stop flag (seconds)
POLL = 0.05
#: how long threads get to leave after a failure before the call gives up on them
SHUTDOWN_SECONDS = 30.0


class Stopped(Exception):
    """Raised inside a call's threads when another thread failed (the call stopped)."""


class NonFiniteInput(Exception):
    """Raised inside a call when a chunk of input ``name`` holds NaN or ±Inf: the call stops, and
    the engine raises the :class:`~stirgpu.errors.NonFiniteError` naming the input and the count."""

    def __init__(self, name: str):
        super().__init__(f"input {name!r} holds NaN or ±Inf values")
        self.name = name


def non_finite_input(exc: BaseException, errors) -> str | None:
    """The input whose chunk held NaN or ±Inf, when that is why a call failed (``exc``, what it
    raised, or one of the errors ``(stage, lane, error)`` its threads recorded); else None."""
    for e in (exc, exc.__cause__, *(err for _, _, err in errors)):
        if isinstance(e, NonFiniteInput):
            return e.name
    return None


class StopFlag:
    """The stop flag of one call and the errors collected.  ``event`` is the flag itself (a
    :class:`threading.Event`: programs and CPU kernels get it as ``ChunkData.cancel``)."""

    def __init__(self):
        self.event = threading.Event()
        self.errors: list[tuple[str, str, BaseException]] = []
        self._lock = threading.Lock()

    def is_set(self) -> bool:
        return self.event.is_set()

    def set(self) -> None:
        self.event.set()

    def fail(self, stage: str, lane, exc: BaseException) -> None:
        """Record that ``stage`` ("reader", "worker", "writer") of ``lane`` failed, and stop."""
        with self._lock:
            self.errors.append((stage, lane.name, exc))
        self.event.set()

    def check(self) -> None:
        """Raise :class:`Stopped` when the call stopped."""
        if self.event.is_set():
            raise Stopped

    # a stopped call hands nothing on: queued chunks are dropped, not processed
    def get(self, q: queue.Queue):
        while True:
            if self.event.is_set():
                raise Stopped
            try:
                return q.get(timeout=POLL)
            except queue.Empty:
                pass

    def put(self, q: queue.Queue, item) -> None:
        while True:
            if self.event.is_set():
                raise Stopped
            try:
                q.put(item, timeout=POLL)
                return
            except queue.Full:
                pass

    def failure(self, operation: str) -> BaseException | None:
        """What a failed call raises (None: nothing failed): a KeyboardInterrupt (or SystemExit)
        caught in a lane run by the calling thread as it is -- the caller is being interrupted,
        not the pipeline failing -- else a PipelineError chaining the first error."""
        if not self.errors:
            return None
        for _, _, exc in self.errors:
            if not isinstance(exc, Exception):
                return exc
        stage, lane_name, exc = self.errors[0]
        err = PipelineError(f"{operation}: the {stage} of {lane_name} failed: {type(exc).__name__}: {exc}")
        err.__cause__ = exc
        return err


def join_all(
    threads: Iterable[threading.Thread], futures: Iterable[concurrent.futures.Future], deadline: float
) -> None:
    """Wait for a stopped call's threads and lane futures, until ``deadline`` (monotonic).
    (An interrupt may come while the threads are being started: some never were.)"""
    for t in threads:
        if t.is_alive():
            t.join(max(deadline - time.monotonic(), 0.0))
    concurrent.futures.wait(futures, timeout=max(deadline - time.monotonic(), 0.0))
