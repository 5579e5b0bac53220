"""STIR's filters inside OSMAPOSL: the same ``.par`` through STIR 6.5's ``OSMAPOSL`` and stirgpu.

Each case enables one filter kind (``Separable Cartesian Metz``, ``Separable Gaussian``) at one
place (inter-update, inter-iteration, post-filter) and runs 8 subiterations: the same files, and
every saved estimate within 1e-3 of STIR's maximum.  The intervals (3) and save points (every 2
subiterations, so 2, 4, 6, 8) are chosen so that a filter applied one subiteration early or
late, before instead of after the update, or to a saved estimate it should not reach, moves the
files far beyond that bound (the test below the cases checks that the filters do change the
result by much more than the bound).  ``osmaposl_cases.py`` makes the data with STIR.
"""

from __future__ import annotations

import numpy as np
import osmaposl_cases as oc
import pytest

from stirgpu.formats import read_image

pytestmark = pytest.mark.stir

METZ = """Separable Cartesian Metz Filter Parameters :=
x-dir filter FWHM (in mm) := 9
y-dir filter FWHM (in mm) := 7.5
z-dir filter FWHM (in mm) := 10
x-dir filter Metz power := 1
y-dir filter Metz power := 1.5
z-dir filter Metz power := 0
x-dir maximum kernel size := 31
END Separable Cartesian Metz Filter Parameters :="""

GAUSSIAN = """Separable Gaussian Filter Parameters :=
x-dir filter FWHM (in mm) := 8
y-dir filter FWHM (in mm) := 6.5
z-dir filter FWHM (in mm) := 9
z-dir maximum kernel size := 5
END Separable Gaussian Filter Parameters :="""

FILTERS = {"metz": ("Separable Cartesian Metz", METZ), "gaussian": ("Separable Gaussian", GAUSSIAN)}
PLACES = {
    "inter-update": "inter-update filter subiteration interval := 3\ninter-update filter type := {}\n{}",
    "inter-iteration": "inter-iteration filter subiteration interval := 3\ninter-iteration filter type := {}\n{}",
    "post": "post-filter type := {}\n{}",
}
OBJECTIVE = oc.ADDITIVE_OBJECTIVE
#: STIR's own run-to-run differences (its OpenMP threads sum in varying order), of the maximum
RUN_TO_RUN = 1e-5
TOP = {
    "output filename prefix": "out",
    "number of subsets": 4,
    "number of subiterations": 8,
    "save estimates at subiteration intervals": 2,
}


@pytest.fixture(scope="module")
def data(reference_stir, stir, tmp_path_factory):
    """ECAT 931, span 3, 3 segments (max ring difference 3), 16 views, 64 tangential positions,
    seeded Poisson prompts, normalisation and additive sinogram."""
    geometry = oc.Geometry(span=3, max_delta=3, num_views=16, num_tangential_poss=64)
    return oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("filters"), geometry, seed=11)


def _par(place: str, kind: str, top: dict | None = None) -> str:
    name, block = FILTERS[kind]
    return oc.osmaposl_par(OBJECTIVE, {**TOP, **(top or {})}, extra_top=PLACES[place].format(name, block))


@pytest.fixture(scope="module")
def unfiltered(reference_stir, data, tmp_path_factory):
    """STIR's folder of the same run without a filter."""
    root = tmp_path_factory.mktemp("unfiltered")
    (root / "in").symlink_to(data, target_is_directory=True)
    proc = oc.run_stir(reference_stir, root / "stir", oc.osmaposl_par(OBJECTIVE, TOP))
    assert proc.returncode == 0, proc.stdout[-2000:]
    return root / "stir"


@pytest.mark.parametrize("kind", sorted(FILTERS))
@pytest.mark.parametrize("place", sorted(PLACES))
def test_filtered_osmaposl_matches_stir(place, kind, reference_stir, data, unfiltered, tmp_path):
    """One filter kind at one place: STIR's files (estimates after subiterations 2, 4, 6, 8 and
    the subset sensitivities), estimates within 1e-3 of STIR's maximum.  Guards STIR's timing:
    inter-update filtering of the estimate before the update multiplies it at subiterations 3
    and 6, inter-iteration filtering after it, both followed by the positivity threshold, the
    post-filter on the last estimate only; and STIR's kernels inside a reconstruction."""
    s_dir, g_dir, result = oc.run_both(reference_stir, tmp_path, _par(place, kind), inputs=data)
    diffs = oc.assert_agree(s_dir, g_dir)
    assert {"out_2.hv", "out_4.hv", "out_6.hv", "out_8.hv"} <= set(diffs)
    # what the filter changes, against the unfiltered run: the files it must reach move by far
    # more than the bound, the files it must not reach stay STIR's unfiltered ones
    changed = {n: oc.relative_difference(s_dir / n, unfiltered / n) for n in ("out_2.hv", "out_4.hv", "out_8.hv")}
    if place == "post":
        assert changed["out_2.hv"] <= RUN_TO_RUN and changed["out_4.hv"] <= RUN_TO_RUN
    else:
        assert changed["out_2.hv"] <= RUN_TO_RUN  # the first filtering is at subiteration 3
        assert changed["out_4.hv"] > 20 * oc.ESTIMATE_TOL
    assert changed["out_8.hv"] > 20 * oc.ESTIMATE_TOL
    final = read_image(g_dir / "out_8.hv").array
    assert np.array_equal(np.asarray(result.as_voxels().array), final)  # the post-filter is in memory too


def test_restarted_schedule_counts_stir_subiterations(reference_stir, data, tmp_path):
    """``start at subiteration number := 3`` from an image, with both an inter-update (interval
    2) and an inter-iteration filter (interval 3) and a post-filter: the intervals count STIR's
    subiteration numbers (filtering at 4, 6, 8 and 3, 6), not the subiterations of this run.
    Guards the schedule across restarts and the order of the three filters in one subiteration."""
    extra = "\n".join(
        [
            "inter-update filter subiteration interval := 2",
            f"inter-update filter type := Separable Gaussian\n{GAUSSIAN}",
            "inter-iteration filter subiteration interval := 3",
            f"inter-iteration filter type := Separable Cartesian Metz\n{METZ}",
            f"post-filter type := Separable Gaussian\n{GAUSSIAN}",
        ]
    )
    top = {**TOP, "start at subiteration number": 3, "initial estimate": "../in/phantom.hv"}
    par = oc.osmaposl_par(OBJECTIVE, top, extra_top=extra)
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=data)
    oc.assert_agree(s_dir, g_dir)


def test_stirs_parameter_listing_of_filters_reads_back(reference_stir, data, tmp_path):
    """STIR's OSMAPOSL prints its parameters (every filter key with its value, defaults spelt
    out, in its own spelling); that listing is read by stirgpu into the same filters, intervals
    included, as the file it came from; and our ``to_par()`` of them is a file STIR runs.  Guards
    the key names, their x/y/z order and the defaults against STIR's own parser."""
    from stirgpu.parfile import read_osmaposl_par

    extra = "\n".join(
        [
            "inter-update filter subiteration interval := 2",
            f"inter-update filter type := Separable Cartesian Metz\n{METZ}",
            "inter-iteration filter subiteration interval := 3",
            f"inter-iteration filter type := Separable Gaussian\n{GAUSSIAN}",
            "post-filter type := Separable Gaussian",
            GAUSSIAN.replace("z-dir maximum kernel size := 5", "Normalise filter to 1 := 0"),
        ]
    )
    top = {**TOP, "number of subiterations": 1, "save estimates at subiteration intervals": 1}
    (tmp_path / "in").symlink_to(data, target_is_directory=True)
    proc = oc.run_stir(reference_stir, tmp_path / "stir", oc.osmaposl_par(OBJECTIVE, top, extra_top=extra))
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = proc.stdout + proc.stderr
    start = text.lower().index("osmaposlparameters :=")
    end = text.lower().index("end osmaposlparameters :=", start)
    listing = [ln.removeprefix("INFO: ") for ln in text[start:end].splitlines()]
    listing = [ln for ln in listing if ln.strip().lower() != "end :="] + ["END :="]
    base = tmp_path / "stir"
    (base / "listing.par").write_text("\n".join(listing) + "\n")
    ours = read_osmaposl_par(base / "recon.par", base_dir=base, env={})
    theirs = read_osmaposl_par(base / "listing.par", base_dir=base, env={})
    fields = [
        "inter_update_filter",
        "inter_update_filter_interval",
        "inter_iteration_filter",
        "inter_iteration_filter_interval",
        "post_filter",
    ]
    assert [getattr(theirs, f) for f in fields] == [getattr(ours, f) for f in fields]
    assert not ours.post_filter.normalise and ours.inter_iteration_filter.max_kernel_size == (5, -1, -1)
    # and the other way round: the file stirgpu writes runs in STIR with the same result
    (base / "written.par").write_text(ours.to_par().replace(str(base / "out"), str(base / "again")))
    assert reference_stir.run("OSMAPOSL", "written.par", cwd=base, check=False).returncode == 0
    assert oc.relative_difference(base / "again_1.hv", base / "out_1.hv") <= RUN_TO_RUN


@pytest.mark.parametrize("model", ["additive", "multiplicative"])
def test_filters_with_a_prior_match_stir(reference_stir, data, tmp_path, model):
    """A Relative Difference Prior with an inter-update Gaussian (interval 3), an inter-iteration
    Metz (interval 4) and a post-filter: STIR computes the prior's gradient at the estimate
    before the inter-update filter changes it, then filters, then clips and multiplies.  Guards
    the order of the prior's OSL division and the filters within one subiteration."""
    extra = "\n".join(
        [
            "inter-update filter subiteration interval := 3",
            f"inter-update filter type := Separable Gaussian\n{GAUSSIAN}",
            "inter-iteration filter subiteration interval := 4",
            f"inter-iteration filter type := Separable Cartesian Metz\n{METZ}",
            f"post-filter type := Separable Gaussian\n{GAUSSIAN}",
        ]
    )
    factor = 0.5 if model == "additive" else 0.1
    prior = (
        "prior type := Relative Difference Prior\nRelative Difference Prior Parameters :=\n"
        f"penalisation factor := {factor}\nEND Relative Difference Prior Parameters :="
    )
    par = oc.osmaposl_par(OBJECTIVE, {**TOP, "MAP model": model}, extra_top=extra, extra_objective=prior)
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=data)
    oc.assert_agree(s_dir, g_dir)
