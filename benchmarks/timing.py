"""How the benchmark scripts time a call, on the CPU or a GPU (a helper: no ``__main__``).

A :class:`Device` is where a script's arrays live, numpy or cupy (``xp``).  With numpy a call is
timed on the host clock.  With cupy the current device is synchronised before the call and
after it, so that the time covers everything the call queued on any stream and nothing queued
before it; with ``events=True`` it is instead the GPU time between two CUDA events recorded
around the call on the current stream (the device still idle before it), which leaves the
host's wait for the result out.

:func:`timings` makes one untimed call (compilation, first touch) and then ``repeat`` timed
ones; a script reports their median (:func:`median_seconds`) or their best
(:func:`best_seconds`), whichever its figures are documented as.  :func:`rounds` does the same
for several calls compared with each other, timing all of them in turn in each round, so that a
change in the machine's other load reaches every figure alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import numpy as np

Name = TypeVar("Name", bound=Hashable)


class Device:
    """Where the arrays live (``xp``: numpy or cupy) and how one call is timed there."""

    def __init__(self, xp, *, events: bool = False):
        self.xp = xp
        self.events = events and xp is not np

    @classmethod
    def of(cls, backend: str, *, events: bool = False):
        """The device of a script's ``--backend`` (``cuda``: cupy's current device, else numpy)."""
        if backend != "cuda":
            return cls(np)
        import cupy

        return cls(cupy, events=events)

    @property
    def name(self) -> str:
        return "cpu" if self.xp is np else "cuda"

    def sync(self) -> None:
        """Wait for everything queued on the current device (nothing to wait for with numpy)."""
        if self.xp is not np:
            self.xp.cuda.Device().synchronize()

    def timed(self, call: Callable[[], Any]) -> tuple[float, Any]:
        """(seconds, result) of one ``call()``."""
        self.sync()
        if self.events:
            start, stop = self.xp.cuda.Event(), self.xp.cuda.Event()
            start.record()
            result = call()
            stop.record()
            stop.synchronize()
            return self.xp.cuda.get_elapsed_time(start, stop) / 1e3, result
        t = time.perf_counter()
        result = call()
        self.sync()
        return time.perf_counter() - t, result


def rounds(device: Device, calls: Mapping[Name, Callable[[], Any]], repeat: int) -> dict[Name, list[float]]:
    """Seconds of each of ``calls`` (name -> function) in ``repeat`` rounds, each round timing
    every call in turn, after one untimed call of each (compilation, first touch)."""
    if repeat < 1:
        raise ValueError(f"repeat {repeat}: at least one timed call is needed")
    for call in calls.values():
        call()
    times: dict[Name, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            times[name].append(device.timed(call)[0])
    return times


def timings(device: Device, call: Callable[[], Any], repeat: int) -> list[float]:
    """Seconds of ``repeat`` calls of ``call()``, after one untimed call (compilation, first touch)."""
    return rounds(device, {"call": call}, repeat)["call"]


def median_seconds(device: Device, call: Callable[[], Any], repeat: int) -> float:
    """The median of :func:`timings`."""
    return statistics.median(timings(device, call, repeat))


def best_seconds(device: Device, call: Callable[[], Any], repeat: int) -> float:
    """The best of :func:`timings`."""
    return min(timings(device, call, repeat))
