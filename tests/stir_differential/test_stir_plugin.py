"""The STIR plugin: STIR's own executables and Python classes with the projector type
``stirgpu``, against the same runs with STIR's ``Parallelproj`` type.

The plugin is built once per session (``stir_plugin`` fixture of ``conftest.py``, into stirgpu's user cache:
a second session reuses the build until the sources change).  Every run gets the same inputs,
made by STIR (``osmaposl_cases``: ECAT 931, span 3, 5 segments, 16 views, 64 tangential
positions).  ``STIRGPU_STIR_PLUGIN_TRACE`` makes the plugin log each projection it runs (views,
segments, bins), which is how the tests see that a subset costs only its own views.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import osmaposl_cases as oc
import pytest
from plugin_runs import (
    BACK_PAR,
    FORWARD_PAR,
    STIRGPU_CPU,
    STIRGPU_PAIR,
    plugin_command,
    plugin_env,
    read_inputs,
    read_trace,
    rel_max,
    run_with_plugin,
)

from stirgpu.formats import VoxelsOnCartesianGrid, read_from_file, read_image, write_image

pytestmark = pytest.mark.stir


@pytest.fixture(scope="module")
def inputs(reference_stir, stir, tmp_path_factory):
    geometry = oc.Geometry(span=3, max_delta=7, num_views=16, num_tangential_poss=64)
    return oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("plugin_in"), geometry, seed=11)


# -- STIR's forward_project / back_project ---------------------------------------------------


def test_forward_project_utility_equals_parallelproj(reference_stir, stir_plugin, inputs, tmp_path):
    (tmp_path / "pp.par").write_text(FORWARD_PAR.format(type="Parallelproj", keys=""))
    (tmp_path / "sg.par").write_text(FORWARD_PAR.format(type="stirgpu", keys=STIRGPU_CPU))
    img, tpl = inputs / "phantom.hv", inputs / "template.hs"
    reference_stir.run("forward_project", "pp.hs", img, tpl, "pp.par", cwd=tmp_path)
    trace = tmp_path / "trace.jsonl"
    proc = run_with_plugin(reference_stir, "forward_project", "sg.hs", img, tpl, "sg.par", cwd=tmp_path, trace=trace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with read_from_file(tmp_path / "pp.hs") as a, read_from_file(tmp_path / "sg.hs") as b:
        for s in a.get_proj_data_info().segment_nums:
            assert rel_max(b.get_segment_by_view(s), a.get_segment_by_view(s)) == 0  # bit for bit
    calls = read_trace(trace)  # one streamed whole-ProjData call, every view
    assert [(c["call"], len(c["views"])) for c in calls] == [("forward ProjData", 16)]


def test_verbosity_key_prints_each_projection_on_stderr_and_nothing_without_it(
    reference_stir, stir_plugin, inputs, tmp_path
):
    """The projector's ``verbosity := 2`` (STIR's parameter file) is the one place the library
    prints: one line per projection on stderr; at the default verbosity, none."""
    img, tpl = inputs / "phantom.hv", inputs / "template.hs"
    said = {}
    for verbosity in (None, 2):
        keys = STIRGPU_CPU + ("" if verbosity is None else f"verbosity := {verbosity}\n")
        (tmp_path / "sg.par").write_text(FORWARD_PAR.format(type="stirgpu", keys=keys))
        proc = run_with_plugin(reference_stir, "forward_project", "sg.hs", img, tpl, "sg.par", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        said[verbosity] = [line for line in proc.stderr.splitlines() if line.startswith("stirgpu: ")]
    assert said[None] == []
    assert len(said[2]) == 1 and said[2][0].startswith("stirgpu: forward ProjData: 16 views x 5 segments ("), said[2]


def test_back_project_utility_equals_parallelproj_and_replaces_the_template(
    reference_stir, stir_plugin, inputs, tmp_path
):
    """Same back projection as Parallelproj of a zero image; and the result replaces a non-zero
    template's values (STIR's documented get_output; STIR 6.5's Parallelproj adds to them)."""
    phantom = read_image(inputs / "phantom.hv")
    write_image(tmp_path / "zeros.hv", VoxelsOnCartesianGrid(phantom.info, 0.0))
    write_image(tmp_path / "ones.hv", VoxelsOnCartesianGrid(phantom.info, 1.0))
    # the key is given because STIR 6.5's parsed lone Parallelproj back projector leaves it
    # uninitialised (neither its constructor nor parse() calls set_defaults): without it STIR
    # restricts to the FOV or not from one run to the next, as a CI run once showed
    (tmp_path / "pp.par").write_text(BACK_PAR.format(type="Parallelproj", keys="restrict to cylindrical FOV := 1\n"))
    (tmp_path / "sg.par").write_text(BACK_PAR.format(type="stirgpu", keys=STIRGPU_CPU))
    data = inputs / "prompts.hs"
    reference_stir.run("back_project", "pp.hv", data, "zeros.hv", "pp.par", cwd=tmp_path)
    proc = run_with_plugin(reference_stir, "back_project", "sg.hv", data, "ones.hv", "sg.par", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert rel_max(read_image(tmp_path / "sg.hv").array, read_image(tmp_path / "pp.hv").array) <= 1e-5


# -- STIR's OSMAPOSL --------------------------------------------------------------------------

OSEM_OBJECTIVE = oc.ADDITIVE_OBJECTIVE
OSEM_TOP = {
    "output filename prefix": "out",
    "number of subsets": 4,
    "number of subiterations": 8,
    "save estimates at subiteration intervals": 4,
}


@pytest.fixture(scope="module")
def parallelproj_osmaposl(reference_stir, inputs, tmp_path_factory):
    """STIR's OSMAPOSL with its Parallelproj pair: the reference folder."""
    root = tmp_path_factory.mktemp("osem_pp")
    (root / "in").symlink_to(inputs, target_is_directory=True)
    proc = oc.run_stir(reference_stir, root / "run", oc.osmaposl_par(OSEM_OBJECTIVE, OSEM_TOP))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"


def _subset_views(k: int) -> list[int]:
    return list(range(k, 16, 4))


def test_osmaposl_with_stirgpu_equals_parallelproj(
    reference_stir, stir_plugin, inputs, parallelproj_osmaposl, tmp_path
):
    """The same .par but 'projector pair type := stirgpu': sensitivities <= 1e-5, estimates <= 1e-4
    of the maximum (``osmaposl_cases``' bounds); and each projection the plugin ran was exactly one subset's views."""
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "recon.par").write_text(oc.osmaposl_par(OSEM_OBJECTIVE, OSEM_TOP, projectors=STIRGPU_PAIR))
    trace = tmp_path / "trace.jsonl"
    proc = run_with_plugin(reference_stir, "OSMAPOSL", "recon.par", cwd=run, trace=trace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    diffs = oc.assert_agree(parallelproj_osmaposl, run)
    assert set(diffs) == {"out_4.hv", "out_8.hv"} | {f"sens_{k}.hv" for k in range(4)}
    calls = read_trace(trace)
    # sensitivities: one back projection per subset; then per subiteration one forward and one
    # back projection of that subset only (subsets 0, 1, 2, 3, 0, ...)
    expected = [("back", _subset_views(k)) for k in range(4)]
    for it in range(8):
        expected += [("forward", _subset_views(it % 4)), ("back", _subset_views(it % 4))]
    assert [(c["call"], c["views"]) for c in calls] == expected
    assert all(c["segments"] == [-2, -1, 0, 1, 2] for c in calls)
    # STIR's per-viewgram calls, one period per subset and direction: 4 views x 5 segments
    periods = read_trace(trace, "viewgram calls")
    assert (
        sorted((p["call"], p["calls"]) for p in periods)
        == [("back viewgrams", 20)] * 12 + [("forward viewgrams", 20)] * 8
    )
    assert all(p["seconds_waiting"] >= 0 and p["seconds_copying"] >= 0 for p in periods)
    # the projections are inside the calls that started them
    assert sum(p["seconds_projecting"] for p in periods) >= 0.99 * sum(c["seconds"] for c in calls)


def _loop_threads(stdout: str) -> set[int]:
    """The OpenMP team sizes STIR reports for its loops ("Starting loop with N threads")."""
    return {int(n) for n in re.findall(r"Starting loop with (\d+) threads", stdout)}


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("omp_num_threads", [None, "3"])
def test_stirs_loops_get_one_thread_only_when_the_gpus_project(
    reference_stir, stir_plugin, inputs, tmp_path, backend, omp_num_threads
):
    """With OMP_NUM_THREADS unset, STIR's loops keep OpenMP's default team with the CPU backend,
    and get one thread when the GPUs project; a user's OMP_NUM_THREADS is always kept."""
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    top = {**OSEM_TOP, "number of subiterations": 1, "save estimates at subiteration intervals": 1}
    pair = STIRGPU_PAIR.replace("backend := cpu", f"backend := {backend}")
    (run / "recon.par").write_text(oc.osmaposl_par(OSEM_OBJECTIVE, top, projectors=pair))
    env = plugin_env(reference_stir)
    env.pop("OMP_NUM_THREADS", None)
    if omp_num_threads is not None:
        env["OMP_NUM_THREADS"] = omp_num_threads
    proc = run_with_plugin(reference_stir, "OSMAPOSL", "recon.par", cwd=run, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if omp_num_threads is not None:
        expected = int(omp_num_threads)
    elif backend == "cuda":
        expected = 1
    else:
        expected = len(os.sched_getaffinity(0))
    assert _loop_threads(proc.stdout + proc.stderr) == {expected}


def test_osmaposl_through_stirs_python_classes(
    reference_stir, stir, stir_plugin, inputs, parallelproj_osmaposl, tmp_path, monkeypatch
):
    """STIR's Python classes with set_projector_pair_sptr(stirgpu.stir_plugin.projector_pair(...)):
    the objective function and OSMAPOSL as STIR's Python users build them."""
    import stirgpu.stir_plugin as sp

    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("STIRGPU_STIR_PLUGIN_TRACE", str(trace))
    sp.load()
    pair = sp.projector_pair(backend="cpu")
    assert isinstance(pair, stir.ProjectorByBinPair)
    monkeypatch.chdir(tmp_path)
    prompts = stir.ProjData.read_from_file(str(inputs / "prompts.hs"))
    obj = stir.PoissonLogLikelihoodWithLinearModelForMeanAndProjData3DFloat()
    obj.set_proj_data_sptr(prompts)
    obj.set_additive_proj_data_sptr(stir.ProjData.read_from_file(str(inputs / "additive.hs")))
    obj.set_normalisation_sptr(stir.BinNormalisationFromProjData(str(inputs / "norm.hs")))
    obj.set_projector_pair_sptr(pair)
    obj.set_num_subsets(4)
    recon = stir.OSMAPOSLReconstruction3DFloat()
    recon.set_objective_function(obj)
    recon.set_num_subsets(4)
    recon.set_num_subiterations(4)
    recon.set_output_filename_prefix("py")
    recon.set_save_interval(4)
    target = stir.FloatVoxelsOnCartesianGrid(prompts.get_proj_data_info(), 1.0)
    target.fill(1.0)
    recon.set_up(target)
    recon.reconstruct(target)
    estimate = np.asarray(target.as_array())
    assert rel_max(estimate, read_image(parallelproj_osmaposl / "out_4.hv").array) <= oc.ESTIMATE_TOL
    calls = read_trace(trace)
    assert [c["call"] for c in calls] == ["back"] * 4 + ["forward", "back"] * 4
    assert all(c["views"] in [_subset_views(k) for k in range(4)] for c in calls)


#: STIR's examples/python/recon_demo.py, as its users write it: the reconstruction object is
#: never deleted, so STIR's Python module destroys it (and the plugin's pair) while Python exits
RECONSTRUCT_AND_EXIT = """import stir
import stirgpu.stir_plugin as sp

sp.load()
recon = stir.OSMAPOSLReconstruction3DFloat("recon.par")
target = stir.FloatVoxelsOnCartesianGrid.read_from_file("../in/phantom.hv")
target.fill(1)
recon.set_up(target)
recon.reconstruct(target)
print("reconstructed", flush=True)
"""


def test_a_python_process_that_reconstructed_through_the_plugin_exits_cleanly(
    reference_stir, stir_plugin, inputs, tmp_path
):
    """A script that ends without deleting its OSMAPOSL object: Python's exit destroys it, and
    with it the plugin's projector pair, while the interpreter finalises; the plugin then leaves
    its Python session alone (it used to run Python there and crash the exit, rc 139)."""
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    top = {**OSEM_TOP, "number of subiterations": 2, "save estimates at subiteration intervals": 2}
    (run / "recon.par").write_text(oc.osmaposl_par(OSEM_OBJECTIVE, top, projectors=STIRGPU_PAIR))
    (run / "demo.py").write_text(RECONSTRUCT_AND_EXIT)
    trace = tmp_path / "trace.jsonl"
    env = plugin_env(reference_stir, trace)
    env["PYTHONPATH"] = os.pathsep.join([str(reference_stir.python_dir), env["PYTHONPATH"]])
    proc = subprocess.run([sys.executable, "demo.py"], cwd=run, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.splitlines()[-1] == "reconstructed"
    assert read_trace(trace), "the reconstruction did not run through the plugin"
    assert (run / "out_2.hv").is_file()


# -- subsets: only the subset's views -------------------------------------------------------


def test_whole_projdata_subset_calls_touch_only_the_subset(
    reference_stir, stir, stir_plugin, inputs, tmp_path, monkeypatch
):
    """forward_project(ProjData, image, 1, 4) and back_project(image, ProjData, 1, 4) of the
    stirgpu types: the subset's views equal Parallelproj's, all other bins stay zero (STIR's
    rule), and the plugin projects the subset's views only, as one streamed call each."""
    import stirgpu.stir_plugin as sp

    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("STIRGPU_STIR_PLUGIN_TRACE", str(trace))
    sp.load()
    prompts, image = read_inputs(stir, inputs)
    pdi = prompts.get_proj_data_info()
    exam = prompts.get_exam_info()
    # STIR's reference through its Parallelproj *pair*: a lone BackProjectorByBinParallelproj
    # made from Python leaves 'restrict to cylindrical FOV' uninitialised (its constructor does
    # not set it; only parsing and the pair's set_up do)
    reference = stir.ProjectorByBinPairUsingParallelproj()
    reference.set_up(pdi, image)
    results = {}
    for name, fp, bp in (
        ("stirgpu", sp.forward_projector(backend="cpu"), sp.back_projector(backend="cpu")),
        ("pp", reference.get_forward_projector(), reference.get_back_projector()),
    ):
        if name == "stirgpu":
            fp.set_up(pdi, image)
            bp.set_up(pdi, image)
        out = stir.ProjDataInMemory(exam, pdi)
        out.fill(5.0)
        fp.forward_project(out, image, 1, 4)
        back = image.get_empty_copy()
        bp.back_project(back, prompts, 1, 4)
        results[name] = (np.asarray(out.as_array()), np.asarray(back.as_array()))
    (fwd, back), (fwd_pp, back_pp) = results["stirgpu"], results["pp"]
    assert rel_max(fwd, fwd_pp) == 0 and rel_max(back, back_pp) <= 1e-5
    in_subset = np.zeros(16, bool)
    in_subset[_subset_views(1)] = True
    assert np.all(fwd[..., ~in_subset, :] == 0) and np.any(fwd[..., in_subset, :] > 0)  # (views, tangential) last
    calls = read_trace(trace)
    assert [(c["call"], c["views"]) for c in calls] == [
        ("forward ProjData", _subset_views(1)),
        ("back ProjData", _subset_views(1)),
    ]
    bins_per_view = sum(pdi.get_num_axial_poss(s) for s in range(-2, 3)) * 64
    assert all(c["bins"] == 4 * bins_per_view for c in calls)


def test_lent_proj_data_declares_what_stirs_access_object_does(stir, stir_plugin, inputs, monkeypatch):
    """The plugin's lent ProjData on STIR's real access object, inside STIR's own calls: lent as
    output it declares writable and a viewgram written reads back (and is in STIR's ProjData
    afterwards); lent as input it declares not writable, a write is a StoreAbilityError (the
    store's own refusal, before the C++ side's), and reads are STIR's viewgrams; neither
    declares parallel I/O (one STIR call at a time) or anything of a file."""
    import stirgpu.stir_plugin as sp
    from stirgpu.errors import StoreAbilityError
    from stirgpu.formats import Residence
    from stirgpu.stir_plugin import bridge

    seen = {}
    forward, back = bridge.PairSession.forward_proj_data, bridge.PairSession.back_proj_data

    def check(name, store):
        seen[name] = {"abilities": store.abilities, "view 3": store.get_viewgram(3, 0)}
        if store.abilities.writable:
            store.set_viewgram(np.full(seen[name]["view 3"].shape, 4.0, np.float32), 3, 0)
            seen[name]["written"] = store.get_viewgram(3, 0)
        else:
            try:
                store.set_viewgram(np.zeros_like(seen[name]["view 3"]), 3, 0)
            except StoreAbilityError as e:
                seen[name]["refused"] = str(e)

    def checked_forward(self, access, subset_num, num_subsets):
        check("output", self._lent(access, "output projection data", writable=True))
        forward(self, access, subset_num, num_subsets)

    def checked_back(self, access, subset_num, num_subsets):
        check("input", self._lent(access, "projection data", writable=False))
        back(self, access, subset_num, num_subsets)

    monkeypatch.setattr(bridge.PairSession, "forward_proj_data", checked_forward)
    monkeypatch.setattr(bridge.PairSession, "back_proj_data", checked_back)
    sp.load()
    prompts, image = read_inputs(stir, inputs)
    pdi = prompts.get_proj_data_info()
    fp, bp = sp.forward_projector(backend="cpu"), sp.back_projector(backend="cpu")
    fp.set_up(pdi, image)
    bp.set_up(pdi, image)
    out = stir.ProjDataInMemory(prompts.get_exam_info(), pdi)
    out.fill(1.0)
    fp.forward_project(out, image, 0, 4)  # subset 0: views 0, 4, 8, 12 (view 3 is not projected)
    bp.back_project(image.get_empty_copy(), prompts, 0, 4)
    for name, writable in (("output", True), ("input", False)):
        a = seen[name]["abilities"]
        assert a.readable and a.writable is writable
        assert not (a.parallel_reads or a.parallel_writes or a.write_behind or a.abortable or a.host_memory)
        assert a.residence is Residence.FOREIGN
    # (STIR zeroes an output before its projector writes the subset)
    assert np.all(seen["output"]["view 3"] == 0.0) and np.all(seen["output"]["written"] == 4.0)
    assert np.all(out.get_viewgram(3, 0).as_array() == 4.0)
    assert "lent as input" in seen["input"]["refused"]
    np.testing.assert_array_equal(seen["input"]["view 3"], prompts.get_viewgram(3, 0).as_array())


# -- errors and Ctrl-C ------------------------------------------------------------------------


def test_python_errors_are_stir_errors_in_stirs_python_module(stir, stir_plugin, inputs):
    import stirgpu.stir_plugin as sp

    sp.load()
    prompts, image = read_inputs(stir, inputs)
    fp = sp.forward_projector(backend="cuda")  # no GPU here (and none on CI)
    with pytest.raises(RuntimeError, match=r"stirgpu: set_up: .*(cuda|CUDA|GPU)"):
        fp.set_up(prompts.get_proj_data_info(), image)
    fp = sp.forward_projector(backend="cpu")
    fp.set_up(prompts.get_proj_data_info(), image)
    with pytest.raises(RuntimeError, match="stirgpu: forward_project called before set_input"):
        fp.forward_project(stir.ProjDataInMemory(prompts.get_exam_info(), prompts.get_proj_data_info()))


def test_refused_options_and_errors_reach_stir_executables_as_stir_errors(
    reference_stir, stir_plugin, inputs, tmp_path
):
    (tmp_path / "bad.par").write_text(FORWARD_PAR.format(type="stirgpu", keys="backend := cuda\n"))
    proc = run_with_plugin(
        reference_stir,
        "forward_project",
        "out.hs",
        inputs / "phantom.hv",
        inputs / "template.hs",
        "bad.par",
        cwd=tmp_path,
    )
    # STIR's executables do not catch STIR's errors; with the plugin loaded they end with status 1
    # and the message, not in abort() (SIGABRT, as if they had crashed)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    assert "ERROR: stirgpu: set_up:" in proc.stderr
    assert "The program ends on this error (exit status 1): ERROR: stirgpu: set_up:" in proc.stderr


def test_an_error_inside_stirs_openmp_loop_is_a_stir_error_after_the_loop(
    reference_stir, stir_plugin, inputs, parallelproj_osmaposl, tmp_path
):
    """The first forward projection runs inside OSMAPOSL's OpenMP loop (sensitivities are read,
    not computed); its error (the trace file cannot be written: it is a folder) is kept, and
    raised by get_output after the loop: one STIR error, the process not killed from the loop."""
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    for k in range(4):
        for ext in ("hv", "v"):
            (run / f"sens_{k}.{ext}").write_bytes((parallelproj_osmaposl / f"sens_{k}.{ext}").read_bytes())
    objective = {**OSEM_OBJECTIVE, "recompute sensitivity": 0}
    (run / "recon.par").write_text(oc.osmaposl_par(objective, OSEM_TOP, projectors=STIRGPU_PAIR))
    (tmp_path / "trace-is-a-folder").mkdir()
    proc = run_with_plugin(reference_stir, "OSMAPOSL", "recon.par", cwd=run, trace=tmp_path / "trace-is-a-folder")
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])  # the error's status, not abort()
    assert "ERROR: stirgpu: forward projection: IsADirectoryError" in proc.stderr


def _objective_with_the_plugin(stir, inputs, tmp_path, monkeypatch):
    """(STIR's Poisson objective function of the prompts, 4 subsets, with the plugin's CPU pair
    set up; an estimate of ones; an empty gradient), the working folder ``tmp_path``."""
    import stirgpu.stir_plugin as sp

    sp.load()
    monkeypatch.chdir(tmp_path)
    prompts = stir.ProjData.read_from_file(str(inputs / "prompts.hs"))
    obj = stir.PoissonLogLikelihoodWithLinearModelForMeanAndProjData3DFloat()
    obj.set_proj_data_sptr(prompts)
    obj.set_projector_pair_sptr(sp.projector_pair(backend="cpu"))
    obj.set_num_subsets(4)
    estimate = stir.FloatVoxelsOnCartesianGrid(prompts.get_proj_data_info(), 1.0)
    estimate.fill(1.0)
    obj.set_up(estimate)
    return obj, estimate, estimate.get_empty_copy()


def test_an_error_inside_the_loop_reaches_stirs_python_module_as_runtime_error(
    stir, stir_plugin, inputs, tmp_path, monkeypatch
):
    """In STIR's Python module an exception leaving STIR's OpenMP loop would end the process: the
    plugin keeps the error of a forward projection inside the loop and raises it after it, so
    Python gets a RuntimeError and this process goes on."""
    obj, estimate, gradient = _objective_with_the_plugin(stir, inputs, tmp_path, monkeypatch)
    (tmp_path / "a-folder").mkdir()
    monkeypatch.setenv("STIRGPU_STIR_PLUGIN_TRACE", str(tmp_path / "a-folder"))  # the trace cannot be written
    with pytest.raises(RuntimeError, match="stirgpu: forward projection: IsADirectoryError"):
        obj.compute_sub_gradient_without_penalty_plus_sensitivity(gradient, estimate, 0)
    monkeypatch.delenv("STIRGPU_STIR_PLUGIN_TRACE")
    obj.compute_sub_gradient_without_penalty_plus_sensitivity(gradient, estimate, 1)  # and it goes on
    assert np.isfinite(np.asarray(gradient.as_array())).all()


def test_ctrl_c_while_the_plugin_reports_its_calls_is_not_lost(stir, stir_plugin, inputs, tmp_path, monkeypatch):
    """Ctrl-C can land in the plugin's report of STIR's per-viewgram calls (its trace and
    verbosity lines), which is not fatal when it fails otherwise: a KeyboardInterrupt there is a
    STIR error all the same (Python raises it only once; a warning would lose it, and STIR's
    loop would run on).  Here report_calls raises it, as Python's signal handler would."""
    from stirgpu.stir_plugin import bridge

    obj, estimate, gradient = _objective_with_the_plugin(stir, inputs, tmp_path, monkeypatch)

    def interrupted(self, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bridge.PairSession, "report_calls", interrupted)
    with pytest.raises(RuntimeError, match=r"stirgpu: interrupted \(Ctrl-C\)"):
        obj.compute_sub_gradient_without_penalty_plus_sensitivity(gradient, estimate, 0)


def test_ctrl_c_in_osmaposl_is_a_stir_error(reference_stir, stir_plugin, inputs, tmp_path):
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    top = {**OSEM_TOP, "number of subiterations": 100000, "save estimates at subiteration intervals": 100000}
    (run / "recon.par").write_text(oc.osmaposl_par(OSEM_OBJECTIVE, top, projectors=STIRGPU_PAIR))
    trace = tmp_path / "trace.jsonl"
    env = plugin_env(reference_stir, trace)
    env["PYTHONFAULTHANDLER"] = "1"  # a hang's SIGABRT below prints every thread's Python stack
    proc = subprocess.Popen(
        plugin_command(reference_stir, "OSMAPOSL", "recon.par"),
        cwd=run,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(read_trace(trace)) < 8 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        proc.send_signal(signal.SIGINT)  # `stirgpu stir` exec'd OSMAPOSL: this is its process
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=60)
            pytest.fail(f"OSMAPOSL with the plugin still ran 120 s after Ctrl-C; its stacks:\n{err[-8000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()  # reaped either way: no process of this test runs on into later tests
        proc.stderr.close()
    assert proc.returncode == 1, (proc.returncode, err[-3000:])  # the error's status, not abort()
    assert "ERROR: stirgpu:" in err and "interrupted (Ctrl-C)" in err
