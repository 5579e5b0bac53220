"""ECAT8 norm files (SIRF's mMR ``norm.n.hdr``): what is read, what is refused (one line naming the
file and key), the Siemens sinogram of each ring pair, and SIRF's ``AcquisitionSensitivityModel``
made from the file.  The numbers against STIR: ``tests/stir_differential/test_ecat8_norm_vs_stir.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.errors import FormatError, GeometryError, StoreAbilityError
from stirgpu.formats import ProjDataInMemory
from stirgpu.formats.ecat8_factors import Ecat8NormalisationFactors, siemens_sinogram_index
from stirgpu.formats.ecat8_norm import read_ecat8_norm
from stirgpu.geometry import ProjDataInfo, Scanner


@pytest.fixture(scope="module")
def norm_hdr(sirf_shared):
    path = sirf_shared / "data" / "examples" / "PET" / "mMR" / "norm.n.hdr"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture(scope="module")
def norm(norm_hdr):
    return read_ecat8_norm(norm_hdr)


def _small(scanner, **kw) -> ProjDataInfo:
    return ProjDataInfo.construct(scanner, 11, 16, num_views=126, num_tangential_poss=31, **kw)


def test_components_as_stir_sizes_them(norm):
    assert norm.scanner == Scanner.from_name("Siemens mMR")
    assert norm.geometric.shape == (127, 344) and norm.interference.shape == (344, 9)
    assert norm.efficiencies.shape == (64, 504) and norm.axial_effects.shape == (837,)
    assert not norm.efficiencies.flags.writeable
    # the mMR's virtual crystal: the first of each block of 9 (after STIR's rotation by one)
    assert np.all(norm.efficiencies[:, ::9] == 0) and np.all(norm.efficiencies[:, 1::9] > 0)


def test_each_siemens_sinogram_holds_its_ring_pairs(norm):
    index = siemens_sinogram_index(norm.norm_proj_data_info)
    r1, r2 = np.indices(index.shape)
    assert np.all((index >= 0) == (np.abs(r2 - r1) <= 60))  # the file's maximum ring difference
    assert set(np.unique(index[index >= 0])) == set(range(837))
    # segment 0 (ring differences -5..5) first, its sinogram = ring1 + ring2
    near = np.abs(r2 - r1) <= 5
    np.testing.assert_array_equal(index[near], (r1 + r2)[near])
    # then segment -1 (ring differences -16..-6), from ring1 + ring2 = 6
    assert index[6, 0] == 127 and index[0, 6] == 127 + 115


def test_factors_are_read_only_and_computed(norm):
    f = Ecat8NormalisationFactors(norm, _small(norm.scanner))
    assert f.abilities.readable and f.abilities.parallel_reads and not f.abilities.writable
    eff = Ecat8NormalisationFactors(norm, _small(norm.scanner), efficiencies=True).read_views(0, range(2, 5))
    factors = f.read_views(0, range(2, 5))
    np.testing.assert_array_equal(factors, np.float32(1) / np.maximum(eff, np.float32(1e-20)))
    with pytest.raises(StoreAbilityError):
        f.write_views(factors, 0, range(2, 5))


def test_data_it_cannot_apply_to_is_refused(norm):
    with pytest.raises(GeometryError, match=r"norm\.n\.hdr applies to non-arc-corrected data only"):
        Ecat8NormalisationFactors(norm, _small(norm.scanner, arc_corrected=True))
    other = ProjDataInfo.construct(Scanner.from_name("Siemens mCT"), 11, 16)
    with pytest.raises(GeometryError, match=r"norm\.n\.hdr is for the scanner 'Siemens mMR'"):
        Ecat8NormalisationFactors(norm, other)


@pytest.mark.parametrize(
    "old, new, match",
    [
        ("%matrix size [3]:={504,64}", "%matrix size [3]:={504,32}", r"key '%matrix size \[3\]'.*needs \{504,64\}"),
        ("data offset in bytes [2]:=174752", "data offset in bytes [2]:=174748", r"data offset in bytes \[2\]'"),
        ("!originating system:=2008", "!originating system:=2009", r"key 'originating system'.*'2009' not known"),
        ("image data byte order:=LITTLEENDIAN", "image data byte order:=BIGENDIAN", "must be LITTLEENDIAN"),
        ("%number of normalization components:=8", "%number of normalization components:=3", "at least 4"),
    ],
)
def test_bad_headers_are_refused_naming_file_and_key(norm_hdr, tmp_path, old, new, match):
    text = norm_hdr.read_text(errors="replace")
    assert old in text
    bad = tmp_path / "norm.n.hdr"
    bad.write_text(text.replace(old, new))
    (tmp_path / "norm.n").symlink_to(norm_hdr.parent / "norm.n")
    with pytest.raises(FormatError, match=match) as e:
        read_ecat8_norm(bad)
    assert str(e.value).startswith(str(bad)) and "\n" not in str(e.value)


def test_truncated_components_are_refused(norm_hdr, tmp_path):
    (tmp_path / "norm.n.hdr").write_bytes(norm_hdr.read_bytes())
    (tmp_path / "norm.n").write_bytes((norm_hdr.parent / "norm.n").read_bytes()[:200000])
    with pytest.raises(FormatError, match=r"norm\.n: truncated: component 3"):
        read_ecat8_norm(tmp_path / "norm.n.hdr")


def test_sirf_sensitivity_model_from_the_file(norm, norm_hdr):
    pdi = _small(norm.scanner)
    eff = Ecat8NormalisationFactors(norm, pdi, efficiencies=True).as_array()
    ones = pet.AcquisitionData(ProjDataInMemory(pdi, fill=1.0))
    asm = pet.AcquisitionSensitivityModel(str(norm_hdr))
    asm.set_up(ones)
    np.testing.assert_array_equal(asm.forward(ones).as_array()[0], eff)  # 0 in the gaps, as STIR's undo
    y = ones.clone()
    asm.unnormalise(y)
    np.testing.assert_array_equal(y.as_array()[0], eff)
    np.testing.assert_allclose(asm.invert(ones).as_array()[0], 1 / np.maximum(eff, 1e-20), rtol=1e-6)
    arc = pet.AcquisitionData(ProjDataInMemory(_small(norm.scanner, arc_corrected=True), fill=1.0))
    with pytest.raises(pet.error, match="non-arc-corrected data only"):
        asm.set_up(arc)


def test_the_data_file_counts_as_read(norm_hdr):
    """An output that would write over ``norm.n`` is refused as one over an input (formats.roles)."""
    from stirgpu.formats.roles import reads

    assert reads("normalisation", norm_hdr).files == (norm_hdr, norm_hdr.parent / "norm.n")


def test_sirf_acquisition_model_with_the_file_is_efficiencies_times_projection(norm, norm_hdr):
    """``AcquisitionModelUsingParallelproj`` with the model: forward = e G x, backward = G' e y
    (the gaps, where e is 0: 1e-20 of the projection, where SIRF's undo gives 0)."""
    from stirgpu.geometry import ImageInfo

    pdi = ProjDataInfo.construct(norm.scanner, 11, 5, num_views=252, num_tangential_poss=31)  # unmashed: gaps
    info = ImageInfo.default_for(pdi, zoom=0.25)
    x = pet.ImageData.from_array(np.random.default_rng(1).random(info.shape, dtype=np.float32), info)
    template = pet.AcquisitionData(ProjDataInMemory(pdi, fill=1.0))
    plain = pet.AcquisitionModelUsingParallelproj(backend="cpu")
    plain.set_up(template, x)
    model = pet.AcquisitionModelUsingParallelproj(backend="cpu")
    model.set_acquisition_sensitivity(pet.AcquisitionSensitivityModel(str(norm_hdr)))
    model.set_up(template, x)
    eff = Ecat8NormalisationFactors(norm, pdi, efficiencies=True).as_array()
    gx = plain.forward(x).as_array()[0]
    assert gx[eff == 0].min() > 0  # lines of response through the gaps, seen as 0
    fx = model.forward(x).as_array()[0]
    np.testing.assert_allclose(fx[eff > 0], (gx * eff)[eff > 0], rtol=1e-6)
    # the projector divides by f = 1 / max(e, 1e-20) (STIR's apply): 1e-20 of G x where SIRF has 0
    assert np.all(fx[eff == 0] <= 1.001e-20 * gx[eff == 0])
    y = pet.AcquisitionData(ProjDataInMemory(pdi, fill=np.float32(1) / np.where(eff > 0, 1, np.inf)))
    weighted = pet.AcquisitionData(ProjDataInMemory(pdi, fill=eff))
    np.testing.assert_allclose(model.backward(y).as_array(), plain.backward(weighted).as_array(), rtol=1e-5)
