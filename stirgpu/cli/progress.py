"""Progress bars of the commands: tqdm on standard error, only where it is a terminal.

:func:`terminal_progress` gives a command its display (``stirgpu.config(progress=...)``, see
``stirgpu.execution.progress``): none with ``--quiet`` or when standard error is a file or a
pipe (``stirgpu ... 2>&1 | cat``, a log), where bars would be lines of carriage returns.
:class:`TerminalProgress` shows one bar at a time: the outermost call's, so an OSEM run shows
its subiterations and, before them, its sensitivities, not the chunks of every projection
inside them; a lone projection shows its chunks.  Lines a command prints while a bar is shown
go through :meth:`TerminalProgress.say` (``tqdm.write``: the bar is cleared, the line printed,
the bar drawn again below it).
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

__all__ = ["TerminalProgress", "terminal_progress", "say_function"]


class TerminalProgress:
    """A progress display drawing tqdm bars on ``file`` (standard error), one at a time: a task
    started while a bar is shown (a projection inside an OSEM subiteration) is counted by no bar."""

    def __init__(self, file: TextIO | None = None):
        self._file = file
        self._lock = threading.Lock()
        self._shown: _Bar | None = None

    def start(self, total: int, desc: str, unit: str):
        with self._lock:
            if self._shown is not None:
                return _Unshown()
            from tqdm import tqdm

            bar = tqdm(
                total=int(total),
                desc=desc,
                unit=unit,
                leave=False,
                file=self._file if self._file is not None else sys.stderr,
                dynamic_ncols=True,
            )
            self._shown = _Bar(self, bar)
            return self._shown

    def _closed(self, bar: _Bar) -> None:
        with self._lock:
            if self._shown is bar:
                self._shown = None

    def say(self, text: str) -> None:
        """Print ``text`` on standard output without breaking the bar shown (if any)."""
        if self._shown is None:
            print(text)
            return
        from tqdm import tqdm

        tqdm.write(text, file=sys.stdout)


class _Bar:
    """The task of the bar shown."""

    def __init__(self, owner: TerminalProgress, bar):
        self._owner = owner
        self._bar = bar

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def close(self) -> None:
        self._bar.close()
        self._owner._closed(self)


class _Unshown:
    """A task nested in the one shown: counted by no bar."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def terminal_progress(quiet: bool) -> TerminalProgress | None:
    """The display of a command: bars unless ``--quiet`` or standard error is not a terminal."""
    if quiet or not sys.stderr.isatty():
        return None
    return TerminalProgress()


def say_function(display: TerminalProgress | None):
    """How a command prints its lines while ``display``'s bars may be shown: ``display.say``, or
    ``print`` without a display."""
    return print if display is None else display.say
