"""``Bin Normalisation type := From ECAT8`` in OSMAPOSL and OSSPS parameter files: the same file
through STIR's executables and stirgpu's engines (CPU), SIRF's mMR norm file on mMR data made by
STIR (span 11, segments -1..1, views mashed by 4, fewer tangential positions), with STIR's
``use_*`` switches both at their defaults and with one switched off; the bounds are
``osmaposl_cases``'s (estimates 1e-4 of STIR's maximum, sensitivities 1e-5).
"""

from __future__ import annotations

import osmaposl_cases as oc
import pytest

from stirgpu.cli.main import main

pytestmark = pytest.mark.stir


@pytest.fixture(scope="module")
def norm_hdr(sirf_shared):
    path = sirf_shared / "data" / "examples" / "PET" / "mMR" / "norm.n.hdr"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="module")
def mmr_data(reference_stir, stir, tmp_path_factory):
    geometry = oc.Geometry(scanner="Siemens mMR", span=11, max_delta=16, num_views=63, num_tangential_poss=45)
    return oc.make_inputs(reference_stir, stir, tmp_path_factory.mktemp("mmr"), geometry, seed=3, zoom=0.5)


def _ecat8_block(norm_hdr, extra: str = "") -> str:
    return (
        "Bin Normalisation type := From ECAT8\n"
        "Bin Normalisation From ECAT8 :=\n"
        f"normalisation filename := {norm_hdr}\n"
        f"{extra}"
        "End Bin Normalisation From ECAT8 :=\n"
    )


@pytest.mark.parametrize("extra", ["", "use_axial_effects_factors := 0\nuse_gaps := 0\n"], ids=["defaults", "switches"])
def test_osmaposl_with_ecat8_norm_equals_stir(reference_stir, mmr_data, norm_hdr, tmp_path, extra):
    par = oc.osmaposl_par(
        {"additive sinogram": "../in/additive.hs", **oc.SUBSET_SENSITIVITIES, "zoom": 0.5},
        {"number of subsets": 3, "number of subiterations": 2, "output filename prefix": "out"},
        normalisation=None,
        extra_objective=_ecat8_block(norm_hdr, extra),
    )
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=mmr_data)
    oc.assert_agree(s_dir, g_dir)


def test_ossps_with_ecat8_norm_equals_stir(reference_stir, mmr_data, norm_hdr, tmp_path, monkeypatch):
    """Also ``stirgpu ossps recon.par`` (the command line) on the same file."""
    par = oc.osmaposl_par(
        {"additive sinogram": "../in/additive.hs", "zoom": 0.5},
        {"number of subsets": 3, "number of subiterations": 3, "output filename prefix": "out"},
        normalisation=None,
        extra_objective=_ecat8_block(norm_hdr),
    ).replace("OSMAPOSLParameters :=", "OSSPSParameters :=", 1)
    s_dir, g_dir, _ = oc.run_both(reference_stir, tmp_path, par, inputs=mmr_data, program="OSSPS")
    diffs = oc.assert_agree(s_dir, g_dir)
    assert "out_precomputed_denominator.hv" in diffs
    monkeypatch.chdir(g_dir)
    assert main(["ossps", "recon.par", "--backend", "cpu", "--quiet", "--overwrite"]) == 0
    assert oc.relative_difference(g_dir / "out_3.hv", s_dir / "out_3.hv") <= oc.ESTIMATE_TOL
