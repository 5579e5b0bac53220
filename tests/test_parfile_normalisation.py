"""``Bin Normalisation type`` in OSMAPOSL / OSSPS files: ``From ECAT8`` with STIR's keys and
defaults, written back by ``to_par``; what stirgpu does not do is refused at its line.  The
numbers of a run with it: ``tests/stir_differential/test_osmaposl_ecat8_vs_stir.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from stirgpu.errors import ParFileError
from stirgpu.parfile import read_osmaposl_par
from stirgpu.parfile.normalisation import Ecat8Normalisation


def _par(normalisation: str) -> str:
    return (
        "OSMAPOSLParameters :=\n"
        "objective function type := PoissonLogLikelihoodWithLinearModelForMeanAndProjData\n"
        "PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
        "input file := prompts.hs\n"
        "projector pair type := Parallelproj\n"
        "Projector Pair Using Parallelproj Parameters :=\n"
        "End Projector Pair Using Parallelproj Parameters :=\n"
        f"{normalisation}"
        "End PoissonLogLikelihoodWithLinearModelForMeanAndProjData Parameters :=\n"
        "output filename prefix := out\n"
        "END :=\n"
    )


def _ecat8(keys: str) -> str:
    block = "Bin Normalisation From ECAT8 :="
    return f"Bin Normalisation type := From ECAT8\n{block}\n{keys}End {block}\n"


def _read(tmp_path: Path, text: str):
    (tmp_path / "recon.par").write_text(text)
    return read_osmaposl_par(tmp_path / "recon.par", base_dir=tmp_path, env={})


def test_ecat8_block_with_stirs_defaults(tmp_path):
    s = _read(tmp_path, _par(_ecat8("normalisation filename := norm.n.hdr\n")))
    assert s.normalisation == Ecat8Normalisation(tmp_path / "norm.n.hdr")
    assert s.normalisation.use_gaps and all(s.normalisation.components().values())
    assert len(s.normalisation.components()) == 4
    assert s.input_files()["normalisation"] == [tmp_path / "norm.n.hdr"]


def test_ecat8_switches_and_the_obsolete_file_key_survive_to_par(tmp_path):
    keys = (
        "normalisation_ECAT8_filename := norm.n.hdr\nuse_gaps := 0\nuse_axial_effects_factors := 0\n"
        "use_crystal_interference_factors := 0\nwrite_components_to_file := 0\n"
    )
    s = _read(tmp_path, _par(_ecat8(keys)))
    assert s.normalisation == Ecat8Normalisation(
        tmp_path / "norm.n.hdr", use_gaps=False, use_crystal_interference_factors=False, use_axial_effects_factors=False
    )
    other = tmp_path / "other"
    other.mkdir()
    (other / "copy.par").write_text(s.to_par())
    assert read_osmaposl_par(other / "copy.par", base_dir=other, env={}).normalisation == s.normalisation


def test_singles_rates_are_read_over_as_stir_does_with_a_warning(tmp_path, caplog):
    """STIR parses them but applies no dead time for ECAT8: the same factors without them."""
    keys = (
        "normalisation filename := norm.n.hdr\nsingles rates := From ECAT7\nSingles Rates From ECAT7 :=\n"
        "ECAT7_filename := sino.S\nEnd Singles Rates From ECAT7 :=\n"
    )
    with caplog.at_level("WARNING"):
        s = _read(tmp_path, _par(_ecat8(keys)))
    assert s.normalisation == Ecat8Normalisation(tmp_path / "norm.n.hdr")
    assert "'singles rates := From ECAT7' ignored" in caplog.text and "recon.par:" in caplog.text


@pytest.mark.parametrize(
    "keys, needle, words",
    [
        ("use_gaps := 1\n", "Bin Normalisation From ECAT8", "needs 'normalisation filename :='"),
        ("normalisation filename := n.hdr\nwrite_components_to_file := 1\n", "write_components", "set it to 0"),
        ("normalisation filename := n.hdr\nuse_dead_time := 1\n", "use_dead_time", "use_dead_time"),
        ("normalisation filename := n.hdr\nuse_geometric_factors := 2\n", "use_geometric", "expects 0 or 1"),
    ],
)
def test_what_stirgpu_does_not_do_is_refused_at_its_line(tmp_path, keys, needle, words):
    text = _par(_ecat8(keys))
    with pytest.raises(ParFileError) as exc:
        _read(tmp_path, text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if needle.lower() in s.lower())
    assert exc.value.line == line and words in str(exc.value), str(exc.value)


def test_other_normalisations_are_refused_naming_what_is_supported(tmp_path):
    text = _par(
        "Bin Normalisation type := From ECAT7\nBin Normalisation From ECAT7 :=\nEnd Bin Normalisation From ECAT7 :=\n"
    )
    with pytest.raises(ParFileError, match="'From ProjData'.*'From ECAT8'"):
        _read(tmp_path, text)
