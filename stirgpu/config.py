"""Scoped configuration (no global mutable state).

>>> import stirgpu
>>> with stirgpu.config(backend="cpu", gpu_memory_budget=2**30):
...     ...  # projectors created or called here see these settings

Settings live in a :class:`contextvars.ContextVar`, so they are per thread /
per task and restored on exit.  Explicit arguments to a function always win
over the configuration.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import Any

from .errors import StirGpuError

__all__ = ["Config", "config", "get_config", "update_config", "PIN_POLICIES"]

#: values of Config.pin_host_memory
PIN_POLICIES = ("reused", "always", "never")


@dataclasses.dataclass(frozen=True)
class Config:
    #: "auto" (cuda when cupy and a GPU are present, else cpu), "cpu" or "cuda"
    backend: str = "auto"
    #: GPU ids to use (None: all visible GPUs); CPU backend: number of workers is len(devices)
    devices: tuple[int, ...] | None = None
    #: bytes of GPU memory a projector may use per device (None: free memory less a reserve)
    gpu_memory_budget: int | None = None
    #: bytes of host memory for staging buffers (None: a fraction of available memory)
    host_memory_budget: int | None = None
    #: upper bound on views per chunk (None: as many as the budgets allow)
    max_views_per_chunk: int | None = None
    #: where long calls report their progress: a display with ``start(total, desc, unit)``
    #: (stirgpu.execution.progress.ProgressDisplay; the command line's draws bars on a
    #: terminal), or None: no reports (the library prints nothing)
    progress: Any = None
    #: page-lock in-memory projection data so that chunks go straight between it and the GPUs:
    #: "reused" (from a store's second use by a projector on: a store used once, such as a fresh
    #: output, is not worth the page-locking), "always" (from its first use) or "never" (every
    #: chunk through pinned staging buffers, a host copy each way)
    pin_host_memory: str = "reused"
    #: compute streams per GPU: chunks take them in turn, so a chunk's kernels fill the SMs
    #: that the previous chunk's last blocks leave idle (1: one chunk computes at a time)
    compute_streams: int = 2
    #: refuse inputs holding NaN or ±Inf (a NonFiniteError naming the input and the count):
    #: images counted before a call, projection data chunk by chunk as the engine reads them
    #: (docs/execution.md, "Non-finite inputs"); False only to measure what the check costs
    check_finite: bool = True
    #: threads of the CPU backend's numba kernels (projections, priors): None, numba's maximum
    #: (``NUMBA_NUM_THREADS``, else every core); at most that (stirgpu.kernels.threads)
    cpu_threads: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "cpu", "cuda"):
            raise StirGpuError(f"config: backend must be 'auto', 'cpu' or 'cuda', not {self.backend!r}")
        for name in ("gpu_memory_budget", "host_memory_budget", "max_views_per_chunk"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise StirGpuError(f"config: {name} must be a positive integer, not {v!r}")
        if (
            not isinstance(self.compute_streams, int)
            or isinstance(self.compute_streams, bool)
            or not 1 <= self.compute_streams <= 8
        ):
            raise StirGpuError(f"config: compute_streams must be an integer from 1 to 8, not {self.compute_streams!r}")
        if self.cpu_threads is not None and (
            not isinstance(self.cpu_threads, int) or isinstance(self.cpu_threads, bool) or self.cpu_threads < 1
        ):
            raise StirGpuError(f"config: cpu_threads must be a positive integer or None, not {self.cpu_threads!r}")
        if self.pin_host_memory not in PIN_POLICIES:
            raise StirGpuError(f"config: pin_host_memory must be one of {PIN_POLICIES}, not {self.pin_host_memory!r}")
        _check_progress(self.progress)
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))


def _check_progress(display) -> None:
    """A progress display, or None.  ``True`` is refused by name: the library draws no bars."""
    if display is None or callable(getattr(display, "start", None)):
        return
    hint = (
        "; the library draws no bars itself: pass a display, e.g. stirgpu.cli.progress.TerminalProgress()"
        if isinstance(display, bool)
        else ""
    )
    raise StirGpuError(
        f"config: progress must be None or a display with start(total, desc, unit), not {display!r}{hint}"
    )


_CURRENT: contextvars.ContextVar[Config] = contextvars.ContextVar("stirgpu_config", default=Config())


def get_config() -> Config:
    """The configuration in force in this thread/task."""
    return _CURRENT.get()


@contextlib.contextmanager
def config(**changes) -> Iterator[Config]:
    """Override configuration fields inside a ``with`` block."""
    new = dataclasses.replace(_CURRENT.get(), **changes)
    token = _CURRENT.set(new)
    try:
        yield new
    finally:
        _CURRENT.reset(token)


def update_config(**changes) -> Config:
    """Change configuration fields for the rest of the current context (thread / task), as the
    SIRF layer's global setters (``set_max_omp_threads``) do; :func:`config` is the scoped form."""
    new = dataclasses.replace(_CURRENT.get(), **changes)
    _CURRENT.set(new)
    return new
