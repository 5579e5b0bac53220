"""The notice of a machine's first run: the CPU kernels are being compiled, once.

numba compiles each kernel on its first call and stirgpu keeps the machine code in its cache
folder (``stirgpu/kernels/jit.py``), so a machine's first projection waits for the
compilation (about 10 s on two cores for the demo) and every later run loads the code.  So
that this wait does not look like a hang, the first compilation in a command prints one line
on standard error, and, on a terminal, a bar counts the kernels compiled (each named while it
compiles), removed when the compilation ends.  Runs whose kernels are all cached print
nothing; ``--quiet`` prints nothing; under MPI only rank 0 prints.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ..caches import cache_dir
from ..kernels.compiling import KernelCompilation, watching_compilations

__all__ = ["KERNEL_COMMANDS", "CompilationNotice", "compilation_notice", "notice_line"]

#: the subcommands that run CPU kernels (the others never load numba)
KERNEL_COMMANDS = ("forward-project", "back-project", "osmaposl", "ossps", "kosmaposl", "demo")


def notice_line(folder: Path) -> str:
    """The one line printed when the first kernel of a command starts compiling."""
    return f"stirgpu: compiling the CPU kernels once for this machine (cached in {_home_short(folder)}) ..."


def _home_short(folder: Path) -> str:
    home = Path.home()
    try:
        return os.path.join("~", folder.relative_to(home)) if folder.is_relative_to(home) else str(folder)
    except (RuntimeError, ValueError):  # (no home folder)
        return str(folder)


class CompilationNotice:
    """The observer of :func:`stirgpu.kernels.compiling.watching_compilations` that prints
    :func:`notice_line` once and, with ``bar``, a tqdm bar while kernels compile (kernels
    compile in the worker threads: a lock keeps the count)."""

    def __init__(self, stream: TextIO, bar: bool, folder: Path) -> None:
        self._stream = stream
        self._with_bar = bar
        self._folder = folder
        self._lock = threading.Lock()
        self.announced = False
        #: kernels compiled so far (nested ones included)
        self.compiled = 0
        self._running = 0  # outermost compilations in progress
        self._bar: Any = None  # (a tqdm bar, imported when the first one is drawn)

    def started(self, compilation: KernelCompilation) -> None:
        with self._lock:
            if not self.announced:
                self.announced = True
                self._say(notice_line(self._folder))
            if not compilation.nested:
                self._running += 1
            if self._with_bar:
                if self._bar is None:
                    from tqdm import tqdm

                    self._bar = tqdm(
                        desc="stirgpu",
                        bar_format="{desc}: {n_fmt} kernels compiled [{elapsed}{postfix}]",
                        initial=self.compiled,
                        leave=False,
                        file=self._stream,
                    )
                self._bar.set_postfix_str(f"now {compilation.name}", refresh=True)

    def _say(self, line: str) -> None:
        if self._with_bar:  # above any progress bar the command shows (tqdm redraws them below)
            from tqdm import tqdm

            tqdm.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def finished(self, compilation: KernelCompilation, seconds: float) -> None:
        with self._lock:
            self.compiled += 1
            if not compilation.nested:
                self._running -= 1
            if self._bar is not None:
                self._bar.update(1)
                if self._running == 0:  # (the command's own lines come next: no bar among them)
                    self._bar.close()
                    self._bar = None

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


@contextlib.contextmanager
def compilation_notice(command: str, quiet: bool, prints: bool, stream: TextIO | None = None) -> Iterator[None]:
    """While a command runs: :class:`CompilationNotice` on ``stream`` (standard error), for
    the :data:`KERNEL_COMMANDS`, unless ``quiet`` or this process does not print (``prints``:
    rank 0 under MPI); the bar only where the stream is a terminal."""
    if command not in KERNEL_COMMANDS or quiet or not prints:
        yield
        return
    stream = sys.stderr if stream is None else stream
    notice = CompilationNotice(stream, bar=stream.isatty(), folder=cache_dir())
    try:
        with watching_compilations(notice):
            yield
    finally:
        notice.close()
