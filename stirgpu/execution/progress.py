"""Progress of long calls, reported to a display the caller provides: the library draws nothing.

``stirgpu.config(progress=display)`` hands the library a :class:`ProgressDisplay`: an object
whose ``start(total, desc, unit)`` returns a :class:`ProgressTask` (``update(n)``, thread-safe:
a projection's chunks finish in the engine's threads, and ``close()``).  The command line's
display (``stirgpu.cli.progress.TerminalProgress``) draws tqdm bars on a terminal; a notebook or
a GUI may pass its own.  With none (the default) nothing is reported.

Calls nest: an OSEM subiteration (a task of unit "subiteration") runs a projection (a task of
unit "chunk") inside it; the display decides what to show of the inner one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

from ..config import get_config

__all__ = ["ProgressTask", "ProgressDisplay", "start_progress", "progress_bar"]


class ProgressTask(Protocol):
    """One long call's progress: ``total`` steps of what ``start`` was told."""

    def update(self, n: int = 1) -> None:
        """``n`` more steps done (called from any thread)."""

    def close(self) -> None:
        """The call ended (done, failed or interrupted)."""


class ProgressDisplay(Protocol):
    """What ``stirgpu.config(progress=...)`` takes."""

    def start(self, total: int, desc: str, unit: str) -> ProgressTask:
        """A task of ``total`` steps (``unit``: "chunk", "subset", "subiteration") named ``desc``."""
        ...


def start_progress(total: int, desc: str, unit: str) -> ProgressTask | None:
    """The configured display's task for ``total`` steps, or None (no display, or nothing to count)."""
    display = get_config().progress
    if display is None or total <= 0:
        return None
    return display.start(int(total), desc, unit)


@contextlib.contextmanager
def progress_bar(total: int, desc: str, unit: str = "chunk") -> Iterator[Callable[[int], None] | None]:
    """Yields ``update(n)`` (thread-safe) while a task of ``total`` steps is reported, or ``None``
    when there is no display (:func:`start_progress`)."""
    task = start_progress(total, desc, unit)
    if task is None:
        yield None
        return
    try:
        yield task.update
    finally:
        task.close()
