"""Geometry: STIR's numbers for scanners, segments, bins, subsets and default images."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import reference_results

from stirgpu.errors import GeometryError
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner


# -- scanners ---------------------------------------------------------------------------
def test_every_stir_scanner_matches_stir_values(stir_fixtures):
    """Each predefined STIR 6.5 scanner (fixture written by STIR) is available under every
    alias with STIR's values (float32 precision: STIR stores floats)."""
    table = json.loads((stir_fixtures / "stir_scanners.json").read_text())
    checked = 0
    for primary, ref in table.items():
        if ref["num_rings"] < 1:
            with pytest.raises(GeometryError, match="not a cylindrical"):
                Scanner.from_name(primary)
            continue
        for alias in ref["all_names"]:
            sc = Scanner.from_name(alias)
            if alias == "Discovery MI":  # an alias STIR shares between 4 models: the first wins
                continue
            assert sc.name == primary
            for key, val in ref.items():
                if key == "all_names":
                    assert tuple(val) == sc.all_names
                elif isinstance(val, str):
                    assert getattr(sc, key) == val
                else:
                    assert getattr(sc, key) == pytest.approx(val, rel=1e-6, abs=1e-6), (primary, key)
            checked += 1
    assert checked >= 40


def test_package_scanner_table_is_the_fixture(stir_fixtures):
    """The table shipped in the package is byte-for-byte STIR's."""
    from importlib import resources

    ours = resources.files("stirgpu.geometry").joinpath("data/stir_scanners.json").read_text()
    assert json.loads(ours) == json.loads((stir_fixtures / "stir_scanners.json").read_text())


def test_scanner_names_case_and_space_insensitive():
    assert Scanner.from_name("siemens_mmr") == Scanner.from_name("Siemens mMR")
    assert Scanner.from_name("MMR").num_rings == 64
    with pytest.raises(GeometryError, match="unknown scanner 'nope'"):
        Scanner.from_name("nope")


def test_user_defined_scanner_defaults_and_validation():
    sc = Scanner(
        "mine",
        num_rings=4,
        num_detectors_per_ring=100,
        inner_ring_radius=100.0,
        average_depth_of_interaction=5.0,
        ring_spacing=4.0,
    )
    assert sc.effective_ring_radius == 105.0
    assert sc.max_FOV_radius == 100.0
    # an unset bin size is the central non-arc-corrected bin (what STIR's default image uses)
    assert sc.default_bin_size == pytest.approx(105 * math.sin(math.pi / 100))
    assert sc.max_num_non_arccorrected_bins == 50
    assert sc.replace(num_rings=8).num_rings == 8
    with pytest.raises(GeometryError, match="even"):
        Scanner("odd", 4, 101, 100.0, 5.0, 4.0)
    with pytest.raises(GeometryError, match="positive"):
        Scanner("neg", 4, 100, -1.0, 5.0, 4.0)


def test_scanner_equality_tolerates_float32_rounding():
    a = Scanner.from_name("mMR")
    b = a.replace(default_bin_size=2.08626, name="custom")  # header decimal vs STIR's float32
    assert a == b and hash(a) == hash(b)
    assert a != a.replace(ring_spacing=4.1)


# -- projection-data geometry ---------------------------------------------------------------
@pytest.mark.parametrize("case", ["ecat953_span3", "ecat953_arc_sino"])
def test_bins_match_stir(stir_fixtures, case):
    """phi, s, m, tan(theta) of sample bins equal STIR's (float32 in STIR: rel 1e-6)."""
    ref = json.loads((reference_results(stir_fixtures) / f"{case}.json").read_text())
    g = ref["geometry"]
    sc = Scanner.from_name("ECAT 953")
    lo = [s["min_ring_diff"] for s in g["segments"]]
    hi = [s["max_ring_diff"] for s in g["segments"]]
    arc = case.endswith("arc_sino")
    pdi = ProjDataInfo(
        sc,
        lo,
        hi,
        g["num_views"],
        g["num_tangential_poss"],
        arc_corrected=arc,
        tangential_sampling=3.12932 if arc else None,
    )
    assert pdi.get_min_segment_num() == g["min_segment"] and pdi.get_max_segment_num() == g["max_segment"]
    assert pdi.get_min_tangential_pos_num() == g["min_tangential_pos"]
    assert pdi.get_max_tangential_pos_num() == g["max_tangential_pos"]
    for s in g["segments"]:
        assert pdi.get_num_axial_poss(s["segment"]) == s["num_axial_poss"]
    for b in g["bins"]:
        assert pdi.get_phi(b["view"]) == pytest.approx(b["phi"], abs=2e-6)
        assert pdi.get_s(b["tangential_pos"]) == pytest.approx(b["s"], rel=1e-5, abs=1e-4)
        assert pdi.get_m(b["segment"], b["axial_pos"]) == pytest.approx(b["m"], abs=1e-4)
        assert pdi.get_tantheta(b["segment"], b["tangential_pos"]) == pytest.approx(b["tantheta"], rel=1e-5, abs=1e-7)


def test_construct_span_like_stir():
    """mMR span 11, max ring difference 60: STIR's 837 sinograms in 11 segments."""
    pdi = ProjDataInfo.construct(Scanner.from_name("mMR"), span=11, max_ring_diff=60)
    assert pdi.segment_nums == tuple(range(-5, 6))
    assert pdi.get_num_sinograms() == 837
    assert (pdi.get_min_ring_difference(0), pdi.get_max_ring_difference(0)) == (-5, 5)
    assert (pdi.get_min_ring_difference(5), pdi.get_max_ring_difference(5)) == (50, 60)
    assert pdi.get_num_views() == 252 and pdi.get_num_tangential_poss() == 344
    assert pdi.get_sampling_in_m(1) == pytest.approx(4.0625 / 2)
    span1 = ProjDataInfo.construct(Scanner.from_name("mMR"), span=1, max_ring_diff=2)
    assert [s.num_axial_poss for s in span1.segments] == [62, 63, 64, 63, 62]
    assert span1.get_sampling_in_m(0) == pytest.approx(4.0625)
    assert span1.segment_nums_stir_order == (0, 1, -1, 2, -2)


def test_m_is_centred_and_matches_ring_positions():
    """A span-1 LOR between rings r1, r2 sits at the mean ring's z (scanner-centred)."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, 1, 15)
    for seg in pdi.segment_nums:
        d = abs(seg)
        for ax in (0, pdi.get_num_axial_poss(seg) - 1):
            r1 = ax
            zmean = (r1 + d / 2 - (sc.num_rings - 1) / 2) * sc.ring_spacing
            assert pdi.get_m(seg, ax) == pytest.approx(zmean)


def test_lor_endpoints_geometry():
    """Endpoints lie on the FOV cylinder, at distance |s| from the axis, with the detectors'
    axial difference; LORs outside the cylinder have zero length."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, 3, 4, 96, 128)
    v, a, t = np.meshgrid(np.arange(0, 96, 7), np.arange(0, 27, 5), np.arange(-64, 64, 3), indexing="ij")
    start, end = pdi.lor_endpoints(1, v, a, t)
    r = sc.max_FOV_radius
    for p in (start, end):
        np.testing.assert_allclose(np.hypot(p[..., 1], p[..., 2]), r, rtol=1e-12)
    d = end - start
    # distance of the transaxial line from the axis = |s|
    cross = np.abs(start[..., 2] * d[..., 1] - start[..., 1] * d[..., 2]) / np.hypot(d[..., 1], d[..., 2])
    np.testing.assert_allclose(cross, np.abs(pdi.get_s(t)), rtol=1e-9, atol=1e-9)
    # z slope: tan(theta) times transaxial length
    np.testing.assert_allclose(-d[..., 0], np.hypot(d[..., 1], d[..., 2]) * pdi.get_tantheta(1, t), rtol=1e-9)
    np.testing.assert_allclose(0.5 * (start[..., 0] + end[..., 0]), pdi.get_m(1, a), atol=1e-9)
    s_out, e_out = pdi.lor_endpoints(0, 0, 0, 63, radius=10.0)
    np.testing.assert_array_equal(s_out, e_out)


def test_chunk_tables_reproduce_endpoints():
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 96, 128)
    views = [5, 6, 50]
    tb = pdi.chunk_tables(-1, views)
    assert tb.shape == (3, 27, 128)
    i, k, j = 2, 11, 17
    a = tb.half_chord[j]
    end = np.array(
        [
            tb.m[k] - a * tb.tantheta[j],
            tb.s[j] * tb.sin_phi[i] - a * tb.cos_phi[i],
            tb.s[j] * tb.cos_phi[i] + a * tb.sin_phi[i],
        ]
    )
    _, ref = pdi.lor_endpoints(-1, views[i], k, tb.tangential_poss[j])
    np.testing.assert_allclose(end, ref, rtol=1e-12)
    with pytest.raises(ValueError):
        tb.m[0] = 1.0  # tables are read-only


def test_subsets_like_stir():
    pdi = ProjDataInfo.construct(Scanner.from_name("mMR"), 11, 60)
    all_views = np.concatenate([pdi.subset_views(k, 21) for k in range(21)])
    assert sorted(all_views.tolist()) == list(range(252))
    np.testing.assert_array_equal(pdi.subset_views(3, 21), np.arange(3, 252, 21))
    assert pdi.subsets_are_balanced(21) and not pdi.subsets_are_balanced(5)
    sel = pdi.subset(2, 4)
    assert sel.num_bins * 4 == pdi.total_num_bins
    assert pdi[0, ::2].segments == (0,)
    assert len(pdi[:, 3:9].views) == 6
    with pytest.raises(GeometryError):
        pdi.subset_views(4, 4)


def test_mashing_offset_and_invalid_geometry():
    sc = Scanner.from_name("ECAT 953")  # 384 detectors: 192 unmashed views
    p96 = ProjDataInfo.construct(sc, 1, 0, num_views=96, num_tangential_poss=10)
    assert p96.get_azimuthal_angle_offset() == pytest.approx(sc.intrinsic_azimuthal_tilt + math.pi / 192 / 2)
    # STIR accepts views that do not divide the unmashed 192, without the half-mash shift
    p100 = ProjDataInfo.construct(sc, 1, 0, num_views=100, num_tangential_poss=10)
    assert p100.get_azimuthal_angle_offset() == sc.intrinsic_azimuthal_tilt
    assert p100.get_view_mashing_factor() == 1
    with pytest.raises(GeometryError, match="num_views must be >= 1"):
        ProjDataInfo.construct(sc, 1, 0, num_views=0, num_tangential_poss=10)
    with pytest.raises(GeometryError, match="ascending"):
        ProjDataInfo(sc, [0, -1], [0, -1], 96, 10, False)
    # STIR refuses an even number of axial positions at half ring spacing (and accepts any
    # count at full ring spacing, e.g. 15 for ring difference 0 of 16 rings)
    with pytest.raises(GeometryError, match="odd number of axial positions"):
        ProjDataInfo(sc, [-1], [1], 96, 10, False, num_axial_poss=[30])
    assert ProjDataInfo(sc, [0], [0], 96, 10, False, num_axial_poss=[15]).get_num_axial_poss(0) == 15
    # STIR accepts even spans (segment 0 then holds span + 1 ring differences) but not spans
    # below 1 or above 2 N - 1
    assert ProjDataInfo.construct(sc, 2, 4).segment(0).max_ring_diff == 1
    for span in (0, 32):
        with pytest.raises(GeometryError, match="span must be in"):
            ProjDataInfo.construct(sc, span, 4)
    with pytest.raises(GeometryError, match="cylindrical"):
        ProjDataInfo.construct(Scanner.from_name("SAFIRDualRingPrototype"), 1, 0)


def test_reduce_segment_range_and_equality():
    pdi = ProjDataInfo.construct(Scanner.from_name("mMR"), 11, 60)
    red = pdi.reduce_segment_range(-2, 2)
    assert red.segment_nums == (-2, -1, 0, 1, 2)
    assert red == ProjDataInfo.construct(Scanner.from_name("mMR"), 11, 27)
    assert red != pdi
    assert eval(repr(red), {"ProjDataInfo": ProjDataInfo, "Scanner": Scanner}) == red
    custom = ProjDataInfo.construct(Scanner("mine", 4, 100, 100.0, 5.0, 4.0), 1, 3)
    assert eval(repr(custom), {"ProjDataInfo": ProjDataInfo, "Scanner": Scanner}) == custom


# -- images ---------------------------------------------------------------------------------
def test_default_image_like_stir(stir_fixtures):
    """STIR's default image for the ECAT 953 span-3 case (fixture json)."""
    ref = json.loads((reference_results(stir_fixtures) / "ecat953_span3.json").read_text())["image"]
    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 96, 128)
    img = ImageInfo.default_for(pdi)
    assert list(img.shape) == ref["shape"]
    np.testing.assert_allclose(img.voxel_size, ref["voxel"], rtol=1e-6)
    assert list(img.min_indices) == ref["min_indices"]
    assert img.gantry_origin == pytest.approx((-15 * 3.375, -63 * img.voxel_size[1], -63 * img.voxel_size[2]))


def test_image_info_shifted_origin():
    img = ImageInfo((31, 57, 57), (3.375, 2.5, 2.5), origin=(0.0, 2.0, -3.0))
    assert img.min_indices == (0, -28, -28)
    assert img.first_pixel_offset == pytest.approx((0.0, 2.0 - 70.0, -3.0 - 70.0))
    assert img.gantry_origin == pytest.approx((-15 * 3.375, -68.0, -73.0))
    assert ImageInfo((4, 6, 6), (1, 1, 1)).min_indices == (0, -3, -3)
    with pytest.raises(GeometryError, match="voxel_size"):
        ImageInfo((1, 1, 1), (1, 0, 1))
    assert eval(repr(img), {"ImageInfo": ImageInfo}) == img
    # STIR writes 6 significant digits: what it writes reads back as the same geometry
    assert img.replace(origin=(0.0, 2.00004, -2.99996), voxel_size=(3.375, 2.500001, 2.5)) == img
    assert img.replace(origin=(0.0, 2.01, -3.0)) != img
    assert img.replace(voxel_size=(3.375, 2.5001, 2.5)) != img
