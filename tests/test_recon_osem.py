"""OSEM (OSMAPOSL without a prior) on small simulated data: convergence properties, STIR's
subset/restart/sensitivity semantics, and the input handling of the objective function.

Data: ECAT 953, span 3, max ring difference 4, 24 views, 64 tangential positions (a 31 x 67 x
67 image), the demo phantom (water cylinder, spheres 4:1, 3:1 and cold), 2e6 counts with
attenuation correction factors and a 20 % flat background, Poisson noise with a fixed seed.
Each reconstruction takes about a second on two CPU cores.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_osem, osem_objective

import stirgpu
from stirgpu.errors import GeometryError, StirGpuError
from stirgpu.formats import ProjDataInMemory, read_image
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import PoissonLogLikelihood, SensitivitySpec, subsets_problem
from stirgpu.recon.arrays import stir_divide, threshold_min_to_small_positive


@pytest.fixture(scope="module")
def problem(osem_problem):
    return osem_problem


_objective = osem_objective
_osem = make_osem


def _region_means(phantom, info, image):
    bg = phantom.cylinder_mask(info).copy()
    for i in range(len(phantom.spheres)):
        bg &= ~phantom.sphere_mask(info, i)
    bg &= (np.abs(np.arange(info.shape[0]) - info.shape[0] // 2) <= info.shape[0] // 4)[:, None, None]
    b = float(image[bg].mean())
    return b, [float(image[phantom.sphere_mask(info, i)].mean()) / b for i in range(len(phantom.spheres))]


def test_mlem_log_likelihood_never_decreases(problem):
    """MLEM (1 subset) is an EM algorithm: the Poisson log-likelihood sum(y log ybar - ybar) of the
    estimate never decreases.  Each record holds the log-likelihood at the estimate before its
    update, so consecutive values must be non-decreasing; the tolerance (1e-9 relative) only
    absorbs the float64 summation of float32 bins, far below the smallest real gain here (~1e-3)."""
    osem = _osem(problem, num_subsets=1, num_subiterations=8, report_log_likelihood=True)
    result = osem.reconstruct()
    ll = np.array([r.log_likelihood for r in result.records])
    assert np.all(np.isfinite(ll))
    steps = np.diff(ll)
    assert np.all(steps >= -1e-9 * np.abs(ll[:-1])), f"log-likelihood decreased: {ll}"
    assert ll[-1] - ll[0] > 0.1 * abs(ll[0]), "MLEM should raise the log-likelihood substantially"
    # the full-data value at the final estimate continues the sequence
    final = osem.log_likelihood(result.image)
    assert final >= ll[-1] - 1e-9 * abs(ll[-1])
    assert osem.log_likelihood(osem.initial_image(1.0)) == pytest.approx(ll[0], rel=1e-9)


def test_osem_recovers_phantom_contrast(problem):
    """3 OSEM iterations of 4 subsets recover the phantom: the background level within 5 % of the
    truth (the reconstruction is in the truth's units: counts per unit activity), the 4:1 and 3:1
    spheres above 3.0 and 2.2, the cold sphere below 0.6 (measured: 3.52, 2.50, 0.46; spheres of 5
    and 4 voxels radius are limited by partial volume at 3 iterations).  A uniform image has
    contrast 1 everywhere, so this guards against an update that does not converge to the data."""
    pdi, info, phantom, sim = problem
    result = _osem(problem, num_subsets=4, num_subiterations=12).reconstruct()
    b_true, _ = _region_means(phantom, info, sim.truth)
    b, c = _region_means(phantom, info, result.image)
    assert abs(b / b_true - 1) < 0.05
    assert c[0] > 3.0 and c[1] > 2.2
    assert c[2] < 0.6


def test_restart_from_saved_estimate_equals_uninterrupted_run(problem, tmp_path):
    """Stopping after subiteration 3 and restarting from the saved prefix_3.hv with 'start at
    subiteration number := 4' gives the uninterrupted run's prefix_6.hv: the subset of a
    subiteration depends only on its number, and the saved file holds the float32 estimate
    exactly.  The initial-positivity threshold is what STIR applies to the restart image (it lifts
    the estimate's exact zeros to 1e-6 x its smallest positive value), so with it on the results
    differ by ~1e-6 of the maximum, with it off only by float32 summation order (< 1e-6)."""
    full = _osem(problem, num_subsets=3, num_subiterations=6, save_interval=3, output_filename_prefix=tmp_path / "full")
    res = full.reconstruct()
    assert [p.name for p in res.saved] == ["full_3.hv", "full_6.hv"]
    ref = read_image(tmp_path / "full_6.hv").array
    for positivity, tol in ((False, 1e-6), (True, 1e-5)):
        again = _osem(
            problem,
            num_subsets=3,
            num_subiterations=6,
            start_subiteration_num=4,
            save_interval=3,
            output_filename_prefix=tmp_path / f"restart{int(positivity)}",
            enforce_initial_positivity=positivity,
        )
        res2 = again.reconstruct(read_image(tmp_path / "full_3.hv"))
        assert [r.subset for r in res2.records] == [0, 1, 2]
        assert [p.name for p in res2.saved] == [f"restart{int(positivity)}_6.hv"]
        got = read_image(res2.saved[0]).array
        assert np.abs(got - ref).max() <= tol * ref.max()


def test_subset_order_follows_stir(problem):
    """STIR: subiteration n uses subset (n + start_subset - 1) mod K."""
    osem = _osem(problem, num_subsets=4, num_subiterations=6, start_subset_num=2)
    assert [osem.subset_num(n) for n in range(1, 7)] == [2, 3, 0, 1, 2, 3]
    osem = _osem(problem, num_subsets=4, num_subiterations=7, start_subiteration_num=5)
    assert osem.save_points() == [7]


@pytest.mark.parametrize("subset_sensitivities", [True, False])
def test_unbalanced_subsets_are_refused_as_stir_refuses_them(problem, subset_sensitivities):
    """24 views in 5 subsets are unbalanced (5 or 4 views): STIR's OSMAPOSLReconstruction::set_up
    refuses this with or without subset sensitivities, and so does the OSEM class, in the words
    of an OSMAPOSL .par run (subsets_problem), naming the numbers that divide the views."""
    spec = SensitivitySpec(use_subset_sensitivities=subset_sensitivities)
    with pytest.raises(StirGpuError) as caught:
        _osem(problem, num_subsets=5, sensitivity=spec)
    assert str(caught.value) == subsets_problem(5, 24)
    assert "divides 24 (1, 2, 3, 4, 6, 8, 12, 24)" in str(caught.value)
    _osem(problem, num_subsets=6, sensitivity=spec)


def test_subsets_problem_follows_osmaposl():
    """STIR's rule: 1 <= K <= views and K divides the views (7 of 96 refused, as the command line
    refuses it); None where OSMAPOSL runs."""
    assert subsets_problem(8, 96) is None and subsets_problem(96, 96) is None and subsets_problem(1, 7) is None
    assert subsets_problem(7, 96).startswith("7 subsets of 96 views are unbalanced")
    assert subsets_problem(0, 96) == "number of subsets 0: must be between 1 and the number of views (96)"
    assert subsets_problem(97, 96) == "number of subsets 97: must be between 1 and the number of views (96)"


def test_bad_iteration_settings_are_refused(problem):
    """Range errors STIR reports at set-up are refused at construction, before any work."""
    for kw in (
        {"num_subsets": 0},
        {"num_subsets": 25},
        {"num_subiterations": 0},
        {"start_subset_num": 4, "num_subsets": 4},
        {"save_interval": 9, "num_subiterations": 8},
        {"start_subiteration_num": 0},
    ):
        with pytest.raises(StirGpuError):
            _osem(problem, **kw)


def test_total_sensitivity_is_sum_of_subset_sensitivities(problem):
    """With 'use subset sensitivities := 0' every subset uses total / K; the total is B(1/f) over all
    views, i.e. the sum of the subset sensitivities (to float32 summation order, 1e-5)."""
    a = _osem(problem, num_subsets=4, sensitivity=SensitivitySpec(use_subset_sensitivities=True))
    b = _osem(problem, num_subsets=4, sensitivity=SensitivitySpec(use_subset_sensitivities=False))
    a.set_up()
    b.set_up()
    total = sum(a.sensitivities[k] for k in range(4))
    assert np.abs(b.sensitivities.total - total).max() <= 1e-5 * total.max()
    for k in range(4):
        assert np.array_equal(b.sensitivities[k], b.sensitivities.total / np.float32(4))


def test_sensitivity_files_are_written_and_read_back(problem, tmp_path):
    """recompute := 1 writes sens_%d.hv (one per subset); recompute := 0 reads them and gives the
    same reconstruction as computing them (identical images in memory -> identical estimates up
    to float32 summation order)."""
    spec = SensitivitySpec(use_subset_sensitivities=True, recompute=True, subset_filenames=str(tmp_path / "s_%d.hv"))
    a = _osem(problem, num_subsets=2, num_subiterations=2, sensitivity=spec)
    ra = a.reconstruct()
    assert [p.name for p in ra.sensitivity_files] == ["s_0.hv", "s_1.hv"]
    for k in range(2):
        assert np.array_equal(read_image(tmp_path / f"s_{k}.hv").array, a.sensitivities[k])
    spec_read = SensitivitySpec(
        use_subset_sensitivities=True, recompute=False, subset_filenames=str(tmp_path / "s_%d.hv")
    )
    b = _osem(problem, num_subsets=2, num_subiterations=2, sensitivity=spec_read)
    rb = b.reconstruct()
    assert rb.sensitivity_files == []
    assert np.abs(rb.image - ra.image).max() <= 1e-6 * ra.image.max()
    total = SensitivitySpec(use_subset_sensitivities=False, recompute=True, filename=tmp_path / "total")
    c = _osem(problem, num_subsets=2, num_subiterations=1, sensitivity=total)
    assert [p.name for p in c.reconstruct().sensitivity_files] == ["total.hv"]


def test_sensitivity_with_wrong_geometry_is_refused(problem, tmp_path):
    """A sensitivity file for another image geometry is refused (STIR: 'sensitivity and target
    should have the same characteristics')."""
    from stirgpu.formats import VoxelsOnCartesianGrid, write_image

    pdi, info, _, sim = problem
    write_image(tmp_path / "bad_0.hv", VoxelsOnCartesianGrid(info.replace(shape=(31, 65, 65))))
    spec = SensitivitySpec(use_subset_sensitivities=True, recompute=False, subset_filenames=str(tmp_path / "bad_%d.hv"))
    with pytest.raises(GeometryError, match="geometry"):
        _osem(problem, num_subsets=1, sensitivity=spec).set_up()


def _end_planes_only(pd: ProjDataInMemory, values: ProjDataInMemory) -> ProjDataInMemory:
    """``values`` on the first and last axial position of segment 0, 0 elsewhere."""
    pdi = pd.get_proj_data_info()
    out = ProjDataInMemory(pdi)
    seg0 = values.get_segment_by_view(0)
    keep = np.zeros_like(seg0)
    keep[:, [0, -1], :] = seg0[:, [0, -1], :]
    out.set_segment_by_view(keep, 0)
    return out


def test_zero_end_planes_of_segment_0(problem):
    """'zero end planes of segment 0': the first and last axial position of segment 0 drop out of
    the sensitivity and of the data.  Identity checked: sens(all) - sens(zeroed) equals the back
    projection of 1/f restricted to those two planes (float32 sums: 1e-5 of the maximum); and
    changing the measured data there changes nothing when they are zeroed."""
    pdi, info, _, sim = problem
    inv_f = ProjDataInMemory(pdi)
    for s in pdi.segment_nums:
        inv_f.set_segment_by_view(1 / sim.normalisation.get_segment_by_view(s), s)
    a = _osem(problem, num_subsets=2)
    b = _osem(problem, objective=_objective(sim, zero_end_planes_of_segment_0=True), num_subsets=2)
    a.set_up()
    b.set_up()
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    for k in range(2):
        expected = pp.back_project(None, _end_planes_only(inv_f, inv_f), subset_num=k, num_subsets=2)
        diff = a.sensitivities[k] - b.sensitivities[k]
        assert np.abs(diff - expected).max() <= 1e-5 * a.sensitivities[k].max()
        assert expected.max() > 1e-3 * a.sensitivities[k].max()
    # data on the end planes are ignored
    changed = ProjDataInMemory.from_proj_data(sim.prompts)
    seg0 = changed.get_segment_by_view(0)
    seg0[:, [0, -1], :] *= 7
    changed.set_segment_by_view(seg0, 0)
    obj1 = _objective(sim, zero_end_planes_of_segment_0=True)
    obj2 = PoissonLogLikelihood(
        changed, additive=sim.additive, normalisation=sim.normalisation, zero_end_planes_of_segment_0=True
    )
    x1 = _osem(problem, objective=obj1, num_subsets=2, num_subiterations=2).reconstruct().image
    x2 = _osem(problem, objective=obj2, num_subsets=2, num_subiterations=2).reconstruct().image
    assert np.abs(x1 - x2).max() <= 1e-6 * x1.max()
    x3 = _osem(problem, objective=_objective(sim), num_subsets=2, num_subiterations=2).reconstruct().image
    assert np.abs(x1 - x3).max() > 1e-3 * x1.max()


def test_maximum_absolute_segment_number(problem):
    """'maximum absolute segment number to process := 0': only segment 0 is used.  Identity
    checked: the sensitivity equals the full-geometry back projection of 1/f with every other
    segment set to 0 (1e-5 of the maximum, float32 sums)."""
    pdi, info, _, sim = problem
    osem = _osem(problem, objective=_objective(sim, max_segment_num_to_process=0), num_subsets=1)
    osem.set_up()
    inv_f = ProjDataInMemory(pdi)
    inv_f.set_segment_by_view(1 / sim.normalisation.get_segment_by_view(0), 0)
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    expected = pp.back_project(None, inv_f)
    assert np.abs(osem.sensitivities[0] - expected).max() <= 1e-5 * expected.max()
    with pytest.raises(GeometryError, match="out of range"):
        _objective(sim, max_segment_num_to_process=2)


def test_objective_refuses_mismatched_geometry(problem):
    """An additive term or normalisation of another geometry is refused, naming which one."""
    pdi, info, _, sim = problem
    other = ProjDataInMemory(pdi.replace(num_views=12))
    with pytest.raises(GeometryError, match="additive"):
        PoissonLogLikelihood(sim.prompts, additive=other)
    with pytest.raises(GeometryError, match="normalisation"):
        PoissonLogLikelihood(sim.prompts, normalisation=other)


def test_simulated_additive_sinogram_is_a_flat_background_times_the_factors(problem):
    """``SimulatedData.additive`` is STIR's additive sinogram a (normalised units): a flat
    background b in measured units times the factors, a = b f, so a / f is one value and its
    share of the mean data is simulate's background_fraction (0.2 here)."""
    pdi, info, phantom, sim = problem
    b = np.concatenate(
        [
            (sim.additive.get_segment_by_view(s) / sim.normalisation.get_segment_by_view(s)).ravel()
            for s in pdi.segment_nums
        ]
    )
    np.testing.assert_allclose(b, b[0], rtol=1e-6)
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    ax = ProjDataInMemory(pdi)
    pp.forward_project(ax, sim.truth)
    mean = sum(
        float(
            np.sum(
                (ax.get_segment_by_view(s) + sim.additive.get_segment_by_view(s))
                / sim.normalisation.get_segment_by_view(s)
            )
        )
        for s in pdi.segment_nums
    )
    assert b.sum() / mean == pytest.approx(0.2, rel=1e-4)


def test_phantom_refuses_the_old_name_of_its_cylinder_value(problem):
    """The phantom's activity level is ``cylinder_value`` ('background' names the projection
    data's measured-units term everywhere); the old keyword stops with both names."""
    from stirgpu.recon.simulate import Phantom

    _, info, phantom, _ = problem
    p = Phantom(radius=phantom.radius, half_length=phantom.half_length, cylinder_value=2.5)
    assert set(np.unique(p.activity(info))) == {0.0, 2.5}
    with pytest.raises(TypeError, match=r"Phantom\(\).*'background'.*'cylinder_value'"):
        Phantom(radius=10.0, half_length=10.0, background=2.5)


def test_stir_divide_and_positivity_rules():
    """STIR's update division: 0/0 -> 0 where both are below 1e-6 x max(numerator), else n/d;
    initial positivity: values below 1e-6 x (smallest positive) are raised to it, all-nonpositive
    images become 1e-6."""
    num = np.array([0.0, 2.0, 1e-8, 4.0], dtype=np.float32)
    den = np.array([0.0, 4.0, 0.0, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(stir_divide(num.copy(), den), [0.0, 0.5, 0.0, 4.0])
    img = np.array([-1.0, 0.0, 2.0, 5.0], dtype=np.float32)
    np.testing.assert_allclose(threshold_min_to_small_positive(img), [2e-6, 2e-6, 2.0, 5.0])
    np.testing.assert_allclose(threshold_min_to_small_positive(np.zeros(3, np.float32)), [1e-6] * 3)


@pytest.mark.gpu
def test_estimate_stays_on_the_gpu(problem):
    """On the CUDA backend the estimate and sensitivities are cupy arrays (no host round trip of
    the image between subiterations is needed by the driver), and the result equals the CPU one
    to float32 summation order (1e-5 of the maximum)."""
    import cupy

    gpu = _osem(problem, backend="cuda", num_subsets=4, num_subiterations=4).reconstruct()
    assert isinstance(gpu.image, cupy.ndarray)
    cpu = _osem(problem, backend="cpu", num_subsets=4, num_subiterations=4).reconstruct()
    assert float(abs(gpu.image.get() - cpu.image).max()) <= 1e-5 * float(cpu.image.max())


class RecordingDisplay:
    """A progress display (stirgpu.config(progress=...)) that records every task: its name, total,
    unit, the steps reported, whether it was closed, and how deep it was started (how many tasks
    were open then)."""

    def __init__(self):
        self.tasks: list[dict] = []
        self._open = 0

    def start(self, total, desc, unit):
        task = {"desc": desc, "total": total, "unit": unit, "done": 0, "closed": False, "depth": self._open}
        self.tasks.append(task)
        self._open += 1
        display = self

        class Task:
            def update(self, n=1):
                task["done"] += n

            def close(self):
                task["closed"] = True
                display._open -= 1

        return Task()


def test_progress_goes_to_the_configured_display_and_nothing_is_printed(problem, capsys):
    """The library prints nothing, with or without a display: without one it reports nothing;
    with one (stirgpu.config(progress=display)) OSEM reports two outer tasks, the subset
    sensitivities (K subsets) and the subiterations, each counted to its end and closed, and
    the projections inside them report their chunks as nested tasks.  ``progress=True`` (the
    library drew tqdm bars once) is refused in one line saying to pass a display."""
    _osem(problem, num_subsets=2, num_subiterations=3).reconstruct()
    display = RecordingDisplay()
    with stirgpu.config(progress=display):
        _osem(problem, num_subsets=2, num_subiterations=3).reconstruct()
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    outer = [(t["desc"], t["total"], t["unit"], t["done"], t["closed"]) for t in display.tasks if t["depth"] == 0]
    assert outer == [("sensitivities", 2, "subset", 2, True), ("OSEM", 3, "subiteration", 3, True)]
    inner = [t for t in display.tasks if t["depth"] > 0]
    assert inner and all(t["unit"] == "chunk" and t["done"] == t["total"] and t["closed"] for t in inner)
    with pytest.raises(StirGpuError, match=r"^config: progress must be None or a display .*not True; the library"):
        with stirgpu.config(progress=True):
            pass


def test_output_file_names_follow_stir():
    """STIR writes estimates as <prefix>_<n> plus Interfile's .hv (added only to names without an
    extension), after multiples of the save interval and after the last subiteration."""
    from stirgpu.recon.naming import estimate_filename, estimate_save_points, interfile_image_name

    assert estimate_filename("out/osem", 12).as_posix() == "out/osem_12.hv"
    assert interfile_image_name("sens_3.hv").name == "sens_3.hv"
    assert interfile_image_name("total").name == "total.hv"
    assert estimate_save_points(1, 10, 4) == [4, 8, 10]
    assert estimate_save_points(5, 8, 4) == [8]
    assert estimate_save_points(1, 3, 1) == [1, 2, 3]


def test_objective_reports_follow_stirs_points(problem):
    """``report_objective_interval=3`` over 7 subiterations records the objective function after
    subiterations 3, 6 and 7 only (STIR's end_of_iteration_processing rule: multiples of the
    interval and the last), and each value is the full-data log-likelihood at that subiteration's
    new estimate.  Guards the report points and that a report is taken after, not before, the
    update."""
    images = {}
    osem = _osem(problem, num_subsets=2, num_subiterations=7, report_objective_interval=3)
    result = osem.reconstruct(callback=lambda rec, x: images.__setitem__(rec.subiteration, x.copy()))
    values = {r.subiteration: r.objective_function_value for r in result.records}
    assert [n for n, v in values.items() if v is not None] == [3, 6, 7]
    for n in (3, 6, 7):
        assert values[n] == pytest.approx(osem.log_likelihood(images[n]), rel=1e-12)


def _interrupt_writing(monkeypatch, subiteration: int, after_commit: bool):
    """OSEM's estimate writer, interrupted (KeyboardInterrupt, as a Ctrl-C) while writing the
    estimate of ``subiteration``: once its files are renamed into place (the writer's last step,
    its folder's fsync, is where the interrupt lands) or before anything of it is written."""
    import stirgpu.recon.osem as osem_module

    real = osem_module.write_image

    def writer(path, image, overwrite=False):
        if str(path).endswith(f"_{subiteration}.hv"):
            if after_commit:
                real(path, image, overwrite=overwrite)
            raise KeyboardInterrupt
        return real(path, image, overwrite=overwrite)

    monkeypatch.setattr(osem_module, "write_image", writer)


@pytest.mark.parametrize("after_commit", [True, False], ids=["after-its-rename", "before-it-is-written"])
def test_an_interrupt_while_an_estimate_is_written_names_it_complete_only_once_in_place(
    problem, tmp_path, monkeypatch, after_commit
):
    """Ctrl-C while an estimate is written: once its header is renamed into place (header last:
    its data are complete) the interrupt's note names it as complete and restarts after it,
    whatever was still to run in the writer (and the run stopped in the next subiteration);
    before that, an older file of the same name left
    by an earlier run (overwritten by this one) is not taken for this run's."""
    prefix = tmp_path / "est"
    args = dict(num_subsets=3, num_subiterations=6, save_interval=2, output_filename_prefix=prefix, overwrite=True)
    _osem(problem, **args).reconstruct()  # an earlier run: est_2, est_4 and est_6 exist
    earlier = read_image(tmp_path / "est_4.hv").array
    _interrupt_writing(monkeypatch, 4, after_commit)
    with pytest.raises(KeyboardInterrupt) as caught:
        _osem(problem, **args).reconstruct(np.full(problem[1].shape, 2.0, np.float32))
    (note,) = caught.value.__notes__
    done = 4 if after_commit else 2
    stopped = 5 if after_commit else 4  # the first subiteration whose estimate is not complete
    assert note.startswith(f"stopped in subiteration {stopped}: estimates up to subiteration {done} are complete")
    assert note.endswith(
        f"'initial estimate := {tmp_path / f'est_{done}.hv'}' and 'start at subiteration number := {done + 1}'"
    )
    now = read_image(tmp_path / "est_4.hv").array
    assert not np.array_equal(now, earlier) if after_commit else np.array_equal(now, earlier)


def test_an_interrupt_between_subiterations_restarts_after_the_last_complete_estimate(problem, tmp_path):
    """Ctrl-C after subiteration 2's estimate is written but before subiteration 3 starts (here
    in the callback): the note says the run stopped in subiteration 3, with 2 complete, and
    restarts at 3 -- never 'stopped in 2' beside '2 is complete'."""
    prefix = tmp_path / "est"

    def interrupt_after_two(record, image):
        if record.subiteration == 2:
            raise KeyboardInterrupt

    osem = _osem(problem, num_subsets=2, num_subiterations=6, save_interval=1, output_filename_prefix=prefix)
    with pytest.raises(KeyboardInterrupt) as caught:
        osem.reconstruct(callback=interrupt_after_two)
    (note,) = caught.value.__notes__
    assert note.startswith("stopped in subiteration 3: estimates up to subiteration 2 are complete")
    assert note.endswith(f"'initial estimate := {tmp_path / 'est_2.hv'}' and 'start at subiteration number := 3'")
    assert not (tmp_path / "est_3.hv").exists()
