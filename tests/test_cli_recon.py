"""The reconstruction command line: ``stirgpu osmaposl``, ``stirgpu plan``, ``stirgpu demo``.

Small simulated data (ECAT 953, span 3, 24 views, 64 tangential positions) are written as
Interfile into a temporary folder with an OSMAPOSL parameter file in STIR's syntax; the
commands run there as a user would run STIR's ``OSMAPOSL`` (relative names, working
directory = the data folder).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import stirgpu
from stirgpu.cli.main import main
from stirgpu.errors import StirGpuError
from stirgpu.execution import format_bytes
from stirgpu.formats import ProjDataOnDisk, read_from_file, read_image
from stirgpu.parfile import osmaposl_par
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSEM, PoissonLogLikelihood, SensitivitySpec, run_osmaposl, subsets_problem
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate


def par_text(prefix="osem", subiterations=4, extra=""):
    """The CLI tests' OSMAPOSL file (3 subsets, saved every 2 subiterations, subset sensitivities
    sens_%d.hv), ``extra`` lines (keys, or mistakes) added before its last line."""
    text = osmaposl_par(
        "prompts.hs",
        normalisation="acf.hs",
        additive_sinogram="additive.hs",
        subset_sensitivity_filenames="sens_%d.hv",
        output_filename_prefix=prefix,
        num_subsets=3,
        num_subiterations=subiterations,
        save_interval=2,
    )
    return text.replace("END :=\n", f"{extra}END :=\n")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("clidata")
    pdi, info = demo_geometry(num_views=24, num_tangential_poss=64)
    ph = demo_phantom(info)
    sim = simulate(ProjectorPair(backend="cpu"), pdi, info, ph.activity(info), ph.mu_map(info), counts=1e6, seed=5)
    for name, pd in (("prompts", sim.prompts), ("additive", sim.additive), ("acf", sim.normalisation)):
        ProjDataOnDisk.create(d / f"{name}.hs", pdi, fill=pd).close()
    return d


@pytest.fixture
def workdir(data_dir, tmp_path, monkeypatch):
    """A fresh folder with the data (symlinked) as the working directory."""
    for f in data_dir.iterdir():
        os.symlink(f, tmp_path / f.name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _write_par(path, prefix="osem", subiterations=4, extra=""):
    path.write_text(par_text(prefix, subiterations, extra))
    return path


def test_osmaposl_command_writes_stir_named_files(workdir, capsys):
    """``stirgpu osmaposl osem.par`` writes prefix_2.hv, prefix_4.hv and sens_{0,1,2}.hv in the
    working directory (as STIR's OSMAPOSL), prints what it did and exits 0; the estimate equals
    the library's run of the same file to float32 summation order (1e-6 of the maximum)."""
    _write_par(workdir / "osem.par")
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 0
    out = capsys.readouterr().out
    for name in ("osem_2", "osem_4", "sens_0", "sens_1", "sens_2"):
        assert (workdir / f"{name}.hv").is_file() and (workdir / f"{name}.v").is_file()
    assert "subiteration 4 (subset 0)" in out and "osem_4.hv" in out
    size = sum((workdir / f"osem_4.{e}").stat().st_size for e in ("hv", "v"))
    assert out.splitlines()[-1] == (
        f"wrote osem_4.hv (+ osem_4.v, {format_bytes(size)}): the final estimate; "
        "2 estimates in all (subiterations 2, 4); 3 sensitivity images"
    )
    import stirgpu
    from stirgpu.recon import run_osmaposl

    _write_par(workdir / "lib.par", prefix="lib")
    with stirgpu.config(backend="cpu"):
        res = run_osmaposl("lib.par")
    a, b = read_image("osem_4.hv").array, res.as_voxels().array
    assert np.abs(a - b).max() <= 1e-6 * a.max()


def test_osmaposl_restart_from_saved_estimate(workdir):
    """Stop after subiteration 2, restart from osem_2.hv with 'start at subiteration number := 3':
    the restarted osem_4.hv equals the uninterrupted one (positivity off for the restart, so only
    float32 summation order differs: 1e-6 of the maximum)."""
    _write_par(workdir / "full.par", prefix="full", subiterations=4)
    assert main(["osmaposl", "full.par", "--backend", "cpu", "--quiet"]) == 0
    _write_par(workdir / "first.par", prefix="part", subiterations=2)
    # (the same sensitivity files again: replaced only with --overwrite)
    assert main(["osmaposl", "first.par", "--backend", "cpu", "--quiet", "--overwrite"]) == 0
    _write_par(
        workdir / "second.par",
        prefix="part",
        subiterations=4,
        extra="initial estimate := part_2.hv\nstart at subiteration number := 3\n"
        "enforce initial positivity condition := 0\n",
    )
    assert main(["osmaposl", "second.par", "--backend", "cpu", "--quiet", "--overwrite"]) == 0
    a, b = read_image("full_4.hv").array, read_image("part_4.hv").array
    assert np.abs(a - b).max() <= 1e-6 * a.max()


@pytest.mark.parametrize(
    "change, message",
    [
        (("input file := prompts.hs", "input file := missing.hs"), r"osem\.par:4: .*file not found: .*missing\.hs"),
        (
            ("number of subsets := 3", "number of subsets := three"),
            r"osem\.par:\d+: 'number of subsets' expects an integer",
        ),
        (("output filename prefix", "outptu filename prefix"), r"osem\.par:\d+: unknown key 'outptu filename prefix'"),
        (("number of subsets := 3", "number of subsets := 5"), r"unbalanced"),
    ],
)
def test_bad_par_is_refused_before_any_work(workdir, capsys, change, message):
    """A missing input file, a mistyped key, a value of the wrong type, or subsets STIR would
    refuse: exit code 2, one line on stderr naming the file and line, and no file written."""
    text = par_text()
    if change[0] == "number of subsets := 3" and change[1].endswith("5"):
        text = text.replace("use subset sensitivities := 1", "use subset sensitivities := 0")
    assert change[0] in text
    (workdir / "osem.par").write_text(text.replace(change[0], change[1], 1))
    before = sorted(p.name for p in workdir.iterdir())
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in workdir.iterdir()) == before


@pytest.mark.parametrize("subset_sensitivities", [1, 0])
def test_unbalanced_subsets_refused_alike_by_the_command_line_and_osem(workdir, capsys, subset_sensitivities):
    """5 subsets of the data's 24 views (STIR's OSMAPOSL refuses them, with or without subset
    sensitivities): ``stirgpu osmaposl`` stops with one line at the 'number of subsets' line,
    and the OSEM class on the same data refuses with the same reason, word for word
    (``subsets_problem``), before any work."""
    text = par_text().replace("number of subsets := 3", "number of subsets := 5")
    text = text.replace("use subset sensitivities := 1", f"use subset sensitivities := {subset_sensitivities}")
    (workdir / "osem.par").write_text(text)
    before = sorted(p.name for p in workdir.iterdir())
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    reason = subsets_problem(5, 24)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if t.startswith("number of subsets"))
    assert err == f"stirgpu osmaposl: error: osem.par:{line}: {reason}", err
    objective = PoissonLogLikelihood(read_from_file("prompts.hs", allow_template=False))
    spec = SensitivitySpec(use_subset_sensitivities=bool(subset_sensitivities))
    with pytest.raises(StirGpuError) as caught:
        OSEM(objective, ProjectorPair(backend="cpu"), objective.default_image_info(), num_subsets=5, sensitivity=spec)
    assert str(caught.value) == reason
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_every_problem_of_a_par_in_one_run(workdir, capsys):
    """Four different problems in one file -- a missing input file, an unknown key, an
    unsupported feature, an out-of-range value -- are all reported in one run: exit code 2, one
    line per problem naming file:line, then a count line; nothing is written."""
    text = (
        par_text(extra="number of sbusets := 3\n")
        .replace("additive.hs", "nothere.hs")
        .replace("  recompute sensitivity := 1\n", "  recompute sensitivity := 1\n  prior type := PLS\n")
        .replace("save estimates at subiteration intervals := 2", "save estimates at subiteration intervals := 0")
    )
    (workdir / "osem.par").write_text(text)
    before = sorted(p.name for p in workdir.iterdir())
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    lines = text.splitlines()

    def at(needle):
        return next(i for i, s in enumerate(lines, 1) if needle in s)

    want = [
        (at("nothere.hs"), "file not found"),
        (at("prior type"), "prior"),
        (at("save estimates"), "must be at least 1"),
        (at("sbusets"), "unknown key"),
    ]
    assert len(err) == len(want) + 1, err
    for line, (n, words) in zip(err[:-1], want, strict=True):
        assert line.startswith(f"stirgpu osmaposl: error: osem.par:{n}: ") and words in line, line
    assert err[-1] == "stirgpu osmaposl: error: 4 problems in osem.par"
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_every_problem_with_the_data_in_one_run(workdir, capsys):
    """Problems found only with the data are collected too: an additive sinogram of another
    geometry, an initial estimate whose data file is missing, a segment limit beyond the data's,
    two missing sensitivity files and an unreadable one, each at its key's line, in one run."""
    from stirgpu.formats.testing import small_proj_data_info

    ProjDataOnDisk.create(workdir / "other.hs", small_proj_data_info(), fill=1.0).close()
    (workdir / "est.hv").write_text(
        "!INTERFILE :=\nname of data file := est.v\n!number format := float\n"
        "!number of bytes per pixel := 4\nnumber of dimensions := 3\n"
        "!matrix size [1] := 4\n!matrix size [2] := 4\n!matrix size [3] := 4\n"
        "!END OF INTERFILE :=\n"
    )
    (workdir / "sens_0.hv").write_text("")
    text = (
        par_text(extra="initial estimate := est.hv\n")
        .replace("additive.hs", "other.hs")
        .replace(
            "recompute sensitivity := 1",
            "recompute sensitivity := 0\n  maximum absolute segment number to process := 9",
        )
    )
    (workdir / "osem.par").write_text(text)
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "stirgpu osmaposl: error: 6 problems in osem.par", "\n".join(err)
    joined = "\n".join(err)
    for words in (
        "not found: " + str(workdir / "sens_1.hv"),
        "not found: " + str(workdir / "sens_2.hv"),
        "sens_0.hv: not an Interfile header",
        "other.hs: its geometry differs",
        "est.v: data file of",
        "is too large",
    ):
        assert words in joined, (words, joined)
    assert not (workdir / "osem_2.hv").exists()


def test_unsupported_feature_is_refused(workdir, capsys):
    """A prior stirgpu does not implement (STIR's PLS) is refused with the line of 'prior type'."""
    text = par_text().replace("  recompute sensitivity := 1\n", "  recompute sensitivity := 1\n  prior type := PLS\n")
    (workdir / "osem.par").write_text(text)
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 2
    assert "osem.par:" in (err := capsys.readouterr().err) and "prior 'PLS' is not implemented" in err
    assert not (workdir / "osem_2.hv").exists()


def test_osmaposl_stats_and_timelines(workdir, capsys):
    """--stats prints after every subiteration the statistics of its update, naming the subset
    it used, and the chunk plan once (all subsets' plans are alike here); --timeline with %d
    draws one PNG per subiteration, a plain name only the last subiteration's; the final line
    lists the pictures.  A report of the objective function (another call, over all views)
    does not replace the update's statistics."""
    _write_par(workdir / "osem.par", extra="report objective function values interval := 1\n")
    # a fixed budget: the default follows the free memory, and a plan made under another budget
    # is another plan (printed again)
    assert (
        main(
            [
                "osmaposl",
                "osem.par",
                "--backend",
                "cpu",
                "--quiet",
                "--stats",
                "--timeline",
                "tl_%d.png",
                "--memory-budget",
                "256M",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for n, k in ((1, 0), (2, 1), (3, 2), (4, 0)):
        assert f"forward-back ratio, subset {k} of 3 on cpu" in out.split(f"subiteration {n} (subset {k})")[1]
        assert (workdir / f"tl_{n}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.count("views per chunk (max)") == 1 and "subset 0 of 1" not in out
    assert out.splitlines()[-1].endswith("; 3 sensitivity images; 4 timelines (tl_%d.png)")
    _write_par(workdir / "again.par", prefix="again")
    argv = ["osmaposl", "again.par", "--backend", "cpu", "--quiet", "--timeline", "last.png", "--overwrite"]
    assert main(argv) == 0
    assert (workdir / "last.png").is_file() and capsys.readouterr().out.splitlines()[-1].endswith("; last.png")


def test_osmaposl_timeline_folder_is_checked_before_any_work(workdir, capsys):
    _write_par(workdir / "osem.par")
    before = sorted(p.name for p in workdir.iterdir())
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet", "--timeline", "nowhere/t.png"]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_subiteration_records_carry_their_update_statistics(workdir):
    """Each OSEM record's statistics are those of its own update: the fused forward-back call for
    its subset (with an objective-function report after every subiteration too)."""
    import stirgpu
    from stirgpu.recon import run_osmaposl

    _write_par(workdir / "lib.par", prefix="lib", extra="report objective function values interval := 1\n")
    with stirgpu.config(backend="cpu"):
        res = run_osmaposl("lib.par")
    for rec in res.records:
        assert rec.objective_function_value is not None
        assert (rec.stats.operation, rec.stats.subset_num, rec.stats.num_subsets) == (
            "forward-back ratio",
            rec.subset,
            3,
        )


def test_plan_command_prints_chunks_and_memory(workdir, capsys):
    """``stirgpu plan`` shows a chunk table per operation and the memory against the budget."""
    assert main(["plan", "prompts.hs", "--backend", "cpu", "--memory-budget", "64M", "--subsets", "3"]) == 0
    out = capsys.readouterr().out
    for op in ("forward projection", "back projection", "sensitivity", "OSEM ratio step"):
        assert op in out
    assert "segment" in out and "views per chunk (max)" in out and "host memory" in out
    assert "columns: segment; axial positions" in out  # the legend
    assert main(["plan", "prompts.hs", "--backend", "cpu", "--subsets", "99"]) == 2


@pytest.mark.slow
def test_demo_command(tmp_path, capsys, monkeypatch):
    """``stirgpu demo`` simulates, reconstructs and writes inputs, parameter file, estimates,
    sensitivities, a slices PNG and a timeline PNG, and prints where they are; the hot sphere's
    recovered contrast is printed."""
    out = tmp_path / "demo"
    assert main(["demo", "--output", str(out), "--backend", "cpu", "--quiet"]) == 0
    text = capsys.readouterr().out
    for name in (
        "prompts.hs",
        "additive.hs",
        "acf.hs",
        "truth.hv",
        "osem.par",
        "osem_24.hv",
        "sens_0.hv",
        "slices.png",
        "timeline.png",
    ):
        assert (out / name).is_file(), name
    assert "contrast truth 4.00" in text and str(out) in text
    assert re.fullmatch(
        re.escape(f"wrote {out}{os.sep}: 5 inputs, 3 estimates, 8 sensitivity images, 2 pictures (") + r"\d+\.\d MiB\)",
        text.splitlines()[-1],
    )
    # the parameter file the demo wrote runs unchanged (STIR syntax, relative names), replacing
    # the demo's estimates and sensitivities only with --overwrite
    monkeypatch.chdir(out)
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet"]) == 2
    assert "already exist (use --overwrite to replace them)" in capsys.readouterr().err
    assert main(["osmaposl", "osem.par", "--backend", "cpu", "--quiet", "--overwrite"]) == 0


def test_osmaposl_command_runs_a_prior(workdir, capsys):
    """``stirgpu osmaposl`` with a Relative Difference Prior (multiplicative MAP model, gradient
    images, objective reports): exit 0, STIR's files (estimates and grad_1 .. grad_4), the penalty
    printed beside the objective function, and the estimate equals the library's run of the file."""
    prior = (
        "  prior type := Relative Difference Prior\n"
        "  Relative Difference Prior Parameters :=\n"
        "    penalisation factor := 0.2\n"
        "    gradient filename prefix := grad_\n"
        "  END Relative Difference Prior Parameters :=\n"
    )
    text = par_text(
        prefix="map",
        subiterations=4,
        extra="MAP model := multiplicative\nreport objective function values interval := 2\n",
    ).replace("  recompute sensitivity := 1\n", "  recompute sensitivity := 1\n" + prior)
    (workdir / "map.par").write_text(text)
    assert main(["osmaposl", "map.par", "--backend", "cpu", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.count("penalty ") == 2 and "objective function" in out
    assert all((workdir / f"grad_{n}.hv").is_file() for n in range(1, 5))
    mine = read_image(workdir / "map_4.hv").array
    with stirgpu.config(backend="cpu"):
        again = run_osmaposl(workdir / "map.par").image
    np.testing.assert_array_equal(mine, again)


def test_osmaposl_says_no_subiteration_ran_when_the_start_is_after_the_last(workdir, capsys):
    """'start at subiteration number' after 'number of subiterations': nothing is iterated or saved,
    and the last line says so naming both keys (not "output disabled")."""
    _write_par(workdir / "late.par", prefix="late", subiterations=2, extra="start at subiteration number := 3\n")
    assert main(["osmaposl", "late.par", "--backend", "cpu", "--quiet"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(
        "no estimate (no subiteration ran: 'start at subiteration number := 3' comes after the last one, "
        "'number of subiterations := 2')"
    ), last
    assert not list(workdir.glob("late_*"))
