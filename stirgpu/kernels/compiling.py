"""A hook that reports the CPU kernels' compilations as they happen, for a caller to show.

The kernels are compiled by numba on their first call with new argument types and kept in
stirgpu's cache folder (:mod:`.jit`); a machine's first run pays the compilation, later
runs load the machine code.  numba announces each real compilation (not a load from the
cache) as a ``"numba:compile"`` event (``numba.core.event``), in the thread that compiles;
:func:`watching_compilations` passes those of stirgpu's kernels to an observer.  The library
prints nothing: the command line decides what to show (``stirgpu/cli/compiling.py``).

numba is imported when the watch starts, not with this module, so that a command that
never projects does not load it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Protocol

__all__ = ["KernelCompilation", "CompilationObserver", "watching_compilations"]

#: the package whose numba functions are reported (every ``cached_njit`` kernel lives here)
_KERNELS_PACKAGE = __name__.rpartition(".")[0]


@dataclasses.dataclass(frozen=True)
class KernelCompilation:
    """One kernel being compiled: ``name`` relative to ``stirgpu.kernels``
    (``"joseph.cpu.back_tables"``); ``nested`` when it is compiled inside another kernel's
    compilation (a function that kernel calls), in the same thread."""

    name: str
    nested: bool


class CompilationObserver(Protocol):
    def started(self, compilation: KernelCompilation) -> None: ...

    def finished(self, compilation: KernelCompilation, seconds: float) -> None: ...


@contextlib.contextmanager
def watching_compilations(observer: CompilationObserver) -> Iterator[None]:
    """Inside the block, ``observer.started`` / ``observer.finished`` are called around every
    compilation of one of stirgpu's CPU kernels, in whichever thread compiles it (the
    observer must be thread-safe).  Loads from the cache call nothing."""
    from numba.core import event

    tracker = _KernelTracker(observer)

    class Listener(event.Listener):  # (numba accepts only its own subclasses)
        def on_start(self, ev) -> None:
            tracker.started(ev.data.get("dispatcher"))

        def on_end(self, ev) -> None:
            tracker.ended(ev.data.get("dispatcher"))

    with event.install_listener("numba:compile", Listener()):
        yield


class _KernelTracker:
    """numba's compile events filtered to stirgpu's kernels; the stack of compilations in each
    thread tells a nested one and times each."""

    def __init__(self, observer: CompilationObserver) -> None:
        self._observer = observer
        self._local = threading.local()

    def _stack(self) -> list[tuple[KernelCompilation, float]]:
        if not hasattr(self._local, "stack"):
            self._local.stack = []
        return self._local.stack

    def started(self, dispatcher) -> None:
        name = _kernel_name(dispatcher)
        if name is None:
            return
        stack = self._stack()
        compilation = KernelCompilation(name, nested=bool(stack))
        stack.append((compilation, time.perf_counter()))
        self._observer.started(compilation)

    def ended(self, dispatcher) -> None:
        stack = self._stack()
        if _kernel_name(dispatcher) is None or not stack:
            return
        compilation, t0 = stack.pop()
        self._observer.finished(compilation, time.perf_counter() - t0)


def _kernel_name(dispatcher) -> str | None:
    module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
    if not module.startswith(_KERNELS_PACKAGE + "."):
        return None
    return f"{module[len(_KERNELS_PACKAGE) + 1 :]}.{dispatcher.py_func.__qualname__}"
