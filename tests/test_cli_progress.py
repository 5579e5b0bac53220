"""Progress bars at the command line: drawn on standard error only when it is a terminal.

Real subprocesses on small simulated data (ECAT 953, span 3, 24 views, 64 tangential
positions), their standard error a pipe (``stirgpu ... 2>&1 | cat``, a log) or a
pseudo-terminal (what a user sees).  On a terminal ``osmaposl`` shows one bar for its
sensitivities and one for its subiterations, not one per projection inside them, and the lines
it prints while a bar is shown start lines of their own; ``--quiet`` shows none.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, TerminalStderr

from stirgpu.cli.progress import TerminalProgress, terminal_progress
from stirgpu.formats import ProjDataOnDisk, write_image
from stirgpu.parfile import osmaposl_par
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

SUBITERATIONS = 6


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """prompts.hs (+ acf, additive), image.hv and osem.par (3 subsets, 6 subiterations)."""
    d = tmp_path_factory.mktemp("progress")
    pdi, info = demo_geometry(num_views=24, num_tangential_poss=64)
    ph = demo_phantom(info)
    sim = simulate(ProjectorPair(backend="cpu"), pdi, info, ph.activity(info), ph.mu_map(info), counts=1e6, seed=5)
    for name, pd in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        ProjDataOnDisk.create(d / f"{name}.hs", pdi, fill=pd).close()
    write_image(d / "image.hv", sim.truth, info)
    return d


@pytest.fixture
def workdir(data_dir, tmp_path):
    for f in data_dir.iterdir():
        os.symlink(f, tmp_path / f.name)
    (tmp_path / "osem.par").write_text(
        osmaposl_par(
            "prompts.hs",
            normalisation="acf.hs",
            additive_sinogram="additive.hs",
            subset_sensitivity_filenames="sens_%d.hv",
            output_filename_prefix="osem",
            num_subsets=3,
            num_subiterations=SUBITERATIONS,
            save_interval=3,
        )
    )
    return tmp_path


COMMANDS = {
    "forward-project": ["forward-project", "fwd.hs", "image.hv", "prompts.hs"],
    "back-project": ["back-project", "back.hv", "prompts.hs"],
    "osmaposl": ["osmaposl", "osem.par"],
}


def _env() -> dict:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT)] + ([path] if path else []))}


def _run_on_terminal(args, cwd) -> str:
    """``stirgpu ARGS`` with standard output and standard error on one terminal, as a user runs
    it; returns what the terminal received."""
    terminal = TerminalStderr()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stirgpu.cli.main", *args, "--backend", "cpu"],
        cwd=cwd,
        env=_env(),
        stdout=terminal.slave,
        stderr=terminal.slave,
    )
    terminal.start()
    assert proc.wait(timeout=600) == 0, terminal.finish()
    return terminal.finish()


def _rendered_lines(transcript: str) -> list[str]:
    """Each line as a terminal leaves it: what follows its last carriage return (a bar redrawn in
    place is overwritten), trailing blanks and escape sequences (colour resets) removed."""
    lines = []
    for raw in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", transcript).split("\n"):
        parts = [p for p in raw.split("\r") if p.strip()]
        if parts:
            lines.append(parts[-1].rstrip())
    return lines


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_bars_into_a_pipe(workdir, command):
    """Standard error a pipe (a log, ``2>&1 | cat``): no bar, not even a carriage return, for
    every command that projects, without --quiet; standard error is empty."""
    run = subprocess.run(
        [sys.executable, "-m", "stirgpu.cli.main", *COMMANDS[command], "--backend", "cpu"],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == "" and "\r" not in run.stdout and "%|" not in run.stdout
    assert run.stdout.splitlines()[-1].startswith("wrote ")


def test_osmaposl_on_a_terminal_shows_its_sensitivities_and_subiterations(workdir):
    """On a terminal: a bar for the 3 subset sensitivities and one for the 6 subiterations, no
    chunk bar of the projections inside them; each subiteration's line (printed while the bar is
    shown) is a line of its own, never glued to a bar; the run's last line names the estimate."""
    transcript = _run_on_terminal(COMMANDS["osmaposl"], workdir)
    assert re.search(r"sensitivities: +\d+%\|.*\| \d/3 ", transcript), transcript
    assert re.search(rf"OSEM: +\d+%\|.*\| \d/{SUBITERATIONS} .*subiteration/s", transcript), transcript
    assert "chunk/s" not in transcript and "forward-back ratio:" not in transcript and "sensitivity:" not in transcript
    lines = _rendered_lines(transcript)
    reports = [ln for ln in lines if "(subset " in ln]
    assert len(reports) == SUBITERATIONS, lines
    assert all(re.fullmatch(r"  subiteration \d \(subset \d\): [\d.]+ s( -> osem_\d\.hv)?", ln) for ln in reports), (
        lines
    )
    assert lines[-1].startswith("wrote osem_6.hv"), lines


@pytest.mark.parametrize("command", ["forward-project", "osmaposl"])
def test_quiet_draws_no_bar_on_a_terminal(workdir, command):
    """--quiet: no bar on a terminal either (and the run's lines are unchanged)."""
    transcript = _run_on_terminal([*COMMANDS[command], "--quiet"], workdir)
    assert "%|" not in transcript and "it/s" not in transcript
    assert _rendered_lines(transcript)[-1].startswith("wrote ")


def test_a_lone_projection_shows_its_chunks_on_a_terminal(workdir):
    """forward-project on a terminal: one bar counting the projection's chunks."""
    transcript = _run_on_terminal(COMMANDS["forward-project"], workdir)
    assert re.search(r"forward projection: +\d+%\|.*chunk/s", transcript), transcript


def test_terminal_progress_shows_one_bar_at_a_time(capsys):
    """A task started while a bar is shown (a projection inside a subiteration) draws nothing and
    its steps reach no bar; once the outer bar is closed the next task has a bar again; say()
    prints its line on standard output with or without a bar shown."""
    screen = io.StringIO()
    display = TerminalProgress(file=screen)
    outer = display.start(4, "OSEM", "subiteration")
    inner = display.start(9, "forward projection", "chunk")
    inner.update(9)
    inner.close()
    display.say("  subiteration 1 (subset 0): 0.10 s")
    outer.update(1)
    outer.close()
    assert "OSEM" in screen.getvalue() and "forward projection" not in screen.getvalue()
    later = display.start(2, "back projection", "chunk")
    later.update(2)
    later.close()
    display.say("done")
    assert "back projection" in screen.getvalue()
    assert capsys.readouterr().out == "  subiteration 1 (subset 0): 0.10 s\ndone\n"


class _Stream(io.StringIO):
    def __init__(self, terminal: bool):
        super().__init__()
        self._terminal = terminal

    def isatty(self) -> bool:
        return self._terminal


@pytest.mark.parametrize(
    "quiet, terminal, shown", [(False, True, True), (True, True, False), (False, False, False), (True, False, False)]
)
def test_a_command_has_a_display_only_on_a_terminal_and_without_quiet(monkeypatch, quiet, terminal, shown):
    """terminal_progress: a display exactly when standard error is a terminal and --quiet is absent."""
    monkeypatch.setattr(sys, "stderr", _Stream(terminal))
    assert isinstance(terminal_progress(quiet), TerminalProgress) is shown
    assert (terminal_progress(quiet) is None) is not shown


@pytest.mark.slow
def test_demo_on_a_terminal_shows_its_sensitivities_and_subiterations(tmp_path):
    """The demo's OSEM, on a terminal: after the simulation (whose projections show their chunks),
    one bar for the 8 subset sensitivities and one for the 24 subiterations, no chunk bar, each
    subiteration's line a line of its own."""
    transcript = _run_on_terminal(["demo", "--output", str(tmp_path / "demo")], tmp_path)
    reconstruction = transcript[transcript.index("simulated ") :]
    assert re.search(r"sensitivities: +\d+%\|.*\| \d/8 ", reconstruction), transcript
    assert re.search(r"OSEM: +\d+%\|.*\| \d+/24 .*subiteration/s", reconstruction), transcript
    assert "chunk/s" not in reconstruction
    reports = [ln for ln in _rendered_lines(transcript) if "(subset " in ln]
    assert len(reports) == 24 and all(
        re.fullmatch(r"  subiteration +\d+ \(subset \d\): [\d.]+ s( -> osem_\d+\.hv)?", ln) for ln in reports
    ), reports
