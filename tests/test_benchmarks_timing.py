"""benchmarks/timing.py, the benchmark scripts' shared timing: numpy calls on the host clock, and
(with a fake cupy that records what is asked of it) a GPU synchronised before and after each
timed call, or CUDA events recorded around it.  No timings are asserted."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

TIMING = Path(__file__).resolve().parent.parent / "benchmarks" / "timing.py"


@pytest.fixture(scope="module")
def timing():
    spec = importlib.util.spec_from_file_location("stirgpu_bench_timing", TIMING)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_cupy(log: list[str]):
    """What timing.Device uses of cupy; each use is appended to ``log``."""

    class Device:
        def synchronize(self):
            log.append("sync")

    class Event:
        def record(self):
            log.append("record")

        def synchronize(self):
            log.append("wait event")

    cuda = types.SimpleNamespace(Device=Device, Event=Event, get_elapsed_time=lambda start, stop: 250.0)
    return types.SimpleNamespace(cuda=cuda)


def test_numpy_calls_are_timed_after_a_warm_up(timing):
    calls = []
    device = timing.Device.of("cpu")
    assert device.xp is np and device.name == "cpu" and not timing.Device(np, events=True).events
    times = timing.timings(device, lambda: calls.append(1), 4)
    assert len(calls) == 5 and len(times) == 4 and all(t >= 0 for t in times)
    seconds, result = device.timed(lambda: "done")
    assert result == "done" and seconds >= 0
    with pytest.raises(ValueError, match="repeat 0"):
        timing.best_seconds(device, lambda: None, 0)


def test_median_and_best_of_the_timed_calls(timing, monkeypatch):
    calls = []
    durations = iter([3.0, 1.0, 2.0])
    monkeypatch.setattr(timing.Device, "timed", lambda self, call: (next(durations), call()))
    assert timing.median_seconds(timing.Device(np), lambda: calls.append(1), 3) == 2.0
    assert len(calls) == 4  # one untimed warm-up, then the three timed
    durations = iter([5.0, 4.0, 6.0])
    assert timing.best_seconds(timing.Device(np), lambda: None, 3) == 4.0


def test_a_gpu_is_synchronised_around_each_call(timing, monkeypatch):
    log: list[str] = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    device = timing.Device.of("cuda")
    assert device.name == "cuda" and not device.events
    seconds, result = device.timed(lambda: log.append("call") or 7)
    assert log == ["sync", "call", "sync"] and result == 7 and seconds >= 0


def test_gpu_events_time_the_call_on_the_stream(timing, monkeypatch):
    log: list[str] = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log))
    device = timing.Device.of("cuda", events=True)
    seconds, _ = device.timed(lambda: log.append("call"))
    assert log == ["sync", "record", "call", "record", "wait event"]
    assert seconds == 0.25  # get_elapsed_time's milliseconds


def test_rounds_time_every_call_in_turn_after_a_warm_up_of_each(timing, monkeypatch):
    log: list[str] = []
    durations = iter([1.0, 10.0, 2.0, 20.0, 3.0, 30.0])
    monkeypatch.setattr(timing.Device, "timed", lambda self, call: (next(durations), call()))
    calls = {"a": lambda: log.append("a"), ("b", "back"): lambda: log.append("b")}
    times = timing.rounds(timing.Device(np), calls, 3)
    assert log == ["a", "b"] * 4  # one untimed call of each, then three rounds of both in turn
    assert times == {"a": [1.0, 2.0, 3.0], ("b", "back"): [10.0, 20.0, 30.0]}
    with pytest.raises(ValueError, match="repeat 0"):
        timing.rounds(timing.Device(np), calls, 0)
