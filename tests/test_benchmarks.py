"""The benchmark scripts: a bad argument is one line on stderr with exit code 2 (argparse's
errors, stirgpu's, the scripts' own, OS errors), never a usage block or a traceback; and the
scripts' CPU runs end to end on tiny cases (``kernels.py`` against libparallelproj's OpenMP
build).  No timings are asserted."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import reference_results

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

#: script -> bad arguments, each refused before any real work (what goes wrong in brackets)
BAD_ARGUMENTS = {
    "cpu_lanes.py": [(["--repeat", "0"], "--repeat"), (["--numerics", "stir"], "--numerics")],  # (gone)
    "first_run.py": [
        (["--rounds", "0"], "--rounds"),  # argparse type
        (["--tmpdir", "/nonexistent/folder"], "/nonexistent/folder"),
        (["--command", "info /nonexistent.hs"], "--command"),  # the command fails: its error, one line
    ],
    "io.py": [
        (["--size-gb", "-1"], "--size-gb"),  # argparse type
        (["--size-gb", "0.001", "--tmpdir", "/nonexistent/folder"], "/nonexistent/folder"),
    ],  # OSError
    "kernels.py": [
        (["--cases", "mmr,nope"], "'nope'"),  # argparse type
        (["--threads", "2"], "--threads"),  # CPU-only option (the default backend is cuda)
        (["--lib", "lib.so", "--no-baseline"], "--no-baseline"),  # exclusive baselines
        (["--backend", "cpu", "--lib", "/nonexistent/libparallelproj.so"], "--lib"),  # BadArgument
        (["--backend", "cpu", "--stir", "/nonexistent"], "--stir"),
        (["--backend", "cpu", "--no-baseline", "--cases", "dmi", "--views", "273"], "--views 273"),
        (["--backend", "cpu", "--no-baseline", "--cases", "mmr", "--max-ring-difference", "1"], "max_ring_diff 1"),
        (["--variants", "simple"], "--variants"),  # the exact family's option (gone)
    ],
    "lafov.py": [
        (["--max-ring-diff", "-1"], "--max-ring-diff"),  # argparse type
        (["--numerics", "stir"], "--numerics"),  # (gone: one projector)
        (["--backend", "cpu", "--max-ring-diff", "400"], "max_ring_diff"),  # stirgpu's error, from a worker
        (["--backend", "cpu", "--dir", "/nonexistent/folder"], "/nonexistent/folder"),
        (["--backend", "cpu", "--rings", "2000", "--max-ring-diff", "1999"], "--dir"),  # 3.3 TB: no room
        (["--backend", "cpu", "--rings", "4", "--max-ring-diff", "2", "--views", "7"], "--subsets 21"),
    ],
    "mpi.py": [(["--ranks", "0,2"], "--ranks"), (["--scanner", "No Such Scanner"], "No Such Scanner")],
    "non_finite.py": [
        (["--repeat", "0"], "--repeat"),
        (["--backend", "cpu", "--max-ring-diff", "64"], "--max-ring-diff 64"),  # the script's own
        (["--backend", "cpu", "--dir", "/nonexistent/folder"], "/nonexistent/folder"),
    ],
    "sirf_memory.py": [
        (["--repeat", "0"], "--repeat"),
        (["--backend", "cpu", "--max-ring-diff", "64"], "--max-ring-diff 64"),  # the shared geometry's own
    ],
    "osem.py": [
        (["--devices", "0,x"], "--devices"),
        (["--backend", "cpu", "--scanner", "No Such Scanner"], "No Such Scanner"),  # stirgpu's error
        (["--numerics", "stir"], "--numerics"),  # (gone)
    ],
    "priors.py": [
        (["--repeat", "0"], "--repeat"),
        (["--cases", "mmr,nope"], "'nope'"),  # argparse type
        (["--backend", "cpu", "--quick", "--epsilon", "-1"], "--epsilon"),  # BadArgument
    ],
    "stir_plugin.py": [
        (["/nonexistent"], "/nonexistent"),
        (["/tmp", "--views", "0"], "--views"),
        (["/tmp", "--iterations", "2", "1"], "--iterations"),
        (["/tmp", "--scanner", "Siemens Vision 600", "--tof-mash", "33"], "--tof-mash 33: 8 TOF bins"),  # even
        (["/tmp", "--tof-mash", "29"], "--tof-mash 29: 'Siemens mMR' has no TOF"),
        (["/tmp", "--scanner", "nosuch"], "--scanner 'nosuch'"),
        (["/tmp", "--scanner", "dmi", "--tof-mash", "33"], "--tof-mash: tof_mash_factor 33"),  # stirgpu's error
    ],
    "stir_plugin_threads.py": [
        (["/nonexistent"], "/nonexistent"),
        (["/tmp", "--threads", "0"], "--threads"),
        (["/tmp", "--wait-policy", "lazy"], "--wait-policy"),
    ],
    "stir_objects.py": [(["--views", "many"], "--views"), (["--stir", "/nonexistent"], "--stir")],
    "streaming.py": [
        (["--zoom", "-2"], "--zoom"),
        (["--no-such-option"], "--no-such-option"),
        (["--tof", "--numerics", "stir"], "--numerics"),  # (gone: one projector)
        (["--backend", "cpu", "--tof", "--max-ring-diff", "36"], "--max-ring-diff"),
    ],
    "lor_order.py": [(["--cases", "dmi,nosuch"], "--cases"), (["--rounds", "0"], "--rounds")],
    "framed_walk.py": [(["--cases", "mmr,dmi-tof"], "--cases"), (["--repeat", "0"], "--repeat")],
    "subset_kernels.py": [
        (["--cases", "dmi,nosuch"], "--cases"),
        (["--backend", "cpu", "--subsets", "0"], "--subsets"),
        (["--backend", "cpu", "--cases", "mmr", "--max-ring-diff", "1"], "max_ring_diff 1"),  # stirgpu's error
    ],
    "back_slabs.py": [(["--cases", "quadra,nosuch"], "--cases"), (["--planes", "8,x"], "--planes")],
    "vs_stir.py": [(["--threads", "0"], "--threads"), (["--stir", "/nonexistent"], "--stir")],
}


def _scripts() -> list[str]:
    """Every runnable script in benchmarks/ (the helpers they import have no __main__)."""
    main = re.compile(r'^if __name__ == "__main__":', re.MULTILINE)
    return sorted(p.name for p in BENCHMARKS.glob("*.py") if main.search(p.read_text()))


def _run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=BENCHMARKS.parent,
    )


def test_every_benchmark_is_checked_for_bad_arguments():
    assert _scripts() == sorted(BAD_ARGUMENTS)


@pytest.mark.parametrize(
    "script, args, named",
    [(s, a, n) for s, cases in BAD_ARGUMENTS.items() for a, n in cases],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_argument_is_one_line_and_exit_code_2(script, args, named):
    r = _run(script, *args)
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: "), r.stderr
    assert named in lines[0]
    assert r.stdout == ""


#: kernels.py's tiny CPU run: every case, 2 views of every segment of ring differences up to 5
#: (the mMR's segment 0, the DMI's 11 segments), the central 25 tangential positions
KERNELS_TINY = ["--backend", "cpu", "--views", "2", "--max-ring-difference", "5", "--tangential", "25"]
KERNELS_TINY += ["--repeat", "1", "--threads", "1"]


def _kernels_cpu(tmp_path, *extra: str) -> tuple[dict, list[str]]:
    """kernels.py's tiny CPU run: (JSON document, readable lines)."""
    out = tmp_path / "kernels.json"
    r = _run("kernels.py", *KERNELS_TINY, "--json", str(out), *extra, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"] == "cpu" and doc["threads"] == 1 and list(doc["cases"]) == ["mmr", "dmi", "dmi-tof"]
    lines = r.stdout.splitlines()[-3:]
    assert [line.split(" ")[0] for line in lines] == ["mmr", "dmi", "dmi-tof"]
    return doc, lines


def _check_case_sizes(cases: dict) -> None:
    """The tiny run's cases have the sizes asked for: 2 of the views (the first and the last), 25
    tangential positions, the segments of ring differences up to 5, 13 TOF bins for dmi-tof."""
    views = {"mmr": [0, 251], "dmi": [0, 271], "dmi-tof": [0, 271]}
    sinograms = {"mmr": 127, "dmi": 36 + 2 * (35 + 34 + 33 + 32 + 31), "dmi-tof": 366}
    for name, case in cases.items():
        assert case["views"] == views[name] and case["tangential"] == 25 and case["max_ring_difference"] == 5
        assert case["lors"] == 2 * 25 * sinograms[name]
        assert case["tof_bins"] == (13 if name == "dmi-tof" else 1)
        assert case["lor_bins"] == case["tof_bins"] * case["lors"]
    assert (cases["mmr"]["segments"], cases["dmi"]["segments"]) == (1, 11)


def test_kernels_cpu_without_a_baseline(tmp_path):
    """``kernels.py --no-baseline`` times stirgpu alone on the tiny cases (no library loaded, no
    ratios): the LORs of the views, segments and tangential positions asked for, and LOR/s
    (LOR-bins/s for TOF) that are the LORs (times TOF bins) over the seconds reported."""
    doc, lines = _kernels_cpu(tmp_path, "--no-baseline")
    assert doc["library"] is None
    _check_case_sizes(doc["cases"])
    for name, case in doc["cases"].items():
        assert "libparallelproj" not in case and "speed_up" not in case and "agreement" not in case
        unit = "lor_bins_per_s" if name == "dmi-tof" else "lor_per_s"
        for way in ("forward", "back"):
            s = case["stirgpu"]
            assert s[f"{way}_{unit}"] == pytest.approx(case["lor_bins"] / s[f"{way}_s"])
    assert "libparallelproj" not in " ".join(lines)


@pytest.mark.stir
def test_kernels_cpu_against_libparallelproj(reference_stir, tmp_path):
    """``kernels.py --backend cpu --lib`` with the reference STIR's libparallelproj 2.0.7 (its
    OpenMP build) on the tiny cases: stirgpu's forward projections equal the library's bit for
    bit on the same LORs (max |diff| 0), for mMR and DMI and for the DMI's 13 TOF bins -- so the
    benchmark hands the library the same LORs in the same order, their endpoints as STIR computes
    them (swapped for TOF), the same image and frame, and lays the TOF values out as the library
    does (a wrong one of these gives a non-zero difference).  Back projections of the same values
    may differ by the order of float32 additions: at most 1e-5 of the maximum (what summing a
    few hundred float32 terms in another order can give).  The speed-ups are the library's
    seconds over stirgpu's."""
    if reference_stir.bin_dir is None:
        pytest.skip(f"the STIR found ({reference_stir.origin}) has no library folder for libparallelproj")
    lib = reference_stir.bin_dir.parent / "lib" / "libparallelproj.so"
    doc, lines = _kernels_cpu(tmp_path, "--lib", str(lib))
    assert doc["library"]["path"] == str(lib) and doc["openmp_threads"] == 1
    _check_case_sizes(doc["cases"])
    for case in doc["cases"].values():
        assert case["agreement"]["forward"] == 0
        assert case["agreement"]["back"] < 1e-5
        for way in ("forward", "back"):
            assert case["speed_up"][way] == pytest.approx(
                case["libparallelproj"][f"{way}_s"] / case["stirgpu"][f"{way}_s"]
            )
    assert all("speed-up" in line and "libparallelproj" in line for line in lines)


def test_kernels_stir_baseline_without_a_stir_says_where_it_looked_and_what_to_do(tmp_path):
    """``--stir`` without a prefix and no STIR to take libparallelproj from (here: a
    STIRGPU_REFERENCE_STIR that is not one): one line saying where it looked and naming --stir
    and --no-baseline."""
    env = {**os.environ, "STIRGPU_REFERENCE_STIR": str(tmp_path / "no-stir")}
    r = subprocess.run(
        [sys.executable, str(BENCHMARKS / "kernels.py"), "--backend", "cpu", "--stir"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and r.stdout == "", r.stderr
    for named in ("STIRGPU_REFERENCE_STIR", "--stir", "--no-baseline"):
        assert named in r.stderr


def test_kernels_default_libraries_are_the_anchors_beside_the_checkout(monkeypatch):
    """Without --lib, --stir or --no-baseline the baseline is libparallelproj 2.0.7 from
    ``shared/anchors`` in the checkout's parent folder: the CUDA build (sm_90) for ``cuda``, the
    OpenMP build for ``cpu`` -- as documented, whatever the working folder."""
    import importlib.util

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_kernels", BENCHMARKS / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    anchors = BENCHMARKS.parent.parent / "shared" / "anchors"
    assert module.DEFAULT_LIBS == {
        "cuda": anchors / "libparallelproj-2.0.7-cuda-sm90.so",
        "cpu": anchors / "libparallelproj-2.0.7-cpu.so",
    }


def test_non_finite_cpu_tiny_run(tmp_path):
    """``non_finite.py --backend cpu --quick`` on 8 views: every call timed with the check and
    without, the ratio the one over the other, OSEM's read of its inputs as a fraction of the
    iteration measured beside it (no timings asserted)."""
    out = tmp_path / "non_finite.json"
    argv = ["--backend", "cpu", "--quick", "--views", "8", "--tangential", "32", "--subsets", "2", "--repeat", "1"]
    r = _run("non_finite.py", *argv, "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"] == "cpu" and doc["geometry"]["views"] == 8 and doc["geometry"]["segments"] == 3
    assert list(doc["cases"]) == ["back_disk", "back_memory", "forward", "osem_set_up"]
    for case in doc["cases"].values():
        assert case["checked_s"] > 0 and case["ratio"] == pytest.approx(case["checked_s"] / case["unchecked_s"])
    osem = doc["osem"]
    assert osem["check_of_iteration"] == pytest.approx(osem["check_s"] / osem["iteration_s"])
    lines = r.stdout.splitlines()[-5:]
    assert [line.split(":")[0] for line in lines[:4]] == list(doc["cases"])
    assert lines[-1].startswith("OSEM's read of its inputs before the first subiteration")


def test_sirf_memory_cpu_tiny_run(tmp_path):
    """``sirf_memory.py --backend cpu --quick`` on 8 views: the forward and back projections timed
    with both in-memory stores, the ratio the one over the other (no timings asserted)."""
    out = tmp_path / "sirf_memory.json"
    argv = ["--backend", "cpu", "--quick", "--views", "8", "--tangential", "32", "--repeat", "1"]
    r = _run("sirf_memory.py", *argv, "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"] == "cpu" and doc["geometry"]["views"] == 8
    assert list(doc["cases"]) == ["forward", "back"]
    for case in doc["cases"].values():
        assert case["one_array_s"] > 0 and case["ratio"] == pytest.approx(case["one_array_s"] / case["per_segment_s"])
    assert [line.split(":")[0] for line in r.stdout.splitlines()[-2:]] == ["forward", "back"]


def test_priors_cpu_quick_runs_end_to_end(tmp_path):
    """``priors.py --backend cpu --quick --osem``: the RDP value and gradient timed against a copy,
    and a penalised OSEM iteration with the prior's share, all reported (no timings asserted)."""
    out = tmp_path / "priors.json"
    r = _run(
        "priors.py",
        "--backend",
        "cpu",
        "--quick",
        "--repeat",
        "1",
        "--osem",
        "--subsets",
        "2",
        "--json",
        str(out),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["backend"] == "cpu" and list(doc["cases"]) == ["quick"]
    case = doc["cases"]["quick"]
    assert case["copy_gb_per_s"] > 0
    for op in ("value", "gradient"):
        assert case[op]["seconds"] > 0 and case[op]["of_copy"] == pytest.approx(
            case[op]["gb_per_s"] / case["copy_gb_per_s"]
        )
    osem = doc["osem"]
    assert osem["subsets"] == 2 and len(osem["subiteration_seconds"]) == len(osem["prior_gradient_seconds"]) == 2
    assert 0 < osem["prior_share_mean"] <= osem["prior_share_max"] < 1
    assert r.stdout.splitlines()[-1].startswith("penalised OSEM (Siemens mMR span 11, 2 subsets")


def _stir_plugin_module(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_stir_plugin", BENCHMARKS / "stir_plugin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stir_plugin_benchmark_reads_stirgpu_osmaposl_subiteration_times(monkeypatch):
    """stirgpu osmaposl's iteration is timed from the subiteration lines it prints (the last
    ``subsets`` of them), and a run that printed too few is an error, not a short sum."""
    module = _stir_plugin_module(monkeypatch)
    out = (
        "OSMAPOSL recon.par: 2 subsets, subiterations 1..4\n"
        "  subiteration 1 (subset 0): 0.50 s\n  subiteration 2 (subset 1): 0.25 s\n"
        "  subiteration 3 (subset 0): 0.20 s, log-likelihood (subset) -1.5 -> out_3.hv\n"
        "  subiteration 4 (subset 1): 0.30 s -> out_4.hv\ndone in 2.0 s\n"
    )
    assert module.last_iteration_seconds(out, 2) == pytest.approx(0.5)
    assert module.last_iteration_seconds(out, 4) == pytest.approx(1.25)
    with pytest.raises(SystemExit, match="printed 4 subiteration times, expected 5"):
        module.last_iteration_seconds(out, 5)


def _stir_plugin_geometry(monkeypatch, *argv: str):
    """stir_plugin.py's (ProjDataInfo, span) for its command-line options ``argv`` (no STIR needed)."""
    options = {"scanner": "mmr", "span": None, "tof_mash": 0, "max_ring_difference": None}
    options |= {"views": None, "tangential": None}
    for key, value in zip(argv[::2], argv[1::2], strict=True):
        options[key.removeprefix("--").replace("-", "_")] = value if key == "--scanner" else int(value)
    return _stir_plugin_module(monkeypatch).geometry(argparse.Namespace(**options))


def test_stir_plugin_benchmark_geometries(monkeypatch):
    """stir_plugin.py's cases: the mMR span 11 by default (60, 252 views, 344 tangential, non-TOF),
    the GE Discovery MI 4 rings with ``--tof-mash 29`` (span 1, 13 TOF bins), any STIR scanner by name."""
    pdi, span = _stir_plugin_geometry(monkeypatch)
    assert (pdi.scanner.name, span, pdi.get_max_ring_difference_overall()) == ("Siemens mMR", 11, 60)
    assert (pdi.get_num_views(), pdi.get_num_tangential_poss(), pdi.is_tof_data()) == (252, 344, False)
    pdi, span = _stir_plugin_geometry(monkeypatch, "--scanner", "dmi", "--tof-mash", "29", "--max-ring-difference", "1")
    assert (pdi.scanner.name, span, pdi.get_num_segments(), pdi.get_num_tof_poss()) == (
        "GE Discovery MI 4 rings",
        1,
        3,
        13,
    )
    assert (pdi.get_num_views(), pdi.get_num_tangential_poss()) == (272, 415)
    pdi, span = _stir_plugin_geometry(
        monkeypatch, "--scanner", "Siemens Vision 600", "--tof-mash", "24", "--views", "8"
    )
    assert (pdi.get_num_tof_poss(), pdi.get_num_views(), span) == (11, 8, 1)


def _lafov_module(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_lafov", BENCHMARKS / "lafov.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.stir
def test_lafov_template_and_image_are_stirs(stir, monkeypatch):
    """lafov.py's Quadra template is STIR's ``construct_proj_data_info`` for the scanner STIR
    names "Siemens Quadra" (here with the maximum ring difference 2 and views mashed by 7), and
    its image STIR's default image for it (645 x 447 x 447, STIR's voxel sizes to the bit)."""
    import argparse

    lafov = _lafov_module(monkeypatch)
    args = argparse.Namespace(span=1, max_ring_diff=2, views=57, tangential=None, rings=None)
    pdi = lafov.template(args)
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("Siemens Quadra"), 1, 2, 57, 520, False
    )
    assert pdi.get_scanner().name == "Siemens Quadra" and pdi.get_scanner().num_rings == 323
    assert (pdi.get_num_views(), pdi.get_num_tangential_poss()) == (theirs.get_num_views(), 520)
    assert list(pdi.segment_nums) == list(range(theirs.get_min_segment_num(), theirs.get_max_segment_num() + 1))
    for seg in pdi.segment_nums:
        assert pdi.get_num_axial_poss(seg) == theirs.get_num_axial_poss(seg)
        assert (pdi.segment(seg).min_ring_diff, pdi.segment(seg).max_ring_diff) == (
            theirs.get_min_ring_difference(seg),
            theirs.get_max_ring_difference(seg),
        )
    assert pdi.total_num_bins == theirs.size_all()
    info = lafov.default_image(pdi)
    image = stir.FloatVoxelsOnCartesianGrid(theirs, 1.0)
    assert info.shape == tuple(image.shape()) == (645, 447, 447)
    voxel = image.get_voxel_size()
    assert info.voxel_size == (voxel[1], voxel[2], voxel[3])


def test_lafov_warm_up_has_the_runs_viewgram_length(monkeypatch):
    """The warm-up's geometry is small (2 views, maximum ring difference 1) but its viewgrams are
    as long as the run's, so that a GPU's reductions along a viewgram compile their kernel there
    (cupy's CUB block size, 512 threads from 1,025 bins on): the Quadra's tangential positions
    and 8 rings by default, the run's own where it sets fewer."""
    lafov = _lafov_module(monkeypatch)
    default = argparse.Namespace(rings=None, tangential=None)
    pdi = lafov.warm_up_template(default)
    nt = pdi.get_num_tangential_poss()
    lengths = [pdi.segment(s).num_axial_poss * nt for s in pdi.segment_nums]
    assert (pdi.get_num_views(), nt, lengths) == (2, 520, [7 * 520, 8 * 520, 7 * 520])
    assert min(lengths) > 1024 and pdi.get_num_views() * sum(lengths) < 30_000
    small = lafov.warm_up_template(argparse.Namespace(rings=4, tangential=32))
    assert [small.segment(s).num_axial_poss * 32 for s in small.segment_nums] == [96, 128, 96]


def test_lafov_cold_caches_give_each_run_empty_caches(monkeypatch, tmp_path):
    """``--cold-caches``: each worker's cupy and stirgpu kernel caches are new empty folders in
    the run's own temporary folder; without it the workers inherit the environment as it is."""
    lafov = _lafov_module(monkeypatch)
    monkeypatch.setenv("CUPY_CACHE_DIR", "/kept/cupy")
    kept = lafov.worker_environment(argparse.Namespace(cold_caches=False), str(tmp_path))
    assert kept["CUPY_CACHE_DIR"] == "/kept/cupy" and list(tmp_path.iterdir()) == []
    first = lafov.worker_environment(argparse.Namespace(cold_caches=True), str(tmp_path))
    second = lafov.worker_environment(argparse.Namespace(cold_caches=True), str(tmp_path))
    for name in lafov.CACHE_VARIABLES:
        folder = Path(first[name])
        assert folder.parent == tmp_path and folder.is_dir() and list(folder.iterdir()) == []
        assert first[name] != second[name]


def test_lafov_cpu_tiny_run(tmp_path):
    """``lafov.py --backend cpu`` on a tiny Quadra-like geometry: every run reported, the
    ratios computed from them, the files removed (no timings asserted)."""
    out = tmp_path / "lafov.json"
    work = tmp_path / "work"
    work.mkdir()
    r = _run(
        "lafov.py",
        "--backend",
        "cpu",
        "--rings",
        "4",
        "--max-ring-diff",
        "2",
        "--views",
        "21",
        "--tangential",
        "32",
        "--dir",
        str(work),
        "--json",
        str(out),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert list(work.iterdir()) == []
    g = doc["geometry"]
    assert (g["segments"], g["views"], g["tangential_poss"], g["rings"], g["backend"]) == (5, 21, 32, 4, "cpu")
    assert g["data_bytes"] == 4 * g["bins"] and g["image"] == [7, 35, 35]
    runs = doc["runs"]
    assert set(runs) == {
        "forward_disk",
        "plain_read",
        "back_disk",
        "subset_back_disk",
        "osem_disk",
        "memory",
        "plain_write",
    }
    assert runs["plain_read"]["bytes"] == runs["plain_write"]["bytes"] == g["data_bytes"]
    projections = [runs[n] for n in ("forward_disk", "back_disk", "subset_back_disk")]
    projections += [runs["memory"]["forward"], runs["memory"]["back"]]
    for run in projections:
        assert run["seconds"] > 0 and run["stats"]["backend"] == "cpu"
        assert set(run["setup"]) == {
            "input_seconds",
            "engine_setup_seconds",
            "outside_engine_seconds",
            "first_stage_start_seconds",
            "to_first_chunk_seconds",
        }
    assert runs["forward_disk"]["stats"]["bins"] == runs["back_disk"]["stats"]["bins"] == g["bins"]
    assert runs["subset_back_disk"]["subset"] == [0, 21]
    assert runs["subset_back_disk"]["stats"]["bins"] == g["bins"] // 21  # one view of 21
    assert runs["back_disk"]["checksum"] > 0  # the forward projection of the phantom was read back
    osem = runs["osem_disk"]
    assert osem["subsets"] == 21 and len(osem["subiteration_seconds"]) == 21 and osem["estimate_max"] > 0
    s = doc["summary"]
    assert s["subset_fraction_of_back"] == pytest.approx(
        runs["subset_back_disk"]["seconds"] / runs["back_disk"]["seconds"]
    )
    assert s["back_disk_of_plain_read"] == pytest.approx(runs["back_disk"]["GBps"] / runs["plain_read"]["GBps"])
    bound = max(g["data_bytes"] / (runs["plain_read"]["GBps"] * 1e9), osem["kernel_seconds"])
    assert s["osem_over_bound"] == pytest.approx(osem["seconds"] / bound)
    assert s["subset_fraction_of_back_gpu_image"] is None  # (GPU backends only)
    assert set(s["targets"]) >= {"back_disk_of_plain_read", "subset_fraction_of_back", "osem_over_bound"}
    assert set(s["targets"]) <= {
        "back_disk_of_plain_read",
        "subset_fraction_of_back",
        "osem_over_bound",
        "back_kernels_lor_per_s",
        "forward_kernels_lor_per_s",
        "osem_memory_seconds",
    }
    assert s["targets"]["back_kernels_lor_per_s"]["value"] == pytest.approx(
        g["bins"] / runs["back_disk"]["kernel_seconds"]
    )
    if "memory" in runs:
        assert runs["memory"]["osem"]["subsets"] == 21
        assert s["targets"]["osem_memory_seconds"]["value"] == runs["memory"]["osem"]["seconds"]
    assert all(v > 0 for v in s["peak_rss_mb"].values())
    assert r.stdout.splitlines()[-1].startswith("targets: back_disk_of_plain_read ")


def test_lafov_setup_only_tiny_run(tmp_path):
    """``lafov.py --setup-only``: every call's set-up to its first chunk, first and again, on a
    sparse data file; the folder left empty (no timings asserted)."""
    work = tmp_path / "work"
    work.mkdir()
    tiny = ["--rings", "4", "--max-ring-diff", "2", "--views", "21", "--tangential", "32"]
    r = _run("lafov.py", "--backend", "cpu", "--setup-only", *tiny, "--dir", str(work), timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout[: r.stdout.rindex("}") + 1])
    assert list(work.iterdir()) == [] and doc["geometry"]["bins"] == 9408
    assert list(doc["setup"]) == ["forward_disk", "back_disk", "subset_back_disk", "osem_disk"]
    for name, run in doc["setup"].items():
        assert run["to_first_chunk_seconds"] >= run["input_seconds"] >= 0
        assert run["again_to_first_chunk_seconds"] >= run["again_input_seconds"] >= 0
        assert (run["input_seconds"] > 0) == (name in ("forward_disk", "osem_disk"))
    assert r.stdout.splitlines()[-1].startswith("osem_disk: to the first chunk ")


def test_mpi_benchmark_gives_each_rank_of_a_node_its_own_gpu(monkeypatch):
    """``mpi.py --backend cuda``: a rank's GPU is its rank on the node (MPICH's hydra, Open MPI or
    Slurm says which) modulo the GPUs it sees -- each its own while a node has as many GPUs as
    ranks, GPU 0 of one visible device (``srun --gpus-per-task 1``); none visible is a clear error."""
    import importlib.util

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_mpi", BENCHMARKS / "mpi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    gpu = module.gpu_of_rank
    assert [gpu({"MPI_LOCALRANKID": str(r)}, 4) for r in range(4)] == [0, 1, 2, 3]  # MPICH's hydra
    assert [gpu({"OMPI_COMM_WORLD_LOCAL_RANK": str(r)}, 8) for r in range(8)] == list(range(8))  # Open MPI
    assert gpu({"SLURM_LOCALID": "5"}, 4) == 1  # more ranks than GPUs: shared
    assert gpu({"SLURM_LOCALID": "3"}, 1) == 0  # one visible GPU per rank
    assert gpu({}, 2) == 0  # a launcher that says nothing
    with pytest.raises(module.arguments.BadArgument, match="no CUDA GPU is visible"):
        gpu({"MPI_LOCALRANKID": "0"}, 0)


def test_streaming_tof_case_runs_on_the_cpu(tmp_path):
    """``streaming.py --tof`` on a tiny GE Discovery MI case (13 TOF bins): the in-memory, subset
    and target figures of the non-TOF case, chunks carrying all timing positions, and kernels alone
    that compute the streamed forward projection bit for bit."""
    out = tmp_path / "streaming.json"
    args = ["--backend", "cpu", "--tof", "--quick", "--no-disk", "--views", "16", "--subsets", "4"]
    r = _run("streaming.py", *args, "--tangential", "21", "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    c = doc["config"]
    assert (c["scanner"], c["tof_bins"], c["tof_mash_factor"]) == ("GE Discovery MI 4 rings", 13, 29)
    m, s = doc["in_memory"], doc["subset"]
    assert m["kernel_only_forward_max_difference"] == 0
    assert all(m[k] > 0 for k in ("kernel_only_forward_s", "stream_forward_s", "stream_back_s", "bridge_forward_s"))
    assert "TOF: 13 timing positions (-6..6) in every viewgram of every chunk" in m["plan_forward"]
    assert s["ideal_fraction"] == 4 / 16 and 0 < s["stream_subset_fraction"] < 1
    assert set(doc["targets"]) == {"in-memory forward <= 1.25 x kernel-only", "subset cost <= 1.2/4 of full"}
    assert r.stdout.splitlines()[-1].startswith("targets: ")


def test_subset_kernels_on_the_cpu(tmp_path):
    """subset_kernels.py on a tiny TOF case: the full call's and the subset's LORs and parts,
    their shares of the full call's seconds, and forward sums that subset the full one."""
    out = tmp_path / "subset_kernels.json"
    tiny = ["--views", "8", "--tangential", "21", "--max-ring-diff", "1", "--subsets", "4", "--repeat", "1"]
    r = _run("subset_kernels.py", "--backend", "cpu", "--cases", "dmi-tof", *tiny, "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    case = json.loads(out.read_text())["cases"]["dmi-tof"]
    full, sub = case["full"], case["subset"]
    assert case["tof_bins"] == 13 and full["parts"] == sub["parts"] == 3
    assert sub["lors"] * 4 == full["lors"]  # views 0 and 4 of 8
    assert all(case["subset_share"][k] > 0 for k in ("forward", "back")) and case["ideal_share"] == 0.25
    assert 0 < sub["forward_sum"] < full["forward_sum"]
    assert r.stdout.strip().splitlines()[-1].startswith("dmi-tof: full ")


def test_lafov_sweep_on_the_cpu(tmp_path):
    """lafov.py --sweep on a tiny Quadra-like scanner: the in-memory calls at each maximum ring
    difference, the bins growing with it, each call's seconds and slopes between neighbours."""
    out = tmp_path / "sweep.json"
    tiny = ["--rings", "4", "--views", "21", "--tangential", "32", "--subsets", "3"]
    r = _run("lafov.py", "--backend", "cpu", *tiny, "--sweep", "2,1", "--json", str(out), timeout=900)
    assert r.returncode == 0, r.stderr
    sweep = json.loads(out.read_text())["sweep"]
    assert [p["max_ring_diff"] for p in sweep["points"]] == [1, 2]
    assert sweep["points"][0]["bins"] < sweep["points"][1]["bins"]
    for call in sweep["calls"].values():
        assert len(call["seconds"]) == 2 and len(call["slopes_s_per_1e9_bins"]) == 1
    assert all(p["run"]["osem"]["subsets"] == 3 for p in sweep["points"])
    assert any(line.startswith("sweep (MRD 1: ") for line in r.stdout.splitlines())


def test_back_slabs_on_the_cpu(tmp_path):
    """back_slabs.py on a tiny mMR case (on the CPU the back projection has no slabs: every
    thickness is the same call): each call's thicknesses, seconds, speed-ups over one launch and
    differences from it."""
    out = tmp_path / "back_slabs.json"
    tiny = ["--views", "8", "--tangential", "21", "--subsets", "4", "--repeat", "1", "--planes", "4,8"]
    r = _run("back_slabs.py", "--backend", "cpu", "--cases", "mmr", *tiny, "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    case = json.loads(out.read_text())["cases"]["mmr"]
    assert set(case["calls"]) == {"full", "subset"}
    for call in case["calls"].values():
        assert (
            list(call["thickness"]) == ["one launch", "4", "8", "auto"] and call["thickness"]["auto"]["planes"] is None
        )
        assert all(t["back_s"] > 0 and t["diff"] == 0.0 for t in call["thickness"].values())
    assert case["calls"]["subset"]["lors"] * 4 == case["calls"]["full"]["lors"]
    assert r.stdout.strip().splitlines()[-1].startswith("mmr (image ")


def test_io_reads_every_subset_in_turn_the_same_bytes_both_ways(tmp_path):
    """``io.py``'s OSEM-order runs read the same bytes in the same order, announced through the
    store and by plain preads: the same bytes asked for and the same checksum, one time per
    subset (no timings asserted)."""
    r = _run("io.py", "--size-gb", "0.02", "--small-gb", "0.01", "--subsets", "7", "--tmpdir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout[: r.stdout.rindex("}") + 1])
    announced, plain = doc["runs"]["osem_order"], doc["runs"]["osem_order_plain"]
    assert announced["bytes_requested"] == plain["bytes_requested"] == doc["big_file"]["bytes"]
    assert announced["checksum"] == plain["checksum"] == doc["runs"]["all"]["checksum"] != 0
    assert len(announced["subset_seconds"]) == len(plain["subset_seconds"]) == 7
    assert "all 7 subsets in turn: announced" in r.stdout.splitlines()[-1]


def test_first_run_times_a_cold_and_a_warm_run_of_one_command(stir_fixtures, tmp_path):
    """first_run.py on a forward projection of the ECAT 953 fixture (its kernels compile in a
    few seconds, the demo's in about ten): the cold run compiles kernels into its empty cache,
    the warm run compiles none, and the ratio and share are those of the seconds reported."""
    ref = reference_results(stir_fixtures)
    image, template = ref / "ecat953_span3_image.hv", ref / "ecat953_span3_fwd.hs"
    command = f"forward-project {{out}}/fwd.hs {shlex.quote(str(image))} {shlex.quote(str(template))} --backend cpu"
    out = tmp_path / "first_run.json"
    r = _run("first_run.py", "--command", command, "--tmpdir", str(tmp_path), "--json", str(out), timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    (run,) = doc["rounds"]
    cold, warm = run["cold"], run["warm"]
    assert cold["kernels"] > 0 and 0 < cold["compile_seconds"] < cold["seconds"]
    assert warm["kernels"] == 0 and warm["compile_seconds"] == 0
    assert doc["cold_over_warm"] == pytest.approx(cold["seconds"] / warm["seconds"])
    assert doc["compile_share_of_cold"] == pytest.approx(cold["compile_seconds"] / cold["seconds"])
    assert r.stdout.strip().splitlines()[-1].startswith("stirgpu forward-project: first run (empty kernel caches) ")
