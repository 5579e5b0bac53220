"""Ctrl-C and killed runs at the command line.

* SIGINT during ``forward-project`` and ``osmaposl`` (real subprocesses, CPU backend): exit
  status 130, one line on stderr saying what was kept, no traceback, the existing output
  unchanged and no partial output, and the process gone within 3 s of the signal.  The
  inputs are large enough (the mMR's 72 million bins; 1000 OSEM subiterations) that the runs
  last far longer than that, and the tests wait for the run's first file rather than for a
  fixed time.  3 s is a behavioural bound (the call stops instead of finishing its chunks,
  ~0.4 s measured on two busy cores), not a speed test.
* Temporary files of a killed run (SIGKILL, a crash): the next run into the folder names them
  in one warning line with the ``rm`` command, only those whose process no longer runs, and
  never removes them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO_ROOT, TerminalStderr

from stirgpu.cli.main import main
from stirgpu.formats import ProjDataOnDisk, VoxelsOnCartesianGrid, read_image, stale_temporaries, write_image
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.parfile import osmaposl_par
from stirgpu.recon.simulate import demo_geometry

STOP_SECONDS = 3.0
TEMP = re.compile(r".+\.tmp-\d+-[0-9a-f]{8}")


def _env() -> dict:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT)] + ([path] if path else []))}


def _stirgpu(args, cwd, stderr=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "stirgpu.cli.main", *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def _wait_for(condition, proc, what: str, timeout: float = 120.0, stderr: TerminalStderr | None = None) -> None:
    """Poll until ``condition()`` (the run has reached its work) or fail if the run ends first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            err = stderr.finish() if stderr is not None else err
            pytest.fail(f"the run ended (status {proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()  # reaped: nothing of this test runs on into later ones
            pytest.fail(f"no {what} within {timeout} s")
        time.sleep(0.02)


def _interrupt(proc, stderr: TerminalStderr | None = None) -> tuple[float, str, str]:
    """SIGINT; returns (seconds until the process was gone, stdout, stderr)."""
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    try:
        if stderr is None:
            out, err = proc.communicate(timeout=60)
        else:
            proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()  # reaped: nothing of this test runs on into later ones
        pytest.fail("the run did not stop within 60 s of SIGINT")
    seconds = time.monotonic() - t0
    if stderr is not None:
        out, err = proc.stdout.read(), stderr.finish()
        proc.stdout.close()
    return seconds, out, err


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if TEMP.fullmatch(p.name))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """The mMR's geometry (span 11, 72 million bins: minutes of CPU forward projection) as a
    template, a uniform image, uniform data on it with views mashed by 3 (24 million bins to
    back project), and the CPU kernels compiled (a tiny projection in a subprocess: the
    first call's compilation must not count as stopping time)."""
    d = tmp_path_factory.mktemp("interrupt_big")
    pdi = ProjDataInfo.construct(
        Scanner.from_name("Siemens mMR"), 11, 60, num_views=252, num_tangential_poss=344, arc_corrected=False
    )
    info = ImageInfo.default_for(pdi)
    write_image(d / "image.hv", VoxelsOnCartesianGrid(info, fill=np.ones(info.shape, np.float32)))
    ProjDataOnDisk.create(d / "template.hs", pdi).close()  # (a sparse file of zeros)
    mashed = ProjDataInfo.construct(
        pdi.get_scanner(), 11, 60, num_views=84, num_tangential_poss=344, arc_corrected=False
    )
    ProjDataOnDisk.create(d / "ones.hs", mashed, fill=1.0).close()
    tiny_pdi = ProjDataInfo.construct(
        Scanner.from_name("ECAT 953"), 3, 2, num_views=8, num_tangential_poss=16, arc_corrected=False
    )
    tiny = ImageInfo.default_for(tiny_pdi, xy_size=17)
    write_image(d / "tiny.hv", VoxelsOnCartesianGrid(tiny, fill=np.ones(tiny.shape, np.float32)))
    ProjDataOnDisk.create(d / "tiny_template.hs", tiny_pdi).close()
    warm = subprocess.run(
        [
            sys.executable,
            "-m",
            "stirgpu.cli.main",
            "forward-project",
            "tiny_out.hs",
            "tiny.hv",
            "tiny_template.hs",
            "--backend",
            "cpu",
            "--quiet",
        ],
        cwd=d,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert warm.returncode == 0, warm.stderr
    return d


@pytest.mark.parametrize("existing", [False, True], ids=["new output", "existing output"])
@pytest.mark.parametrize("command", ["forward-project", "back-project"])
def test_sigint_during_projection(big, tmp_path, command, existing):
    """Interrupted once its progress bar shows (the pipeline has started its chunks).  A new
    output is named without extension: the line names the header STIR's naming gives it."""
    header, data = (".hs", ".s") if command == "forward-project" else (".hv", ".v")
    out = tmp_path / f"out{header}"
    name = str(out) if existing else str(tmp_path / "out")
    if command == "forward-project":
        args = [command, name, str(big / "image.hv"), str(big / "template.hs")]
        operation = "forward projection"
    else:
        args = [command, name, str(big / "ones.hs")]
        operation = "back projection"
    args += ["--backend", "cpu", "--memory-budget", "256M"]
    if existing:  # --overwrite of an earlier output: it must survive the interrupt byte for byte
        out.write_text("an earlier header\n")
        out.with_suffix(data).write_bytes(b"earlier data")
        args.append("--overwrite")
    # standard error a terminal: the progress bar is drawn (never into a pipe)
    terminal = TerminalStderr()
    proc = _stirgpu(args, tmp_path, stderr=terminal.slave)
    stderr = terminal.start()
    _wait_for(lambda: f"{operation}:" in stderr.text, proc, "the progress bar", stderr=stderr)
    assert _temps(tmp_path) or command == "back-project"  # (an image is written at the end only)
    seconds, _, err = _interrupt(proc, stderr)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    # the bar's states (carriage returns, cleared at the end), then the one line
    lines = [ln.strip() for ln in re.split(r"[\r\n]", err) if ln.strip()]
    assert all(ln.startswith(f"{operation}:") for ln in lines[:-1]) and err.endswith("\n"), err
    if existing:
        assert lines[-1] == f"stirgpu {command}: interrupted: nothing written; the existing {out} is unchanged"
        assert out.read_text() == "an earlier header\n" and out.with_suffix(data).read_bytes() == b"earlier data"
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, out.with_suffix(data).name])
    else:
        assert lines[-1] == f"stirgpu {command}: interrupted: nothing written ({out} was not created)"
        assert list(tmp_path.iterdir()) == []  # no partial output, no temporary file
    assert seconds < STOP_SECONDS


@pytest.fixture(scope="module")
def recon_data(tmp_path_factory):
    """Uniform prompts on the demo's default geometry: a subiteration takes a fraction of a
    second, so a run of 1000 is still running when the test interrupts it."""
    d = tmp_path_factory.mktemp("interrupt_recon")
    pdi, _ = demo_geometry()
    ProjDataOnDisk.create(d / "prompts.hs", pdi, fill=1.0).close()
    return d


def _recon_dir(recon_data, tmp_path, prefix, subiterations) -> Path:
    for f in recon_data.iterdir():
        os.symlink(f, tmp_path / f.name)
    (tmp_path / "osem.par").write_text(
        osmaposl_par("prompts.hs", output_filename_prefix=prefix, num_subsets=4, num_subiterations=subiterations)
    )
    return tmp_path


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_sigint_during_osmaposl(recon_data, tmp_path, backend):
    """The estimates written before the interrupt are named as complete (and are), the one in
    progress is absent, the line says how to continue; on a GPU too (the all-direct path, whose
    first lane runs in the calling thread)."""
    d = _recon_dir(recon_data, tmp_path, "osem", 1000)
    proc = _stirgpu(["osmaposl", "osem.par", "--backend", backend, "--quiet"], d)
    _wait_for(lambda: (d / "osem_2.hv").exists(), proc, "the second estimate")
    seconds, out, err = _interrupt(proc)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    m = re.fullmatch(
        r"stirgpu osmaposl: interrupted: stopped in subiteration (\d+): estimates up to "
        r"subiteration (\d+) are complete \((.+)\); to continue: 'initial estimate := (.+)' and "
        r"'start at subiteration number := (\d+)'",
        lines[0],
    )
    assert m, lines[0]
    stopped, done, files, last, restart = int(m[1]), int(m[2]), m[3], Path(m[4]), int(m[5])
    assert done >= 2 and stopped == restart == done + 1
    assert last == d / f"osem_{done}.hv" and str(d / "osem_1.hv") in files and str(last) in files
    assert read_image(last).array.max() > 0  # complete and readable
    assert not (d / f"osem_{stopped}.hv").exists() and _temps(d) == []
    assert seconds < STOP_SECONDS


def _dead_pid() -> int:
    """The id of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_stale_temporaries_of_dead_processes_only(tmp_path):
    dead = tmp_path / f"out.s.tmp-{_dead_pid()}-0123abcd"
    live = tmp_path / f"other.hv.tmp-{os.getpid()}-89abcdef"
    unrelated = tmp_path / "notes.tmp-12-xyz"
    for p in (dead, live, unrelated):
        p.write_bytes(b"x")
    assert stale_temporaries(tmp_path) == [dead]
    assert stale_temporaries(tmp_path / "missing") == []


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="zombies are seen through Linux's /proc")
def test_a_killed_writer_not_yet_reaped_counts_as_dead(tmp_path):
    """A process that has exited but whose parent has not collected it (a zombie) still answers
    signal 0; its temporaries are stale all the same."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        tmp = tmp_path / f"out.hv.tmp-{p.pid}-0123abcd"
        tmp.write_bytes(b"x")
        assert stale_temporaries(tmp_path) == [tmp]
    finally:
        p.wait()


def test_next_run_names_leftovers_and_keeps_them(tmp_path, capsys):
    """One warning line with the rm command for the dead process's temporary, none for the live
    one's; nothing is removed; the command then runs (here: fails on its missing inputs)."""
    dead = tmp_path / f"out.s.tmp-{_dead_pid()}-0123abcd"
    live = tmp_path / f"out.hs.tmp-{os.getpid()}-89abcdef"
    for p in (dead, live):
        p.write_bytes(b"x")
    code = main(
        [
            "forward-project",
            str(tmp_path / "out.hs"),
            str(tmp_path / "missing.hv"),
            str(tmp_path / "template.hs"),
            "--backend",
            "cpu",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[0] == (
        f"stirgpu forward-project: warning: a temporary file left by a killed run (its process no "
        f"longer runs); remove with: rm -- {dead}"
    )
    assert len(err) == 2 and err[1].startswith("stirgpu forward-project: error: ") and live.name not in "".join(err)
    assert dead.exists() and live.exists()


def test_sigkill_leftovers_are_reported_by_the_next_run(big, tmp_path, capsys):
    """A forward projection killed outright leaves its temporary data file; the next run into
    the folder names it (with the rm command) and leaves it."""
    proc = _stirgpu(
        ["forward-project", "out.hs", str(big / "image.hv"), str(big / "template.hs"), "--backend", "cpu", "--quiet"],
        tmp_path,
    )
    _wait_for(lambda: _temps(tmp_path), proc, "the output's temporary file")
    proc.kill()
    proc.communicate()
    left = _temps(tmp_path)
    assert len(left) == 1 and left[0].startswith(f"out.s.tmp-{proc.pid}-")
    assert (
        main(
            [
                "forward-project",
                str(tmp_path / "out.hs"),
                str(tmp_path / "missing.hv"),
                str(big / "template.hs"),
                "--backend",
                "cpu",
                "--quiet",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"remove with: rm -- {tmp_path / left[0]}" in err.splitlines()[0]
    assert _temps(tmp_path) == left


def test_osmaposl_names_leftovers_in_its_output_folder(recon_data, tmp_path, capsys, monkeypatch):
    """osmaposl looks in the folders its parameter file writes into (here the prefix's)."""
    d = _recon_dir(recon_data, tmp_path, "results/osem", 1)
    (d / "results").mkdir()
    dead = d / "results" / f"osem_1.v.tmp-{_dead_pid()}-0123abcd"
    dead.write_bytes(b"x")
    monkeypatch.chdir(d)
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"stirgpu osmaposl: warning: a temporary file left by a killed run (its process no longer "
        f"runs); remove with: rm -- {dead}"
    ]
    assert dead.exists() and (d / "results" / "osem_1.hv").exists()


def _interrupt_at(monkeypatch, owner, name, when=lambda *a, **k: True):
    """Make ``owner.name`` raise KeyboardInterrupt (in this process: as Ctrl-C would) when
    ``when(*args)`` holds."""
    original = getattr(owner, name)

    def interrupted(*args, **kw):
        if when(*args, **kw):
            raise KeyboardInterrupt
        return original(*args, **kw)

    monkeypatch.setattr(owner, name, interrupted)


@pytest.mark.parametrize(
    "where, message",
    [
        ("sensitivities", "no estimate written: the run stopped while computing the sensitivities"),
        ("subiteration 1", "stopped in subiteration 1: no estimate written yet (the first after subiteration 2)"),
    ],
)
def test_osmaposl_interrupted_before_any_estimate(recon_data, tmp_path, capsys, monkeypatch, where, message):
    from stirgpu.recon.osem import OSEM
    from stirgpu.recon.sensitivity import Sensitivities

    d = _recon_dir(recon_data, tmp_path, "osem", 4)
    (d / "osem.par").write_text((d / "osem.par").read_text().replace("intervals := 1", "intervals := 2"))
    monkeypatch.chdir(d)
    if where == "sensitivities":
        _interrupt_at(monkeypatch, Sensitivities, "compute")
    else:
        _interrupt_at(monkeypatch, OSEM, "update", lambda self, image, n: n == 1)
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 130
    assert capsys.readouterr().err.splitlines() == [f"stirgpu osmaposl: interrupted: {message}"]
    assert not list(d.glob("osem_*")) and _temps(d) == []


def test_demo_interrupted_while_simulating(tmp_path, capsys, monkeypatch):
    """The line names the inputs the simulation had written (each complete) before Ctrl-C."""
    from stirgpu.cli import demo
    from stirgpu.formats import ProjDataInMemory, ProjDataOnDisk

    def simulating(out, projector, s=None, overwrite=False):
        pdi, _ = demo_geometry(num_views=8, num_tangential_poss=16)
        ProjDataOnDisk.create(out / "prompts.hs", pdi, fill=ProjDataInMemory(pdi)).close()
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "write_demo_inputs", simulating)
    out = tmp_path / "demo"
    assert main(["demo", "--output", str(out), "--backend", "cpu", "--quiet"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        f"stirgpu demo: interrupted: stopped while simulating the data; new inputs in {out}: prompts.hs, prompts.s"
    ]
