"""TOF sampling of ProjDataInfo without STIR: the two ways to ask for it, value semantics,
errors, and the Interfile round trip of the mashing factor (STIR's rules themselves are
checked against STIR in ``stir_differential/test_tof_geometry_vs_stir.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.formats import ProjDataFromFile, read_from_file
from stirgpu.geometry import ProjDataInfo, Scanner

DMI = "GE Discovery MI 4 rings"


def test_num_tof_poss_gives_the_mashing_factor():
    sc = Scanner.from_name(DMI)
    by_count = ProjDataInfo.construct(sc, 1, 0, 4, 5, num_tof_poss=13)
    by_mash = ProjDataInfo.construct(sc, 1, 0, 4, 5, tof_mash_factor=29)
    assert by_count == by_mash and by_count.get_tof_mash_factor() == 29
    assert (by_mash.get_min_tof_pos_num(), by_mash.get_max_tof_pos_num()) == (-6, 6)
    assert by_mash.num_bins() == 13 * by_mash.create_non_tof_clone().num_bins()
    assert by_mash != by_mash.create_non_tof_clone()
    assert "tof_mash_factor=29" in repr(by_mash)
    assert by_mash.subset(1, 4).num_bins == 13 * by_mash.create_non_tof_clone().subset(1, 4).num_bins


def test_even_positions_and_centres():
    sc = Scanner.from_name("Siemens Vision 600")
    p = ProjDataInfo.construct(sc, 1, 0, 7, 5, tof_mash_factor=66)  # 4 positions
    assert p.get_num_tof_poss() == 4 and (p.get_min_tof_pos_num(), p.get_max_tof_pos_num()) == (-2, 1)
    w = p.get_sampling_in_k(0)
    assert np.allclose(p.tof.centres_mm(), [-1.5 * w, -0.5 * w, 0.5 * w, 1.5 * w], rtol=1e-6)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(num_tof_poss=14), "must divide"),
        (dict(tof_mash_factor=30), "does not divide"),
        (dict(tof_mash_factor=378), "exceeds"),
        (dict(tof_mash_factor=-1), ">= 0"),
        (dict(num_tof_poss=13, tof_mash_factor=1), "disagrees"),
    ],
)
def test_bad_tof_arguments(kw, match):
    with pytest.raises(GeometryError, match=match):
        ProjDataInfo.construct(Scanner.from_name(DMI), 1, 0, 4, 5, **kw)


def test_tof_positions_on_a_non_tof_scanner_refused():
    with pytest.raises(GeometryError, match="TOF positions impossible"):
        ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 1, 0, 4, 5, num_tof_poss=3)


def test_replace_keeps_or_changes_tof():
    p = ProjDataInfo.construct(Scanner.from_name(DMI), 1, 0, 4, 5, tof_mash_factor=29)
    assert p.replace(num_views=8).get_tof_mash_factor() == 29
    assert p.replace(num_tof_poss=29).get_tof_mash_factor() == 13


def test_interfile_round_trip_keeps_the_mashing_factor(tmp_path):
    p = ProjDataInfo.construct(Scanner.from_name(DMI), 1, 0, 4, 5, tof_mash_factor=29)
    with ProjDataFromFile.create(tmp_path / "t.hs", p) as out:
        out.fill(1.0)
    back = read_from_file(tmp_path / "t.hs")
    assert back.proj_data_info == p and back.proj_data_info.get_tof_mash_factor() == 29
    assert "TOF mashing factor := 29" in (tmp_path / "t.hs").read_text()
