"""The STIR plugin on TOF data: STIR's own ``OSMAPOSL`` with ``projector pair type := stirgpu``
against ``stirgpu osmaposl`` on the same ``.par`` and against STIR's Parallelproj pair, and the
plugin's STIR Python objects against stirgpu's own projectors.

STIR 6.5 calls a projector pair per related viewgrams *and timing position*
(``distributable_computation``: a loop over timing positions around the loop over the subset's
views, ``get_related_viewgrams(vs, symmetries, false, timing_pos)``; OpenMP's
``collapse(2)`` deals both to its threads).  For an even number of TOF bins this STIR's
OSMAPOSL runs no projection in its gradient loops at all, with either projector (measured
below), and its Parallelproj projector gives zeros (``docs/tof.md``): the even case is
checked against ``stirgpu``'s own projectors through the Python objects, and STIR's OSMAPOSL on
it for what it does.

Cases (inputs made by ``osmaposl_cases.make_inputs``): GE Discovery MI 4 rings, 3 segments,
8 views, 13 TOF bins (odd, STIR's forward projection); Siemens Vision 600, segment 0, 8 views,
8 TOF bins (even, prompts from stirgpu's forward projection, which equals libparallelproj's
``test_tof_projection_vs_stir.py``).
"""

from __future__ import annotations

import re

import numpy as np
import osmaposl_cases as oc
import pytest
from plugin_runs import (
    BACK_PAR,
    FORWARD_PAR,
    STIRGPU_CPU,
    STIRGPU_PAIR,
    read_inputs,
    read_trace,
    rel_max,
    run_with_plugin,
)

from stirgpu.cli.main import main
from stirgpu.formats import VoxelsOnCartesianGrid, read_from_file, read_image, write_image

pytestmark = pytest.mark.stir

ODD = oc.TofGeometry(
    scanner="GE Discovery MI 4 rings", span=1, max_delta=1, num_views=8, num_tangential_poss=41, tof_mash_factor=29
)
EVEN = oc.TofGeometry(
    scanner="Siemens Vision 600", span=1, max_delta=0, num_views=8, num_tangential_poss=41, tof_mash_factor=33
)
TOP = oc.SHORT_TOP
OBJECTIVE = oc.ADDITIVE_OBJECTIVE
#: the plugin against stirgpu's engine on the same .par: float32 summation order only
SAME_ENGINE_TOL = 1e-5


def _stirgpu_forward_project(folder):
    names = (str(folder / n) for n in ("fwd.hs", "phantom.hv", "template.hs"))
    assert main(["forward-project", *names, "--backend", "cpu", "--quiet"]) == 0


@pytest.fixture(scope="module")
def odd_inputs(reference_stir, stir, tmp_path_factory):
    return oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("tof_odd"), ODD, seed=11, counts=1e6)


@pytest.fixture(scope="module")
def even_inputs(reference_stir, stir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tof_even")
    oc.make_inputs(reference_stir, stir, folder, EVEN, seed=12, counts=1e6, forward_project=_stirgpu_forward_project)
    return folder


def _run_plugin(reference_stir, root, par, trace=None):
    run = root / "plugin"
    run.mkdir(parents=True)
    (run / "recon.par").write_text(par)
    proc = run_with_plugin(reference_stir, "OSMAPOSL", "recon.par", cwd=run, trace=trace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def _run_stirgpu(root, par, capsys):
    run = root / "stirgpu"
    run.mkdir(parents=True)
    (run / "recon.par").write_text(par)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(run)
        assert main(["osmaposl", "recon.par", "--backend", "cpu", "--quiet"]) == 0
    capsys.readouterr()
    return run


def _subset_views(k: int) -> list[int]:
    return list(range(k, 8, 4))


def test_osmaposl_on_odd_tof_bins_equals_stirgpu_osmaposl_and_parallelproj(
    reference_stir, stir_plugin, odd_inputs, tmp_path, capsys
):
    """13 TOF bins, TOF normalisation (so STIR computes TOF sensitivities) and TOF additive
    sinogram: the plugin's estimates and sensitivities equal ``stirgpu osmaposl``'s to float32
    summation order and STIR's Parallelproj pair's within docs/tof.md's bars; per subiteration one
    forward and one back projection of the subset with all 13 timing positions, and STIR's calls
    are one per (segment, view, timing position) of the subset."""
    (tmp_path / "in").symlink_to(odd_inputs, target_is_directory=True)
    trace = tmp_path / "trace.jsonl"
    plugin = _run_plugin(reference_stir, tmp_path, oc.osmaposl_par(OBJECTIVE, TOP, projectors=STIRGPU_PAIR), trace)
    engine = _run_stirgpu(tmp_path, oc.osmaposl_par(OBJECTIVE, TOP, projectors=STIRGPU_PAIR), capsys)
    parallelproj = tmp_path / "parallelproj"
    proc = oc.run_stir(reference_stir, parallelproj, oc.osmaposl_par(OBJECTIVE, TOP))
    assert proc.returncode == 0, proc.stderr[-3000:]
    same = oc.assert_agree(engine, plugin, estimate_tol=SAME_ENGINE_TOL, sensitivity_tol=SAME_ENGINE_TOL)
    assert {"out_2.hv", "out_4.hv"} | {f"sens_{k}.hv" for k in range(4)} <= set(same)
    oc.assert_agree(parallelproj, plugin)
    with read_from_file(odd_inputs / "prompts.hs") as prompts:
        assert prompts.get_proj_data_info().get_num_tof_poss() == 13
    calls = read_trace(trace)
    expected = [("back", _subset_views(k)) for k in range(4)]
    expected += [(call, _subset_views(it)) for it in range(4) for call in ("forward", "back")]
    assert [(c["call"], c["views"]) for c in calls] == expected
    assert all(c["timing_positions"] == 13 and c["segments"] == [-1, 0, 1] for c in calls)
    periods = read_trace(trace, "viewgram calls")
    assert (
        sorted((p["call"], p["calls"]) for p in periods)
        == [("back viewgrams", 2 * 3 * 13)] * 8 + [("forward viewgrams", 2 * 3 * 13)] * 4
    )


def test_forward_and_back_project_utilities_on_tof_data_equal_parallelproj(
    reference_stir, stir_plugin, odd_inputs, tmp_path
):
    """STIR's ``forward_project`` / ``back_project`` with a stirgpu projector on 13 TOF bins (the
    whole-ProjData calls, STIR's get_viewgram / set_viewgram per timing position): forward equal
    to STIR's Parallelproj bit for bit, back within docs/tof.md's 1e-4 of the maximum."""
    image, template, data = odd_inputs / "phantom.hv", odd_inputs / "template.hs", odd_inputs / "prompts.hs"
    zeros = tmp_path / "zeros.hv"  # (STIR 6.5's Parallelproj adds to the template's values)
    write_image(zeros, VoxelsOnCartesianGrid(read_image(image).info, 0.0))
    for kind, keys in (("pp", "restrict to cylindrical FOV := 1\n"), ("sg", STIRGPU_CPU)):
        which = "Parallelproj" if kind == "pp" else "stirgpu"
        (tmp_path / f"{kind}_fwd.par").write_text(FORWARD_PAR.format(type=which, keys=keys))
        (tmp_path / f"{kind}_back.par").write_text(BACK_PAR.format(type=which, keys=keys))
    reference_stir.run("forward_project", "pp.hs", image, template, "pp_fwd.par", cwd=tmp_path)
    reference_stir.run("back_project", "pp.hv", data, zeros, "pp_back.par", cwd=tmp_path)
    for args in (
        ("forward_project", "sg.hs", image, template, "sg_fwd.par"),
        ("back_project", "sg.hv", data, zeros, "sg_back.par"),
    ):
        proc = run_with_plugin(reference_stir, *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
    with read_from_file(tmp_path / "pp.hs") as a, read_from_file(tmp_path / "sg.hs") as b:
        assert b.get_proj_data_info().get_num_tof_poss() == 13
        np.testing.assert_array_equal(b.as_array(), a.as_array())
        assert np.asarray(a.as_array()).max() > 0
    assert rel_max(read_image(tmp_path / "sg.hv").array, read_image(tmp_path / "pp.hv").array) <= 1e-5


def _gradient_timing_positions(stir_output: str) -> set[int]:
    """The timing positions of STIR's per-viewgram log lines (verbosity 3) after the
    sensitivities, i.e. those of the gradient loops."""
    after = stir_output.split("Now processing subset", 1)[1]
    return {int(t) for t in re.findall(r"calculating segment_num: .*, timing_pos_num: (-?\d+)", after)}


def test_osmaposl_on_even_tof_bins_runs_no_gradient_projection_in_this_stir(
    reference_stir, stir_plugin, even_inputs, tmp_path, capsys
):
    """8 TOF bins, no normalisation (STIR's sensitivity then has no TOF): this STIR's OSMAPOSL
    computes the sensitivities but runs no projection in its gradient loops, with the plugin as
    with its Parallelproj pair (STIR's own log, verbosity 3, and the plugin's trace), so both
    estimates are zero after the first subiteration; the plugin's sensitivities equal
    ``stirgpu osmaposl``'s.  (The sources' loop over timing positions ``-max .. max`` reads as
    if it would run; the cause was not found.)  When STIR changes this, this test fails and the
    plugin's even-bin OSMAPOSL can be compared with ``stirgpu osmaposl`` as the odd one is."""
    (tmp_path / "in").symlink_to(even_inputs, target_is_directory=True)
    trace = tmp_path / "trace.jsonl"
    top = {**TOP, "verbosity": 3}
    plugin_par = oc.osmaposl_par(OBJECTIVE, top, projectors=STIRGPU_PAIR, normalisation=None)
    run = tmp_path / "plugin"
    run.mkdir()
    (run / "recon.par").write_text(plugin_par)
    proc = run_with_plugin(reference_stir, "OSMAPOSL", "recon.par", cwd=run, trace=trace)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pp_par = oc.osmaposl_par(OBJECTIVE, top, normalisation=None)
    parallelproj = oc.run_stir(reference_stir, tmp_path / "parallelproj", pp_par)
    assert parallelproj.returncode == 0, parallelproj.stderr[-3000:]
    for out in (proc, parallelproj):
        assert _gradient_timing_positions(out.stdout + out.stderr) == set()
    for folder in (run, tmp_path / "parallelproj"):
        assert all(np.all(read_image(folder / f"out_{k}.hv").array == 0) for k in (2, 4))
    assert [(c["call"], c["views"]) for c in read_trace(trace)] == [("back", _subset_views(k)) for k in range(4)]
    engine_par = oc.osmaposl_par(OBJECTIVE, TOP, projectors=STIRGPU_PAIR, normalisation=None)
    engine = _run_stirgpu(tmp_path, engine_par, capsys)
    for k in range(4):
        sens = read_image(run / f"sens_{k}.hv").array
        assert rel_max(sens, read_image(engine / f"sens_{k}.hv").array) <= SAME_ENGINE_TOL
    assert read_image(engine / "out_4.hv").array.max() > 0  # stirgpu reconstructs the even-bin data


@pytest.fixture(scope="module", params=["odd", "even"])
def tof_case(request):
    """(inputs folder, number of TOF bins) of either case."""
    folder = request.getfixturevalue(f"{request.param}_inputs")
    return folder, {"odd": 13, "even": 8}[request.param]


def _stirgpu_projections(folder, stir_pdi, stir_image):
    """stirgpu's own ProjectorPair (CPU) on the case, set up on STIR's objects as the plugin's is
    (its look-alikes are read by the same converters): the forward projection of the phantom and
    the back projection of the prompts, as arrays in STIR's as_array() layout and (z, y, x).
    (The geometry read from the Interfile header compares equal but can carry an azimuthal
    offset one float32 rounding away, for views unrelated to the scanner's detectors.)"""
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.interop import image_info_from_stir, proj_data_info_from_stir
    from stirgpu.projectors import ProjectorPair

    image = read_image(folder / "phantom.hv")
    with read_from_file(folder / "prompts.hs") as prompts:
        pair = ProjectorPair(backend="cpu")
        pair.set_up(proj_data_info_from_stir(stir_pdi, "pdi"), image_info_from_stir(stir_image, "image"))
        fwd = pair.forward_project(ProjDataInMemory(prompts.get_proj_data_info()), image).as_array()
        back = np.asarray(pair.back_project(None, prompts))
    return fwd, back


def _keys(pdi, timing_outside: bool = True) -> list[tuple[int, int, int]]:
    """(timing position, view, segment) of every related viewgrams: STIR's order (timing
    positions outside, as distributable_computation's loop), or views outside."""
    times = range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)
    views = range(pdi.get_num_views())
    segments = range(pdi.get_min_segment_num(), pdi.get_max_segment_num() + 1)
    if timing_outside:
        return [(t, v, s) for t in times for v in views for s in segments]
    return [(t, v, s) for v in views for t in times for s in segments]


def _per_viewgram_projections(stir, pair, prompts, image, keys):
    """The plugin pair's per-viewgram calls: forward projections of ``image`` into a new
    ProjDataInMemory, the back projection of ``prompts``, one related viewgrams per key."""
    fp, bp = pair.get_forward_projector(), pair.get_back_projector()
    symmetries = fp.get_symmetries_used()
    out = stir.ProjDataInMemory(prompts.get_exam_info(), prompts.get_proj_data_info())
    fp.set_input(image)
    for t, v, s in keys:
        viewgrams = out.get_empty_related_viewgrams(stir.ViewgramIndices(v, s, t), symmetries, False, t)
        assert (viewgrams.get_basic_view_num(), viewgrams.get_basic_segment_num()) == (v, s)
        assert viewgrams.get_basic_timing_pos_num() == t
        fp.forward_project(viewgrams)
        out.set_related_viewgrams(viewgrams)
    bp.start_accumulating_in_new_target()
    for t, v, s in keys:
        bp.back_project(prompts.get_related_viewgrams(stir.ViewgramIndices(v, s, t), symmetries, False, t))
    back = image.get_empty_copy()
    bp.get_output(back)
    return np.asarray(out.as_array()), np.asarray(back.as_array())


def test_python_objects_project_every_timing_position_as_stirgpus_projectors(
    stir, stir_plugin, tof_case, tmp_path, monkeypatch
):
    """STIR's per-viewgram calls on the plugin's STIR Python objects, one related viewgrams per
    (segment, view, timing position) in STIR's order (timing positions outside), and the
    whole-ProjData calls: forward projections equal stirgpu's own projectors' bit for bit, back
    projections to float32 summation order; the forward calls of one set_input cost two
    projections of all timing positions (the first view alone, then the subset rule learnt)."""
    import stirgpu.stir_plugin as sp

    folder, num_tof = tof_case
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("STIRGPU_STIR_PLUGIN_TRACE", str(trace))
    sp.load()
    prompts, image = read_inputs(stir, folder)
    pdi = prompts.get_proj_data_info()
    assert pdi.get_num_tof_poss() == num_tof
    pair = sp.projector_pair(backend="cpu")
    pair.set_up(pdi, image)
    per_viewgram, back_image = _per_viewgram_projections(stir, pair, prompts, image, _keys(pdi))
    whole = stir.ProjDataInMemory(prompts.get_exam_info(), pdi)
    pair.get_forward_projector().forward_project(whole, image)
    whole_back = image.get_empty_copy()
    pair.get_back_projector().back_project(whole_back, prompts)
    fwd, back = _stirgpu_projections(folder, pdi, image)
    assert per_viewgram.shape == fwd.shape == (num_tof, *fwd.shape[1:])
    np.testing.assert_array_equal(per_viewgram, fwd)
    np.testing.assert_array_equal(np.asarray(whole.as_array()), fwd)
    assert rel_max(back_image, back) <= SAME_ENGINE_TOL
    assert rel_max(np.asarray(whole_back.as_array()), back) <= SAME_ENGINE_TOL
    assert all(np.any(per_viewgram[k] > 0) for k in range(num_tof) if np.any(fwd[k] > 0))
    calls = read_trace(trace)
    assert [(c["call"], c["views"]) for c in calls] == [
        ("forward", [0]),
        ("forward", list(range(1, pdi.get_num_views()))),
        ("back", list(range(pdi.get_num_views()))),
        ("forward ProjData", list(range(pdi.get_num_views()))),
        ("back ProjData", list(range(pdi.get_num_views()))),
    ]
    assert all(c["timing_positions"] == num_tof for c in calls)


#: Siemens Vision 600, 24 TOF bins: a view of all timing positions is 315 kB (80 x 41 x 24 floats)
MANY_BINS = oc.TofGeometry(
    scanner="Siemens Vision 600", span=1, max_delta=0, num_views=8, num_tangential_poss=41, tof_mash_factor=11
)


@pytest.fixture(scope="module")
def many_bins_inputs(reference_stir, stir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tof_many_bins")
    options = {"seed": 13, "counts": None, "zoom": 0.5, "forward_project": _stirgpu_forward_project}
    return oc.make_inputs(reference_stir, stir, folder, MANY_BINS, **options)


def test_host_memory_budget_bounds_the_caches_whatever_the_number_of_tof_bins(
    stir, stir_plugin, many_bins_inputs, tmp_path, monkeypatch
):
    """``host memory budget (MB) := 2`` with 315 kB views of 24 timing positions (and an image of
    0.3 MB, so that the engine's own plan fits the budget too): every forward projection holds at
    most 6 views with all their timing positions (one projection serves
    every timing position of its views: here the calls take a view's timing positions in turn),
    the back projections are flushed as the staged viewgrams pass the budget, and the numbers
    equal an ample budget's (forward bit for bit)."""
    import stirgpu.stir_plugin as sp

    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("STIRGPU_STIR_PLUGIN_TRACE", str(trace))
    sp.load()
    prompts, image = read_inputs(stir, many_bins_inputs)
    pdi = prompts.get_proj_data_info()
    results = {}
    for budget in (2, None):
        pair = sp.projector_pair(backend="cpu", **({} if budget is None else {"host_memory_budget_mb": budget}))
        pair.set_up(pdi, image)
        results[budget] = _per_viewgram_projections(stir, pair, prompts, image, _keys(pdi, timing_outside=False))
        if budget == 2:
            calls = read_trace(trace)
    (fwd, back), (fwd_ample, back_ample) = results[2], results[None]
    np.testing.assert_array_equal(fwd, fwd_ample)
    assert rel_max(back, back_ample) <= SAME_ENGINE_TOL and fwd.shape[0] == 24
    # forward: view 0 alone (no subset rule yet), then as many views as fit (6 x 315 kB), the
    # cache emptied for them; then view 7 with the views not cached (0)
    assert [c["views"] for c in calls if c["call"] == "forward"] == [[0], [1, 2, 3, 4, 5, 6], [0, 7]]
    # back: flushed when the staged viewgrams pass 2 MB (inside view 6's timing positions), the
    # rest at get_output
    assert [c["views"] for c in calls if c["call"] == "back"] == [[0, 1, 2, 3, 4, 5, 6], [6, 7]]
    assert all(c["timing_positions"] == 24 for c in calls)
