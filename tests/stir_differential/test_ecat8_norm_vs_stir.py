"""ECAT8 normalisation (SIRF's mMR ``norm.n.hdr``) against STIR's ``BinNormalisationFromECAT8``.

STIR's numbers come from its ``correct_projdata`` on data set to one: ``undo`` multiplies by the
bin efficiencies (compared with stirgpu's efficiencies), ``apply`` divides by ``max(1e-20,
efficiency)`` (compared with stirgpu's normalisation factors).  Geometries: SIRF's span-11
template (view mashing 2), span 11 with every segment and view (fewer tangential positions), span
1 up to ring difference 63 with view mashing 4 (ring pairs beyond the norm file's maximum ring
difference 60 have no axial effects), span 3 (ring pairs of other Siemens sinograms in one bin),
and components switched off with STIR's ``use_*`` keys.  Measured: 3e-7 relative at most.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.formats import ProjDataFromFile, read_from_file
from stirgpu.formats.ecat8_factors import Ecat8Components, Ecat8NormalisationFactors
from stirgpu.formats.ecat8_norm import read_ecat8_norm
from stirgpu.geometry import ProjDataInfo

pytestmark = pytest.mark.stir

#: float32 sums in STIR's order against float64 sums here
RTOL = 1e-5


@pytest.fixture(scope="module")
def mmr(sirf_shared):
    d = sirf_shared / "data" / "examples" / "PET" / "mMR"
    if not (d / "norm.n.hdr").is_file():
        pytest.skip(f"{d} has no norm.n.hdr")
    return d


def _stir_correct(reference_stir, tmp_path, template, norm_hdr, undo: bool, keys: str = "") -> np.ndarray:
    out = tmp_path / ("eff" if undo else "factors")
    par = tmp_path / f"{out.name}.par"
    par.write_text(
        "correct_projdata Parameters :=\n"
        f"  input file := {template}\n"
        f"  output filename := {out}\n"
        "  use data (1) or set to one (0) := 0\n"
        f"  apply (1) or undo (0) correction := {0 if undo else 1}\n"
        "  Bin Normalisation type := From ECAT8\n"
        "  Bin Normalisation From ECAT8 :=\n"
        f"    normalisation filename := {norm_hdr}\n"
        f"{keys}"
        "  End Bin Normalisation From ECAT8 :=\n"
        "END :=\n"
    )
    reference_stir.run("correct_projdata", par, cwd=tmp_path)
    with read_from_file(f"{out}.hs") as pd:
        return pd.as_array()


def _template(tmp_path, pdi: ProjDataInfo):
    path = tmp_path / "template.hs"
    ProjDataFromFile.create(path, pdi).close()
    return path


def _compare(ours: np.ndarray, stirs: np.ndarray) -> None:
    assert ours.shape == stirs.shape
    np.testing.assert_array_equal(ours == 0, stirs == 0)  # the gaps
    np.testing.assert_allclose(ours, stirs, rtol=RTOL, atol=0)


def _mmr_pdi(mmr, span: int, max_rd: int, views: int, tangential: int) -> ProjDataInfo:
    scanner = read_ecat8_norm(mmr / "norm.n.hdr").scanner
    return ProjDataInfo.construct(scanner, span, max_rd, num_views=views, num_tangential_poss=tangential)


def test_sirf_span11_template_efficiencies_and_factors(reference_stir, mmr, tmp_path):
    """Also through SIRF's API (what ``acquisition_sensitivity_from_ecat8.py`` does): ``forward`` of
    ones is STIR's ``undo`` (the efficiencies), ``invert`` of ones STIR's ``apply``."""
    import stirgpu.sirf as pet

    template = mmr / "mMR_template_span11_small.hs"
    with read_from_file(template) as pd:
        pdi = pd.get_proj_data_info()
    norm = read_ecat8_norm(mmr / "norm.n.hdr")
    stir_eff = _stir_correct(reference_stir, tmp_path, template, mmr / "norm.n.hdr", undo=True)
    stir_factors = _stir_correct(reference_stir, tmp_path, template, mmr / "norm.n.hdr", undo=False)
    _compare(Ecat8NormalisationFactors(norm, pdi, efficiencies=True).as_array(), stir_eff)
    factors = Ecat8NormalisationFactors(norm, pdi).as_array()
    np.testing.assert_allclose(factors, stir_factors, rtol=RTOL, atol=0)
    assert factors.max() == np.float32(1e20)  # the gaps, as STIR's apply

    scheme = pet.AcquisitionData.get_storage_scheme()
    pet.AcquisitionData.set_storage_scheme("memory")
    try:
        ones = pet.AcquisitionData(str(template))
        ones.fill(1.0)
        asm = pet.AcquisitionSensitivityModel(str(mmr / "norm.n.hdr"))
        asm.set_up(ones)
        _compare(asm.forward(ones).as_array()[0], stir_eff)
        np.testing.assert_allclose(asm.invert(ones).as_array()[0], stir_factors, rtol=RTOL, atol=0)
    finally:
        pet.AcquisitionData.set_storage_scheme(scheme)


@pytest.mark.parametrize(
    "span, max_rd, views, tangential",
    [(11, 60, 252, 41), (1, 63, 63, 21), (3, 22, 126, 24)],
    ids=["span11-all-segments-unmashed", "span1-rd63-mash4", "span3-mash2-even-tangential"],
)
def test_efficiencies_equal_stirs(reference_stir, mmr, tmp_path, span, max_rd, views, tangential):
    pdi = _mmr_pdi(mmr, span, max_rd, views, tangential)
    template = _template(tmp_path, pdi)
    eff = Ecat8NormalisationFactors(read_ecat8_norm(mmr / "norm.n.hdr"), pdi, efficiencies=True).as_array()
    _compare(eff, _stir_correct(reference_stir, tmp_path, template, mmr / "norm.n.hdr", undo=True))


@pytest.mark.parametrize(
    "off",
    ["gaps", "detector_efficiencies", "geometric_factors", "crystal_interference_factors", "axial_effects_factors"],
)
def test_components_switched_off_as_stir(reference_stir, mmr, tmp_path, off):
    pdi = _mmr_pdi(mmr, 11, 16, 126, 31)
    template = _template(tmp_path, pdi)
    norm = read_ecat8_norm(mmr / "norm.n.hdr", use_gaps=off != "gaps")
    components = Ecat8Components(**{off: False}) if off != "gaps" else Ecat8Components()
    eff = Ecat8NormalisationFactors(norm, pdi, components, efficiencies=True).as_array()
    stirs = _stir_correct(reference_stir, tmp_path, template, mmr / "norm.n.hdr", True, f"    use_{off} := 0\n")
    _compare(eff, stirs)
