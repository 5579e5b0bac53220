"""stirgpu's OSSPS against STIR 6.5's own ``OSSPS`` executable (linked with libparallelproj
2.0.7), on data STIR made (``osmaposl_cases.make_inputs``).

Each test writes one ``OSSPSParameters`` file and runs it unchanged through STIR's ``OSSPS``
and through stirgpu's engine (CPU backend), each in its own folder.  The identity checked is
"the same files, with STIR's numbers": the same images appear (estimates at the save points,
sensitivities when named, the computed ``<prefix>_precomputed_denominator``), estimates within
1e-4 of STIR's maximum, other images within 1e-5 (``osmaposl_cases.assert_agree``: the
projections are STIR's bit for bit, what is left is the order of float32 additions).  A test
that gets OSSPS's step (relaxation, gamma's floor(n / K)), the denominator (STIR's
``divide_and_truncate`` of ``A 1`` by ``y f^2``, per viewgram), the gradient without the
sensitivity, the prior's curvature or the clipping wrong fails by far more.
"""

from __future__ import annotations

import os

import osmaposl_cases as oc
import pytest

import stirgpu
from stirgpu.cli.main import main

pytestmark = pytest.mark.stir

ADD = {"additive sinogram": "../in/additive.hs"}
QUADRATIC = (
    "prior type := Quadratic\n"
    "Quadratic Prior Parameters :=\n"
    "penalisation factor := 0.5\n"
    "END Quadratic Prior Parameters :="
)


def ossps_par(objective: dict, top: dict, **kw) -> str:
    """An OSSPS ``.par``: :func:`osmaposl_cases.osmaposl_par`'s layout under ``OSSPSParameters``."""
    text = oc.osmaposl_par(objective, top, **kw)
    return text.replace("OSMAPOSLParameters :=", "OSSPSParameters :=", 1)


def run_both(reference_stir, root, par: str, inputs):
    """STIR's ``OSSPS`` in ``root/stir``, stirgpu's engine in ``root/gpu``; both folders."""
    from stirgpu.recon.ossps_run import run_ossps

    root.mkdir(parents=True, exist_ok=True)
    (root / "in").symlink_to(inputs, target_is_directory=True)
    s_dir, g_dir = root / "stir", root / "gpu"
    s_dir.mkdir()
    (s_dir / "recon.par").write_text(par)
    proc = reference_stir.run("OSSPS", "recon.par", cwd=s_dir, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"STIR's OSSPS failed in {s_dir}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    g_dir.mkdir()
    (g_dir / "recon.par").write_text(par)
    old = os.getcwd()
    os.chdir(g_dir)
    try:
        with stirgpu.config(backend="cpu"):
            run_ossps("recon.par")
    finally:
        os.chdir(old)
    return s_dir, g_dir


@pytest.fixture(scope="module")
def three_segments(reference_stir, stir, tmp_path_factory):
    """ECAT 931, span 3, 3 segments (max ring difference 4), 16 views, 48 tangential positions,
    seeded Poisson prompts (~2e5 counts, so some bins have none), normalisation, additive term."""
    geometry = oc.Geometry(span=3, max_delta=4, num_views=16, num_tangential_poss=48)
    return oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("in3"), geometry, seed=11)


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
    # name: (objective keys, top keys, extra objective lines)
    "defaults": (ADD, _top(), ""),
    "relaxation-gamma-upper-bound-subset-sensitivities": (
        {**ADD, **oc.SUBSET_SENSITIVITIES},
        _top(relaxation_parameter=1.5, relaxation_gamma=0.5, upper_bound=3.0, start_at_subset=1),
        "",
    ),
    "quadratic-prior-positivity": (
        ADD,
        _top(
            enforce_initial_positivity_condition=1,
            number_of_subiterations=6,
            save_estimates_at_subiteration_intervals=3,
        ),
        QUADRATIC,
    ),
    "no-additive-denominator-of-ones": (
        {},
        _top(precomputed_denominator=1, number_of_subsets=2, relaxation_parameter=0.05),
        "",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_ossps_matches_stir(name, reference_stir, three_segments, tmp_path):
    """One combination of OSSPS keys: STIR's files, estimates within 1e-4 of STIR's maximum and
    the computed denominator (and sensitivities) within 1e-5."""
    objective, top, extra = CASES[name]
    par = ossps_par(objective, top, extra_objective=extra)
    s_dir, g_dir = run_both(reference_stir, tmp_path, par, three_segments)
    diffs = oc.assert_agree(s_dir, g_dir)
    assert "out_8.hv" in diffs or "out_6.hv" in diffs


def test_cli_ossps_runs_stirs_file(reference_stir, three_segments, tmp_path, capsys):
    """``stirgpu ossps recon.par`` (the command line) gives STIR's files and numbers, reads back
    STIR's written denominator as ``precomputed denominator``, and refuses to write over its
    outputs without ``--overwrite``."""
    par = ossps_par(ADD, _top(number_of_subiterations=4))
    s_dir, g_dir = run_both(reference_stir, tmp_path, par, three_segments)
    rerun = tmp_path / "rerun"
    rerun.mkdir()
    again = ossps_par(
        ADD, _top(number_of_subiterations=4, precomputed_denominator="../stir/out_precomputed_denominator.hv")
    )
    (rerun / "recon.par").write_text(again)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(rerun)
        assert main(["ossps", "recon.par", "--backend", "cpu", "--quiet"]) == 0
        assert main(["ossps", "recon.par", "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "already exist" in err and "--overwrite" in err
    assert oc.relative_difference(rerun / "out_4.hv", s_dir / "out_4.hv") <= oc.ESTIMATE_TOL
    assert not (rerun / "out_precomputed_denominator.hv").exists()
