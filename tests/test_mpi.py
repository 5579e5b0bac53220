"""MPI (stirgpu.distributed): ``mpiexec -n 1/2/3`` (oversubscribed on CI's 2 cores) against one
process without MPI -- the library (projections, OSEM, the SIRF-style model; TOF data; OSMAPOSL
with priors) and the command line (forward-project, back-project, osmaposl; on TOF data, with a
prior) -- and the faults: a failing rank, a rank that runs out of memory between two steps, Ctrl-C.

Agreement: forward projections bit for bit (each bin is computed by one rank, as without MPI),
sums over ranks (back projections, OSEM) within 1e-5 of the maximum (float32 summation order).
The tests need mpi4py and an ``mpiexec`` (the ``mpi`` extra installs both: MPICH's wheel); where
either is missing they skip, saying which.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO_ROOT

from stirgpu.formats import ProjDataInMemory, ProjDataOnDisk, read_image, write_image
from stirgpu.formats.image import VoxelsOnCartesianGrid
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info
from stirgpu.parfile import osmaposl_par
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
#: sums over ranks: float32 summation order
SUM_TOLERANCE = 1e-5
RUN_SECONDS = 300


@pytest.fixture(scope="module")
def launcher():
    """(the mpiexec command line up to the program, its environment) -- skips without mpi4py or
    an mpiexec."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("MPI tests need mpi4py: install the 'mpi' extra (pip install -e '.[test,mpi]')")
    beside = [Path(sys.executable).parent / n for n in ("mpiexec", "mpirun")]
    found = next((str(p) for p in beside if p.is_file()), None) or shutil.which("mpiexec") or shutil.which("mpirun")
    if found is None:
        pytest.skip("MPI tests need an mpiexec or mpirun: install the 'mpi' extra (MPICH's wheel brings one)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(HERE)]))
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60).stdout
    args = [found]
    if "Open MPI" in version or "OpenRTE" in version:  # (MPICH runs as root and oversubscribes as it is)
        args.append("--oversubscribe")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return args, env


def _mpi(launcher, blocks, cwd, timeout=RUN_SECONDS):
    """Run MPMD ``blocks`` ([(ranks, argv)]) under mpiexec; the CompletedProcess."""
    args, env = launcher
    cmd = list(args)
    for i, (n, argv) in enumerate(blocks):
        cmd += ([":"] if i else []) + ["-n", str(n), *argv]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _plain(launcher, argv, cwd):
    """The same program without MPI (no launcher)."""
    return subprocess.run(argv, cwd=cwd, env=launcher[1], capture_output=True, text=True, timeout=RUN_SECONDS)


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def _close(got, want, what):
    scale = float(np.max(np.abs(want)))
    err = float(np.max(np.abs(got - want))) / scale
    assert err <= SUM_TOLERANCE, f"{what}: max difference {err:.2e} of the maximum"


STIRGPU = [sys.executable, "-m", "stirgpu"]


# -- the library --------------------------------------------------------------------------------
def _script(name: str, out: Path) -> list[str]:
    """The command line of tests/mpi/``name`` writing into ``out``."""
    return [sys.executable, str(HERE / "mpi" / name), str(out)]


def _reference(launcher, tmp_path_factory, name: str) -> Path:
    """The folder of tests/mpi/``name``'s results without MPI (one process: ``rank0.npz``)."""
    out = tmp_path_factory.mktemp(f"{Path(name).stem}_no_mpi")
    _ok(_plain(launcher, _script(name, out), out))
    return out


def _rank_results(launcher, name: str, out: Path, ranks: int) -> list:
    """Each rank's results of tests/mpi/``name`` under mpiexec with ``ranks`` ranks, each of
    which must have counted them all."""
    _ok(_mpi(launcher, [(ranks, _script(name, out))], out))
    results = [np.load(out / f"rank{rank}.npz") for rank in range(ranks)]
    for rank, got in enumerate(results):
        assert int(got["ranks"]) == ranks, f"rank {rank}"
    return results


def _assert_same_projections(got, want, what: str, prefix: str = "") -> None:
    """tests/helpers.py's ``projection_results`` (names after ``prefix``) of a rank against one
    process: forward projections bit for bit, sums over ranks to float32 summation order."""
    for name in ("forward", "forward_subset"):
        assert np.array_equal(got[prefix + name], want[prefix + name]), f"{what}: {prefix}{name} differs"
    for name in ("back", "ratio"):
        _close(got[prefix + name], want[prefix + name], f"{what}: {prefix}{name}")
    assert float(got[prefix + "loglik"]) == pytest.approx(float(want[prefix + "loglik"]), rel=1e-9)


@pytest.fixture(scope="module")
def library_reference(launcher, tmp_path_factory):
    return _reference(launcher, tmp_path_factory, "projections.py")


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_library_results_equal_one_process(launcher, library_reference, tmp_path, ranks):
    want = np.load(library_reference / "rank0.npz")
    for rank, got in enumerate(_rank_results(launcher, "projections.py", tmp_path, ranks)):
        # every rank holds the whole result; the node's ranks split its default host memory
        # budget (one process keeps the default)
        assert int(got["ranks_on_this_node"]) == ranks and bool(got["host_budget_set"]) == (ranks > 1)
        _assert_same_projections(got, want, f"rank {rank}")
        assert np.array_equal(got["sirf_forward"], want["sirf_forward"]), f"rank {rank}: sirf_forward differs"
        for name in ("back_subset", "osem", "sirf_backward"):
            _close(got[name], want[name], f"rank {rank}: {name}")
    for n in (2, 4):  # written once (rank 0), the same image
        _close(
            read_image(tmp_path / f"osem_{n}.hv").array, read_image(library_reference / f"osem_{n}.hv").array, "file"
        )
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp-" in p.name) == []


@pytest.fixture(scope="module")
def tof_and_priors_reference(launcher, tmp_path_factory):
    return _reference(launcher, tmp_path_factory, "tof_and_priors.py")


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_tof_and_priors_equal_one_process(launcher, tof_and_priors_reference, tmp_path, ranks):
    """TOF data (forward into memory with all timing positions, back, the fused ratio, OSEM, OSL)
    and OSMAPOSL with a prior: every rank holds the results of one process; the shares count TOF
    bins; the prior's gradient is each rank's own, on the whole estimate (not summed over the
    ranks), and rank 0 alone writes its files."""
    ref = tof_and_priors_reference
    want = np.load(ref / "rank0.npz")
    shares = []
    for rank, got in enumerate(_rank_results(launcher, "tof_and_priors.py", tmp_path, ranks)):
        _assert_same_projections(got, want, f"rank {rank}", prefix="tof_")
        for name in ("tof_osem", "tof_osl", "osl", "prior_gradient"):
            _close(got[name], want[name], f"rank {rank}: {name}")
        for name in ("tof_osl_penalty", "osl_penalty", "osl_objective"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=f"rank {rank}: {name}")
        written = got["gradient_files"].tolist()
        assert written == (want["gradient_files"].tolist() if rank == 0 else []), f"rank {rank} wrote {written}"
        shares.append(int(got["tof_share_bins"]))
    assert sum(shares) == int(want["tof_share_bins"])  # every TOF bin of the subset once
    assert max(shares) - min(shares) <= 36 * 31 * 13  # (the largest viewgram: 36 x 31 x 13 TOF bins)
    for name in ["osl_2.hv", "osl_4.hv"] + [f"grad_{n}.hv" for n in (2, 3, 4)]:
        _close(read_image(tmp_path / name).array, read_image(ref / name).array, name)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".hv") == sorted(
        p.name for p in ref.iterdir() if p.suffix == ".hv"
    )


@pytest.mark.parametrize("ranks", [1, 3])
def test_image_sums_take_the_device_path_only_where_every_rank_can(launcher, tmp_path, ranks):
    """``sum_image`` under mpiexec (tests/mpi/image_sums.py; "device" images are host memory
    behind ``__cuda_array_interface__``): host images through host memory; device images through
    host staging where this MPI says it is not CUDA-aware (MPICH's MPIX_Query_cuda_support() = 0)
    or STIRGPU_MPI_CUDA_AWARE=0, on the device (the buffer itself, float32, after the GPU's work)
    with =1 -- and through the host on every rank when one rank cannot; the same sums every way."""
    _ok(_mpi(launcher, [(ranks, _script("image_sums.py", tmp_path))], tmp_path))
    voxels = 3 * 50 * 137
    staged = {"path": None, "sent": 8 * voxels, "synchronized": 0}
    want = {
        "host": {**staged, "path": "in host memory", "synchronized": None},
        "device, MPI not CUDA-aware": {**staged, "path": "through host staging (MPIX_Query_cuda_support() = 0)"},
        "device, told it is not": {**staged, "path": "through host staging (STIRGPU_MPI_CUDA_AWARE=0)"},
        "device, told it is": {
            "path": "on the GPUs (CUDA-aware MPI: STIRGPU_MPI_CUDA_AWARE=1)",
            "sent": 4 * voxels,
            "synchronized": 1,
        },
    }
    if ranks > 1:
        another = "through host staging (another rank's image is in host memory or its MPI is not CUDA-aware)"
        want["device, told it is on rank 0 alone"] = {**staged, "path": another}
        want["device on rank 0 alone, told it is"] = {**staged, "path": another}
    for rank in range(ranks):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["mpix_query_cuda_support"] == 0
        for name, expected in want.items():
            case = got["cases"][name]
            if ranks == 1:  # one rank: nothing to sum, nothing said
                assert (case["path"], case["sent"], case["error"]) == ("", 0, 0.0), (rank, name)
                continue
            if rank > 0 and name == "device, told it is on rank 0 alone":  # (the others were told 0)
                expected = {**expected, "path": "through host staging (STIRGPU_MPI_CUDA_AWARE=0)"}
            if rank > 0 and name == "device on rank 0 alone, told it is":  # (the others hold host images)
                expected = {**expected, "path": "in host memory", "synchronized": None}
            assert {k: case[k] for k in expected} == expected, (rank, name)
            assert case["error"] == 0.0 and case["equal_on_every_rank"], (rank, name)
            assert case["refused"] is None, (rank, name)
        if ranks > 1:  # a bad STIRGPU_MPI_CUDA_AWARE on rank 1: refused there after the sum, through the host
            case = got["cases"]["device, a bad word on rank 1"]
            assert case["error"] == 0.0 and case["equal_on_every_rank"], rank
            if rank == 1:
                assert (
                    case["refused"]
                    == "STIRGPU_MPI_CUDA_AWARE='yes': must be 1 (the MPI is CUDA-aware) or 0 (it is not)"
                )
                assert case["path"].startswith("through host staging (STIRGPU_MPI_CUDA_AWARE='yes': must be")
            else:
                assert case["refused"] is None and case["path"] == another, rank


# -- the command line -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """Simulated data (prompts, additive, normalisation), the activity image and an OSMAPOSL file."""
    d = tmp_path_factory.mktemp("mpi_scan")
    pdi, info = demo_geometry(num_views=24, num_tangential_poss=64)
    ph = demo_phantom(info)
    sim = simulate(ProjectorPair(backend="cpu"), pdi, info, ph.activity(info), ph.mu_map(info), counts=1e6, seed=5)
    for name, pd in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        ProjDataOnDisk.create(d / f"{name}.hs", pdi, fill=pd).close()
    write_image(d / "image.hv", VoxelsOnCartesianGrid(info, fill=ph.activity(info)))
    return d


def _workdir(scan, path: Path, par_lines: dict | None = None, par: bool = True) -> Path:
    """``path`` with links to ``scan``'s files (and, with ``par``, an OSMAPOSL file ``osem.par``)."""
    for f in scan.iterdir():
        os.symlink(f, path / f.name)
    if not par:
        return path
    (path / "osem.par").write_text(
        osmaposl_par(
            "prompts.hs",
            normalisation="acf.hs",
            additive_sinogram="additive.hs",
            subset_sensitivity_filenames="sens_%d.hv",
            output_filename_prefix="osem",
            num_subsets=3,
            **(par_lines or {"num_subiterations": 3, "save_interval": 3}),
        )
    )
    return path


@pytest.fixture(scope="module")
def cli_reference(launcher, scan, tmp_path_factory):
    d = _workdir(scan, tmp_path_factory.mktemp("cli_no_mpi"))
    _ok(_plain(launcher, STIRGPU + ["forward-project", "fwd.hs", "image.hv", "prompts.hs", "--backend", "cpu"], d))
    _ok(_plain(launcher, STIRGPU + ["back-project", "back.hv", "prompts.hs", "--subset", "1/3", "--backend", "cpu"], d))
    _ok(_plain(launcher, STIRGPU + ["osmaposl", "osem.par", "--backend", "cpu"], d))
    return d


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_forward_project_files_are_bit_identical(launcher, scan, cli_reference, tmp_path, ranks):
    d = _workdir(scan, tmp_path)
    proc = _ok(_mpi(launcher, [(ranks, STIRGPU + ["forward-project", "fwd.hs", "image.hv", "prompts.hs"])], d))
    assert f"on {ranks} MPI rank" in proc.stdout.splitlines()[-1]
    assert (d / "fwd.s").read_bytes() == (cli_reference / "fwd.s").read_bytes()
    assert (d / "fwd.hs").read_text() == (cli_reference / "fwd.hs").read_text()
    assert [p.name for p in d.iterdir() if ".tmp-" in p.name] == []


def test_back_project_and_osmaposl_on_two_ranks(launcher, scan, cli_reference, tmp_path):
    d = _workdir(scan, tmp_path)
    back = ["back-project", "back.hv", "prompts.hs", "--subset", "1/3", "--backend", "cpu"]
    out = _ok(_mpi(launcher, [(2, STIRGPU + back)], d)).stdout
    assert "on 2 MPI ranks (the image summed in host memory)" in out  # (which path the sum took)
    _close(read_image(d / "back.hv").array, read_image(cli_reference / "back.hv").array, "back-project")
    proc = _ok(_mpi(launcher, [(2, STIRGPU + ["osmaposl", "osem.par", "--backend", "cpu"])], d))
    first, done = proc.stdout.splitlines()[0], [line for line in proc.stdout.splitlines() if line.startswith("done")]
    assert first.endswith("on 2 MPI ranks") and done and done[0].endswith("on 2 MPI ranks"), proc.stdout
    assert proc.stdout.count("subiteration 1 ") == 1  # rank 0 alone prints
    assert "\nMPI: images summed over the ranks in host memory\n" in proc.stdout
    for name in ("osem_3.hv", "sens_0.hv", "sens_2.hv"):
        _close(read_image(d / name).array, read_image(cli_reference / name).array, name)


@pytest.fixture(scope="module")
def tof_scan(tmp_path_factory):
    """TOF data (GE Discovery MI, 3 segments, 6 views, 13 TOF bins): prompts, a template, the image,
    and an OSMAPOSL file with a Quadratic prior that writes its gradients."""
    d = tmp_path_factory.mktemp("mpi_tof_scan")
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 6, 31, tof_mash_factor=29)
    info = stir_default_image_info(pdi)
    rng = np.random.default_rng(3)
    image = rng.uniform(0.5, 1.5, info.shape).astype(np.float32)
    write_image(d / "image.hv", VoxelsOnCartesianGrid(info, fill=image))
    ProjDataOnDisk.create(d / "template.hs", pdi, fill=0.0).close()
    mean = ProjDataInMemory(pdi)
    ProjectorPair(backend="cpu").forward_project(mean, VoxelsOnCartesianGrid(info, fill=image))
    prompts = rng.poisson(5 * mean.as_array() + 0.5).astype(np.float32)
    ProjDataOnDisk.create(d / "prompts.hs", pdi, fill=prompts).close()
    prior = (
        "  prior type := Quadratic\n  Quadratic Prior Parameters :=\n    penalisation factor := 0.1\n"
        "    gradient filename prefix := grad_\n  END Quadratic Prior Parameters :=\n"
    )
    par = osmaposl_par(
        "prompts.hs",
        subset_sensitivity_filenames="sens_%d.hv",
        output_filename_prefix="osl",
        num_subsets=3,
        num_subiterations=3,
        save_interval=3,
    )
    (d / "osl.par").write_text(par.replace("  recompute sensitivity := 1\n", "  recompute sensitivity := 1\n" + prior))
    return d


TOF_FORWARD = ["forward-project", "fwd.hs", "image.hv", "template.hs", "--backend", "cpu"]
TOF_OSL = ["osmaposl", "osl.par", "--backend", "cpu"]


@pytest.fixture(scope="module")
def tof_cli_reference(launcher, tof_scan, tmp_path_factory):
    d = _workdir(tof_scan, tmp_path_factory.mktemp("tof_cli_no_mpi"), par=False)
    _ok(_plain(launcher, STIRGPU + TOF_FORWARD, d))
    _ok(_plain(launcher, STIRGPU + TOF_OSL, d))
    return d


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_tof_forward_project_files_are_bit_identical(launcher, tof_scan, tof_cli_reference, tmp_path, ranks):
    """The ranks write their shares of every timing position into one file (STIR's order, TOF
    outermost): the same bytes as one process."""
    d = _workdir(tof_scan, tmp_path, par=False)
    assert f"on {ranks} MPI rank" in _ok(_mpi(launcher, [(ranks, STIRGPU + TOF_FORWARD)], d)).stdout
    assert (d / "fwd.s").read_bytes() == (tof_cli_reference / "fwd.s").read_bytes()
    assert (d / "fwd.hs").read_text() == (tof_cli_reference / "fwd.hs").read_text()
    assert [p.name for p in d.iterdir() if ".tmp-" in p.name] == []


def test_tof_osmaposl_with_a_prior_on_three_ranks(launcher, tof_scan, tof_cli_reference, tmp_path):
    d = _workdir(tof_scan, tmp_path, par=False)
    proc = _ok(_mpi(launcher, [(3, STIRGPU + TOF_OSL)], d))
    assert [line for line in proc.stdout.splitlines() if line.startswith("done")][0].endswith("on 3 MPI ranks")
    names = ["osl_3.hv", "sens_0.hv", "sens_2.hv", "grad_2.hv", "grad_3.hv"]
    for name in names:
        _close(read_image(d / name).array, read_image(tof_cli_reference / name).array, name)
    assert not read_image(d / "grad_1.hv").array.any()  # (the uniform initial image: no gradient)
    made = sorted(p.name for p in d.iterdir() if not p.is_symlink())
    want = sorted(p.name for p in tof_cli_reference.iterdir() if not p.is_symlink() and p.stem != "fwd")
    assert made == want


# -- faults ---------------------------------------------------------------------------------------
def test_a_failing_rank_fails_every_rank_with_one_message_and_no_output(launcher, scan, tmp_path):
    """Rank 1 alone cannot plan its share (a host memory budget far too small for one viewgram):
    it fails inside the forward projection while ranks 0 and 2 finish theirs."""
    d = _workdir(scan, tmp_path)
    argv = STIRGPU + ["forward-project", "fwd.hs", "image.hv", "prompts.hs", "--quiet"]
    t0 = time.monotonic()
    proc = _mpi(launcher, [(1, argv), (1, argv + ["--memory-budget", "1K"]), (1, argv)], d)
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stirgpu")]
    assert len(lines) == 1, proc.stderr
    assert "rank 1 of 3 MPI ranks failed (forward projection): not even one viewgram fits" in lines[0]
    assert sorted(p.name for p in d.iterdir() if p.name.startswith("fwd")) == []  # nothing, not even a temporary


def test_a_rank_out_of_memory_between_steps_ends_every_rank(launcher, scan, tmp_path):
    """Rank 1 raises MemoryError outside any step the ranks take together (tests/mpi/crashing_rank.py):
    it names itself and the cause, and ends every rank; no estimate is written."""
    d = _workdir(scan, tmp_path, {"num_subiterations": 3, "save_interval": 1})
    argv = [
        sys.executable,
        str(HERE / "mpi" / "crashing_rank.py"),
        "1",
        "2",
        "osmaposl",
        "osem.par",
        "--backend",
        "cpu",
    ]
    t0 = time.monotonic()
    proc = _mpi(launcher, [(3, argv)], d)
    assert time.monotonic() - t0 < 60
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stirgpu")]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "stirgpu osmaposl: rank 1 of 3 MPI ranks: error: out of memory (MemoryError: cannot allocate the update image"
    ), proc.stderr
    assert (d / "osem_1.hv").is_file() and not (d / "osem_2.hv").exists() and not (d / "osem_3.hv").exists()


def _interrupt_osmaposl(launcher, workdir: Path) -> tuple[subprocess.Popen, str, str, float]:
    """Start ``stirgpu osmaposl`` on 3 ranks, press Ctrl-C in subiteration 2 (SIGINT to the
    launcher's process group, as a terminal does; the launcher forwards it to the ranks); the
    ended process, its remaining stdout and its stderr, and the seconds it took to end."""
    args, env = launcher
    env = dict(env, PYTHONFAULTHANDLER="1")  # (a rank that crashes says so on stderr)
    cmd = args + ["-n", "3", *STIRGPU, "osmaposl", "osem.par", "--backend", "cpu"]
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "subiteration 2 " in line:
                break
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        return proc, out, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_ctrl_c_ends_every_rank(launcher, scan, tmp_path, capsys):
    """Ctrl-C under mpiexec: every rank stops within seconds, rank 0 says where, nothing of the
    run's outputs is left half-written.

    Once (a CI run) MPICH's launcher ended at once with nothing at all on stderr -- not even
    the "application called MPI_Abort" line every rank's abort prints -- which 120 runs here,
    some under CPU load, never repeated.  A rank that crashes prints its stack (faulthandler),
    and one whose interrupt is lost is ended by the others' MPI_Abort, which prints; so a wholly
    silent launcher is retried once, with what it printed on stdout shown on the terminal."""
    d = _workdir(scan, tmp_path, {"num_subiterations": 300, "save_interval": 300})
    proc, out, err, seconds = _interrupt_osmaposl(launcher, d)
    if proc.returncode != 0 and not err.strip():
        with capsys.disabled():  # (on the terminal, so that CI's log keeps it: warnings are errors here)
            print(f"\ntest_ctrl_c_ends_every_rank: mpiexec ended (exit {proc.returncode}) with an empty stderr; "
                  f"stdout's end: {out[-2000:]!r}; interrupting a second run")  # fmt: skip
        for f in d.iterdir():
            if f.name.startswith("osem_") or ".tmp-" in f.name:
                f.unlink()
        proc, out, err, seconds = _interrupt_osmaposl(launcher, d)
    said = f"exit {proc.returncode} after {seconds:.1f} s\nstderr:\n{err}\nstdout's end:\n{out[-2000:]}"
    assert seconds < 10, said
    assert proc.returncode != 0, said
    assert "stirgpu osmaposl: interrupted: stopped in subiteration" in err, said
    assert not (d / "osem_300.hv").exists()
    assert [p.name for p in d.iterdir() if ".tmp-" in p.name] == []


def test_one_process_without_a_launcher_is_unchanged(monkeypatch):
    """No MPI launcher: the default communicator is this process alone, and mpi4py is not imported."""
    from stirgpu.distributed import launched_by_mpi, world
    from stirgpu.distributed.comm import RANK_VARIABLES

    for v in RANK_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    assert launched_by_mpi() == (False, None)
    comm = world()
    assert (comm.rank, comm.size, comm.mpi, comm.describe()) == (0, 1, None, "")
    code = "import sys, stirgpu.projectors as p; p.ProjectorPair(backend='cpu'); print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "False", out.stderr


def test_demo_refuses_several_ranks_with_one_message(launcher, tmp_path):
    """The demo writes its folder from one process: on 2 ranks it refuses, once, before any work."""
    proc = _mpi(launcher, [(2, STIRGPU + ["demo", "--output", str(tmp_path / "demo")])], tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("stirgpu")]
    assert lines == [
        "stirgpu demo: error: the demo runs in one process, not on 2 MPI ranks: run it without mpirun "
        "(mpirun -n N works for osmaposl, forward-project and back-project)"
    ]
    assert not (tmp_path / "demo").exists()
