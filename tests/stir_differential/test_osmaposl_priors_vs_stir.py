"""OSMAPOSL with a prior: stirgpu against STIR 6.5's ``OSMAPOSL`` executable on the same ``.par``.

As test_osmaposl_vs_stir.py (same helpers, ``osmaposl_cases``): STIR-made data (ECAT 931, 5
segments, normalisation, additive term, Poisson prompts), one ``.par`` run unchanged by both
programs, the same files written and the estimates within 1e-4 of STIR's maximum after 8
subiterations (they agree to ~1e-6 on these cases).  Each prior with each ``MAP model``, a
kappa image, ``only 2D``, user ``weights``, ``gradient filename prefix`` (STIR's files), the
penalty in the objective reports, a zero penalisation factor, STIR's refusal of a
capitalised ``MAP model`` with a prior, and the test pack's RDP ``.par``.

Penalisation factors are those of a stable One-Step-Late iteration.  With a strongly penalised
multiplicative model (the [0.1, 10] clamp active in most voxels; e.g. Logcosh, factor 1, scalar
2) OSL oscillates, and float rounding differences (1e-7) grow about tenfold per subiteration
(8e-2 after 8): docs/priors.md.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import osmaposl_cases as oc
import pytest

from stirgpu.errors import ParFileError
from stirgpu.formats import VoxelsOnCartesianGrid, read_image, write_image

pytestmark = pytest.mark.stir

ADD = {"additive sinogram": "../in/additive.hs"}
SUBSET_SENS = oc.SUBSET_SENSITIVITIES
BLOCKS = {
    "Quadratic": "Quadratic Prior Parameters",
    "Relative Difference Prior": "Relative Difference Prior Parameters",
    "Logcosh": "Logcosh Prior Parameters",
}


@pytest.fixture(scope="module")
def inputs(reference_stir, stir, tmp_path_factory):
    """ECAT 931, span 3, 5 segments, 16 views, 64 tangential positions (as five_segments of
    test_osmaposl_vs_stir.py), plus kappa.hv: a smooth positive image on STIR's default image
    (the phantom's geometry)."""
    geometry = oc.Geometry(span=3, max_delta=7, num_views=16, num_tangential_poss=64)
    folder = oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("prior_in"), geometry, seed=5)
    phantom = read_image(folder / "phantom.hv")
    nz, ny, nx = phantom.shape
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    kappa = 0.5 + 0.4 * np.cos(x / nx * 3.0) * np.sin(y / ny * 2.0 + 0.3) + 0.1 * z / nz
    write_image(folder / "kappa.hv", VoxelsOnCartesianGrid(phantom.info, fill=kappa.astype(np.float32)))
    return folder


def prior_block(prior_type: str, body: str) -> str:
    block = BLOCKS[prior_type]
    return f"prior type := {prior_type}\n{block} :=\n{body}\nEND {block} :="


def _top(**kw) -> dict:
    top = {
        "output filename prefix": "out",
        "number of subsets": 4,
        "number of subiterations": 8,
        "save estimates at subiteration intervals": 4,
    }
    top.update({k.replace("_", " "): v for k, v in kw.items()})
    return top


CASES = {
    # name: (prior type, block body, MAP model)
    "quadratic-additive": ("Quadratic", "penalisation factor := 0.5", "additive"),
    "quadratic-multiplicative": ("Quadratic", "penalisation factor := 0.05", "multiplicative"),
    "rdp-additive": ("Relative Difference Prior", "penalisation factor := 0.5", "additive"),
    "rdp-multiplicative-gamma-epsilon": (
        "Relative Difference Prior",
        "penalisation factor := 0.1\ngamma value := 0.5\nepsilon value := 0.01",
        "multiplicative",
    ),
    "logcosh-additive": ("Logcosh", "penalisation factor := 1\nscalar := 2", "additive"),
    "logcosh-multiplicative": ("Logcosh", "penalisation factor := 0.05\nscalar := 0.7", "multiplicative"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_prior_and_map_model_matches_stir(reference_stir, inputs, tmp_path, name):
    """8 subiterations of OSMAPOSL with each prior (default 3-D weights) and each MAP model:
    the same files, estimates within 1e-4 of STIR's maximum.  Guards the OSL denominator of both
    models (the multiplicative one does not divide the gradient by the number of subsets), its
    clamps and the 1e-6 threshold of the division."""
    prior_type, body, model = CASES[name]
    par = oc.osmaposl_par({**ADD, **SUBSET_SENS}, _top(MAP_model=model), extra_objective=prior_block(prior_type, body))
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=inputs)
    oc.assert_agree(s_dir, g_dir)


@pytest.mark.parametrize(
    "prior_type, body",
    [
        ("Relative Difference Prior", "penalisation factor := 0.5\nonly 2D := 1\nkappa filename := ../in/kappa.hv"),
        ("Logcosh", "penalisation factor := 1\nscalar := 3\nonly 2D := 1"),
        ("Quadratic", "penalisation factor := 0.5\nkappa filename := ../in/kappa.hv"),
        # even sizes and a centre weight, given as STIR's parser reads them (only 2D then ignored)
        (
            "Quadratic",
            "penalisation factor := 0.5\nonly 2D := 1\n"
            "weights := {{{0.5,1,0.2},{1,0.3,1}},{{0.1,0.2,0.3},{0.4,0,0.6}}}",
        ),
        ("Relative Difference Prior", "penalisation factor := 0.5\nweights := {{{0,1,0},{1,0,1},{0,1,0}}}"),
    ],
    ids=["rdp-2d-kappa", "logcosh-2d", "quadratic-kappa", "quadratic-even-weights", "rdp-2d-cross-weights"],
)
def test_kappa_only_2d_and_weights_keys_match_stir(reference_stir, inputs, tmp_path, prior_type, body):
    """The parsed keys of the prior block -- ``kappa filename``, ``only 2D`` and ``weights`` (even
    sizes included) -- give STIR's estimates.  Guards the keys' meaning as STIR's parser gives it
    (STIR's Python constructors of RDP and Logcosh drop only_2D, its parser does not)."""
    par = oc.osmaposl_par({**ADD, **SUBSET_SENS}, _top(), extra_objective=prior_block(prior_type, body))
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=inputs)
    oc.assert_agree(s_dir, g_dir)


def test_gradient_files_and_penalty_reports_match_stir(reference_stir, inputs, tmp_path):
    """``gradient filename prefix := grad_`` with ``start at subiteration number := 3``: both
    write grad_1 .. grad_4 (STIR counts the gradients computed, from 1, not the subiterations),
    the prior's gradients at the estimates (within 1e-5 of STIR's maximum: same numbers, written as
    float32), and report STIR's "Penalty" after every subiteration (6 digits printed)."""
    top = _top(
        number_of_subiterations=6,
        start_at_subiteration_number=3,
        save_estimates_at_subiteration_intervals=2,
        report_objective_function_values_interval=1,
    )
    prior = prior_block("Relative Difference Prior", "penalisation factor := 0.5\ngradient filename prefix := grad_")
    par = oc.osmaposl_par({**ADD, **SUBSET_SENS}, top, extra_objective=prior)
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    proc = oc.run_stir(reference_stir, tmp_path / "stir", par)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = oc.run_stirgpu(tmp_path / "gpu", par)
    s_dir, g_dir = tmp_path / "stir", tmp_path / "gpu"
    grads = [f"grad_{n}.hv" for n in range(1, 5)]
    assert set(grads) <= oc.image_files(s_dir)
    diffs = oc.differences(s_dir, g_dir)
    assert all(diffs[n] <= oc.ESTIMATE_TOL for n in diffs if n.startswith("out_")), diffs
    assert all(diffs[n] <= 1e-5 for n in grads), diffs
    stirs = [float(v) for v in re.findall(r"^Penalty\s+(\S+)", proc.stdout + proc.stderr, flags=re.M)]
    ours = [r.penalty for r in result.records]
    assert len(stirs) == 4 and ours == pytest.approx(stirs, rel=2e-5)


def test_zero_penalisation_factor_is_osem_as_in_stir(reference_stir, inputs, tmp_path):
    """A prior with ``penalisation factor := 0`` (the default) is STIR's ``prior_is_zero``: the OSEM
    update (division threshold 0), no gradient computed (no gradient files), any MAP model; both
    programs agree, and stirgpu's estimate equals its run without a prior bit for bit."""
    prior = prior_block("Logcosh", "gradient filename prefix := grad_")
    par = oc.osmaposl_par({**ADD, **SUBSET_SENS}, _top(), extra_objective=prior)
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=inputs)
    oc.assert_agree(s_dir, g_dir)
    assert not list(s_dir.glob("grad_*")) and not list(g_dir.glob("grad_*"))
    plain = oc.run_stirgpu(tmp_path / "plain", oc.osmaposl_par({**ADD, **SUBSET_SENS}, _top()))
    assert (read_image(g_dir / "out_8.hv").array == read_image(plain.saved[-1]).array).all()


def test_capitalised_map_model_with_a_prior_is_refused_as_by_stir(reference_stir, inputs, tmp_path):
    """STIR's set_MAP_model compares exactly: ``MAP model := Multiplicative`` with a non-zero prior
    is an error in STIR (it stops before any work), and stirgpu refuses it at that line."""
    prior = prior_block("Quadratic", "penalisation factor := 0.1")
    par = oc.osmaposl_par({**ADD}, _top(MAP_model="Multiplicative"), extra_objective=prior)
    (tmp_path / "in").symlink_to(inputs, target_is_directory=True)
    proc = oc.run_stir(reference_stir, tmp_path / "stir", par)
    assert proc.returncode != 0 and "MAP model should have as value" in proc.stdout + proc.stderr
    with pytest.raises(ParFileError) as exc:
        oc.run_stirgpu(tmp_path / "gpu", par)
    line = next(i for i, s in enumerate(par.splitlines(), 1) if s.startswith("MAP model"))
    assert f"recon.par:{line}:" in str(exc.value) and "lower case" in str(exc.value)


TEST_PACK_RDP = "stir_recon_test_pack/OSMAPOSL_test_sim_Parallelproj_CUDARDP.par"


def test_the_test_pack_rdp_par_runs_as_in_stir(reference_stir, stir_fixtures, inputs, tmp_path, monkeypatch):
    """The test pack's RDP file, unchanged (``${suffix}`` and ``${num_subsets}`` set as its scripts
    do), on STIR-made data under the names it expects: 28 subiterations at zoom 0.5 with a 91-pixel
    image, penalisation factor 0.5.  Same files (sensitivities, estimates every 4 subiterations),
    STIR's numbers.  Guards a real STIR parameter file with a prior end to end."""
    monkeypatch.setenv("suffix", "_1")
    monkeypatch.setenv("num_subsets", "4")
    par = (stir_fixtures / TEST_PACK_RDP).read_text()

    def data(folder):
        for src, name in (("prompts", "my_prompts_1"), ("norm", "my_acfs_1"), ("additive", "my_additive_sinogram_1")):
            shutil.copy(inputs / f"{src}.s", folder / f"{src}.s")  # the header names its data file
            shutil.copy(inputs / f"{src}.hs", folder / f"{name}.hs")

    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, prepare=data)
    written = oc.image_files(s_dir)
    assert "my_test_sim_1_image_OSMAPOSL_PP_CUDARDP_28.hv" in written
    assert "my_test_sim_1_sens_PP_s4_3.hv" in written
    oc.assert_agree(s_dir, g_dir, prefix="my_test_sim_1_image_OSMAPOSL_PP_CUDARDP")
