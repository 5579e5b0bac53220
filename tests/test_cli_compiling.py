"""The notice of a machine's first run (``stirgpu/cli/compiling.py``): one line when a command
compiles CPU kernels, a bar only on a terminal, nothing with ``--quiet`` or a warm cache.

Real compilations keep these cheap: ``chunk_bin`` (a one-line kernel) called with integer
types no projection uses compiles in about 0.1 s, each type once per process; the command
line's own test compiles the forward projection's kernels once into an empty cache folder."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import forward_args, reference_results

from stirgpu.cli.compiling import compilation_notice, notice_line
from stirgpu.kernels.compiling import watching_compilations

REPO = Path(__file__).resolve().parent.parent


class Terminal(io.StringIO):
    """Standard error as a terminal (what decides whether a bar is drawn)."""

    def isatty(self) -> bool:
        return True


def compile_chunk_bin(dtype) -> None:
    """A real numba compilation of one of stirgpu's kernels (a new signature of ``chunk_bin``)."""
    from stirgpu.kernels.joseph.workers import chunk_bin

    chunk_bin(dtype(7), dtype(2), dtype(3))


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("STIRGPU_CACHE_DIR", str(folder))
    return folder


def test_compilation_prints_one_line_and_no_bar_off_a_terminal(empty_cache):
    """Standard error not a terminal (a log, a pipe): the one line, no bar characters."""
    err = io.StringIO()
    with compilation_notice("demo", quiet=False, prints=True, stream=err):
        compile_chunk_bin(np.int8)
        compile_chunk_bin(np.uint8)  # a second compilation: still one line
    assert err.getvalue() == notice_line(empty_cache) + "\n"
    assert "compiling the CPU kernels once for this machine" in err.getvalue()
    assert str(empty_cache) in err.getvalue()


def test_compilation_on_a_terminal_shows_a_bar_naming_the_kernel(empty_cache):
    err = Terminal()
    with compilation_notice("forward-project", quiet=False, prints=True, stream=err):
        compile_chunk_bin(np.int16)
    text = err.getvalue()
    assert text.count(notice_line(empty_cache)) == 1
    assert "kernels compiled" in text and "joseph.workers.chunk_bin" in text


@pytest.mark.parametrize(
    "command, quiet, prints, dtype",
    [("demo", True, True, np.uint16), ("osmaposl", False, False, np.int32), ("info", False, True, np.uint32)],
    ids=["quiet", "not-rank-0", "command-without-kernels"],
)
def test_no_notice_when_quiet_on_other_ranks_or_for_other_commands(empty_cache, command, quiet, prints, dtype):
    """(each case compiles a signature of its own, so that a compilation really happens)"""
    err = Terminal()
    with compilation_notice(command, quiet=quiet, prints=prints, stream=err):
        compile_chunk_bin(dtype)
    assert err.getvalue() == ""


def test_the_hook_reports_kernels_compiled_not_other_numba_functions(empty_cache):
    """``watching_compilations`` passes stirgpu's kernels only, with nesting and seconds."""
    from numba import njit

    seen = []

    class Observer:
        def started(self, compilation):
            seen.append(("started", compilation))

        def finished(self, compilation, seconds):
            assert seconds >= 0
            seen.append(("finished", compilation))

    with watching_compilations(Observer()):
        njit(lambda x: x + 1)(1)  # someone else's numba function
        compile_chunk_bin(np.uint64)
    assert [(what, c.name, c.nested) for what, c in seen] == [
        ("started", "joseph.workers.chunk_bin", False),
        ("finished", "joseph.workers.chunk_bin", False),
    ]


def _stirgpu(args, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "STIRGPU_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "stirgpu", *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_first_run_says_it_compiles_and_the_second_run_says_nothing(stir_fixtures, tmp_path):
    """The command line end to end, in fresh processes: a cold cache folder gives the one line
    (on standard error, never among the command's output), the warm one nothing."""
    ref = reference_results(stir_fixtures)
    cache = tmp_path / "cache"
    args = [a for a in forward_args(ref, tmp_path / "first.hs") if a != "--quiet"]
    first = _stirgpu(args, cache)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(notice_line(cache)) == 1
    assert "kernels compiled" not in first.stderr  # (no terminal: no bar)
    assert "compiling" not in first.stdout
    assert any(cache.rglob("*.nbi")), "the kernels were not cached"

    second = _stirgpu([a for a in forward_args(ref, tmp_path / "second.hs") if a != "--quiet"], cache)
    assert second.returncode == 0, second.stderr
    assert "compiling" not in second.stderr
