"""stirgpu's geometry against a real STIR 6.5, case by case (``cases.py``).

Identities checked: STIR's scanner table, the segments (numbers, ring differences, axial
positions), phi / s / m / tan(theta) and the axial sampling of sampled bins, the default image of
projection data, and ``ProjDataInfo``'s own rule for the number of axial positions.

Tolerances: STIR computes and stores all of these in float32; stirgpu computes in float64.  A
float32 value carries a relative error up to 6e-8 per operation and a few operations stack up,
so 1e-5 relative holds with a wide margin, and 1e-4 mm absolute covers the values near 0 (m and
s of central bins, where the relative error of a float32 difference is large).  Anything larger
is a different rule, not rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from cases import (
    cylindrical_scanner_names,
    every_scanner_cases,
    large_cases,
    large_marks,
    non_cylindrical_scanner_names,
    params,
    quick_cases,
    stir_image,
    stir_proj_data_info,
    stirgpu_image_info,
    stirgpu_proj_data_info,
)

from stirgpu.errors import GeometryError
from stirgpu.formats import read_projdata_header
from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner

pytestmark = pytest.mark.stir

REL, ABS_MM, ABS_RAD = 1e-5, 1e-4, 1e-6

GEOMETRY_CASES = params(quick_cases()) + params(every_scanner_cases()) + params(large_cases(), marks=large_marks())


def _close(ours, theirs, name, rel=REL, abs_=ABS_MM):
    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    bad = ~np.isclose(ours, theirs, rtol=rel, atol=abs_)
    assert not bad.any(), (
        f"{name}: {int(bad.sum())} of {bad.size} differ, first at {np.argmax(bad)}: "
        f"stirgpu {ours.flat[np.argmax(bad)]!r}, STIR {theirs.flat[np.argmax(bad)]!r}"
    )


# -- scanners -------------------------------------------------------------------------------
def test_cylindrical_scanners_are_stirs(stir):
    """The scanners the cases cover are exactly STIR's predefined cylindrical ring scanners (STIR's
    own list, its geometry and ring count), so no scanner STIR knows is left out of the
    differential sets; guards against a stale ``stir_scanners.json``."""
    theirs = []
    for name in stir.Scanner.get_names_of_predefined_scanners():
        sc = stir.Scanner.get_scanner_from_name(name)
        if sc.get_scanner_geometry() == "Cylindrical" and sc.get_num_rings() >= 1:
            theirs.append(sc.get_name())
    assert list(cylindrical_scanner_names()) == theirs


@pytest.mark.parametrize("name", cylindrical_scanner_names())
def test_scanner_parameters(stir, name):
    """Each predefined scanner has STIR's parameters (float32 values to 1e-6 relative: they are
    stored as float32 in both); guards against a table entry copied wrong."""
    ours, theirs = Scanner.from_name(name), stir.Scanner.get_scanner_from_name(name)
    pairs = [
        ("num_rings", theirs.get_num_rings()),
        ("num_detectors_per_ring", theirs.get_num_detectors_per_ring()),
        ("inner_ring_radius", theirs.get_inner_ring_radius()),
        ("average_depth_of_interaction", theirs.get_average_depth_of_interaction()),
        ("ring_spacing", theirs.get_ring_spacing()),
        ("default_bin_size", theirs.get_default_bin_size()),
        ("intrinsic_azimuthal_tilt", theirs.get_intrinsic_azimuthal_tilt()),
        ("max_num_non_arccorrected_bins", theirs.get_max_num_non_arccorrected_bins()),
        ("default_num_arccorrected_bins", theirs.get_default_num_arccorrected_bins()),
        ("max_FOV_radius", theirs.get_max_FOV_radius()),
    ]
    for field, value in pairs:
        assert math.isclose(getattr(ours, field), value, rel_tol=1e-6, abs_tol=1e-7), (name, field)
    assert math.isclose(ours.effective_ring_radius, theirs.get_effective_ring_radius(), rel_tol=1e-6)


@pytest.mark.parametrize("name", non_cylindrical_scanner_names())
def test_non_cylindrical_scanners_are_refused_by_name(name):
    """STIR's scanners that are not cylindrical rings (HiDAC's placeholder, block geometries) are
    refused with an error naming the scanner, not half-supported."""
    with pytest.raises(GeometryError, match="cylindrical|unknown"):
        ProjDataInfo.construct(Scanner.from_name(name), 1, 0)


# -- projection data geometry ----------------------------------------------------------------
@pytest.mark.parametrize("case", GEOMETRY_CASES)
def test_segments_match_stir(stir, case):
    """Segment numbers, ring-difference ranges, axial positions and axial sampling per segment, as
    ``construct_proj_data_info`` makes them (exact integers; sampling to 1e-5 relative).  Guards
    against the old rule ``N - |RD|`` for single-ring-difference segments of span > 1 data (STIR
    gives them 2N - 1 - 2|RD| positions at full ring spacing)."""
    theirs, ours = stir_proj_data_info(stir, case), stirgpu_proj_data_info(case)
    assert (ours.get_min_segment_num(), ours.get_max_segment_num()) == (
        theirs.get_min_segment_num(),
        theirs.get_max_segment_num(),
    )
    for seg in ours.segment_nums:
        bin_ = stir.Bin(seg, 0, 0, 0)
        got = (ours.get_min_ring_difference(seg), ours.get_max_ring_difference(seg), ours.get_num_axial_poss(seg))
        want = (
            theirs.get_min_ring_difference(seg),
            theirs.get_max_ring_difference(seg),
            theirs.get_num_axial_poss(seg),
        )
        assert got == want, f"segment {seg}: stirgpu (RDmin, RDmax, axial) {got}, STIR {want}"
        _close(ours.get_sampling_in_m(seg), theirs.get_sampling_in_m(bin_), f"sampling in m of segment {seg}")
    assert ours.get_num_views() == theirs.get_num_views()
    assert ours.get_view_mashing_factor() == theirs.get_view_mashing_factor()
    assert (ours.get_min_tangential_pos_num(), ours.get_max_tangential_pos_num()) == (
        theirs.get_min_tangential_pos_num(),
        theirs.get_max_tangential_pos_num(),
    )
    _close(ours.get_azimuthal_angle_offset(), theirs.get_azimuthal_angle_offset(), "phi offset", abs_=ABS_RAD)
    _close(ours.get_azimuthal_angle_sampling(), theirs.get_azimuthal_angle_sampling(), "phi step", abs_=ABS_RAD)
    _close(ours.get_sampling_in_s(), theirs.get_sampling_in_s(stir.Bin(0, 0, 0, 0)), "sampling in s")


def _sampled_bins(pdi: ProjDataInfo, rng: np.random.Generator, per_segment: int = 24):
    """(segment, view, axial, tangential) of random bins of every segment, plus each segment's
    corners (first/last axial and tangential positions, first/last view)."""
    t0, t1 = pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num()
    out = []
    for seg in pdi.segment_nums:
        na, nv = pdi.get_num_axial_poss(seg), pdi.get_num_views()
        out += [(seg, v, a, t) for v in (0, nv - 1) for a in (0, na - 1) for t in (t0, t1)]
        out += [
            (seg, int(rng.integers(nv)), int(rng.integers(na)), int(rng.integers(t0, t1 + 1)))
            for _ in range(per_segment)
        ]
    return out


@pytest.mark.parametrize("case", GEOMETRY_CASES)
def test_bin_coordinates_match_stir(stir, case):
    """phi, s, m and tan(theta) of sampled bins (seeded) equal STIR's ``get_phi``/``get_s``/
    ``get_m``/``get_tantheta`` (float32 in STIR: 1e-5 relative, 1e-4 mm / 1e-6 rad absolute).
    Guards against a wrong m offset or axial sampling (incomplete or single-ring-difference
    segments), a wrong half-mash view offset and a wrong tangential formula."""
    theirs, ours = stir_proj_data_info(stir, case), stirgpu_proj_data_info(case)
    bins = _sampled_bins(ours, case.rng(1))
    want = np.array(
        [
            [theirs.get_phi(b), theirs.get_s(b), theirs.get_m(b), theirs.get_tantheta(b)]
            for b in (stir.Bin(*x) for x in bins)
        ]
    )
    got = np.array([[ours.get_phi(v), ours.get_s(t), ours.get_m(s, a), ours.get_tantheta(s, t)] for s, v, a, t in bins])
    _close(got[:, 0], want[:, 0], "phi", abs_=ABS_RAD)
    _close(got[:, 1], want[:, 1], "s")
    _close(got[:, 2], want[:, 2], "m")
    _close(got[:, 3], want[:, 3], "tan(theta)", abs_=1e-7)


@pytest.mark.parametrize("case", GEOMETRY_CASES)
def test_constructor_axial_positions_default_to_stirs(stir, case):
    """``ProjDataInfo(...)`` given only ring-difference ranges (``num_axial_poss=None``) derives
    the axial positions STIR's ``construct_proj_data_info`` gives; given STIR's numbers it takes
    them.  Guards against the constructor's own ``N - |RD|`` rule for single-difference segments."""
    theirs = stir_proj_data_info(stir, case)
    segs = range(theirs.get_min_segment_num(), theirs.get_max_segment_num() + 1)
    lo = [theirs.get_min_ring_difference(s) for s in segs]
    hi = [theirs.get_max_ring_difference(s) for s in segs]
    nax = [theirs.get_num_axial_poss(s) for s in segs]
    scanner = Scanner.from_name(case.scanner)
    derived = ProjDataInfo(scanner, lo, hi, case.num_views, case.num_tangential_poss, case.arc_corrected)
    given = ProjDataInfo(
        scanner, lo, hi, case.num_views, case.num_tangential_poss, case.arc_corrected, num_axial_poss=nax
    )
    assert [derived.get_num_axial_poss(s) for s in segs] == nax
    assert given == derived


# -- default images ----------------------------------------------------------------------------
def _stir_image_geometry(image):
    lengths, mins = image.get_lengths(), image.get_min_indices()
    vox, org = image.get_voxel_size(), image.get_origin()
    return (
        (lengths[1], lengths[2], lengths[3]),
        (vox.z(), vox.y(), vox.x()),
        (org.z(), org.y(), org.x()),
        (mins[1], mins[2], mins[3]),
    )


def _on_a_pixel_boundary(info: ImageInfo, pdi: ProjDataInfo) -> bool:
    """True when the largest |s| is (to float32 precision) a whole number of pixels: there STIR's
    ``2 ceil(max|s| / voxel) + 1`` flips with the last bit of its float32 voxel size."""
    t = [pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num()]
    ratio = float(np.max(np.abs(pdi.get_s(np.array(t))))) / info.voxel_size[2]
    return abs(ratio - round(ratio)) < 1e-5


def _assert_image_matches(ours: ImageInfo, theirs, pdi: ProjDataInfo, label: str) -> None:
    shape, vox, org, mins = _stir_image_geometry(theirs)
    if shape != ours.shape and _on_a_pixel_boundary(ours, pdi):
        # STIR's y (and z) voxel sizes come out one float32 ulp below x's in this build, so on
        # a boundary its y size is 2 more than its x size; stirgpu follows x (square images)
        assert (shape[0], shape[2]) == (ours.shape[0], ours.shape[2]), f"{label}: STIR {shape}, stirgpu {ours.shape}"
        assert shape[1] - ours.shape[1] in (0, 2), f"{label}: STIR {shape}, stirgpu {ours.shape}"
        assert ours.min_indices[2] == mins[2], label
    else:
        assert ours.shape == shape, label
        assert ours.min_indices == mins, label
    _close(ours.voxel_size, vox, f"{label}: voxel size")
    _close(ours.origin, org, f"{label}: origin")


@pytest.mark.parametrize("case", GEOMETRY_CASES)
def test_case_image_matches_stir(stir, case):
    """The case's image (zoom, origin offsets, given or default sizes) equals STIR's
    ``VoxelsOnCartesianGrid(pdi, zoom, origin, sizes)``: shapes and index ranges exactly, voxel
    sizes to 1e-5 relative and origins to 1e-4 mm (float32 in STIR).  Guards against a default
    size rule, a voxel size (default bin size / zoom, also for arc-corrected data) or an origin
    that is not STIR's."""
    theirs = stir_proj_data_info(stir, case)
    ours_pdi = stirgpu_proj_data_info(case)
    _assert_image_matches(stirgpu_image_info(case, ours_pdi), stir_image(stir, case, theirs), ours_pdi, case.label)


@pytest.mark.parametrize("case", params(quick_cases()))
def test_default_image_constructor_variants(stir, case):
    """STIR's shorter constructors ``VoxelsOnCartesianGrid(pdi)``, ``(pdi, zoom)`` and ``(pdi, zoom,
    origin)`` equal ``ImageInfo.default_for`` with the same arguments (defaults: zoom 1, origin 0,
    default sizes)."""
    theirs, ours = stir_proj_data_info(stir, case), stirgpu_proj_data_info(case)
    oz, oy, ox = case.origin_zyx
    variants = [
        (stir.FloatVoxelsOnCartesianGrid(theirs), ImageInfo.default_for(ours)),
        (stir.FloatVoxelsOnCartesianGrid(theirs, case.zoom), ImageInfo.default_for(ours, case.zoom)),
        (
            stir.FloatVoxelsOnCartesianGrid(theirs, case.zoom, stir.FloatCartesianCoordinate3D(oz, oy, ox)),
            ImageInfo.default_for(ours, case.zoom, origin=case.origin_zyx),
        ),
    ]
    for k, (image, info) in enumerate(variants):
        _assert_image_matches(info, image, ours, f"{case.label} variant {k}")


# -- regressions: STIR's rules where stirgpu had its own -----------------------------------
def test_default_image_ignores_arc_corrected_tangential_sampling(stir):
    """An arc-corrected geometry whose bin size is not the scanner's default: STIR's default image
    still uses the scanner's default bin size / zoom for its xy voxels (and sizes the image from
    max |s| in those voxels).  stirgpu used the data's tangential sampling."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 4, 96, 128, True
    )
    theirs.set_tangential_sampling(2.5)
    ours = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 4, 96, 128, True).replace(tangential_sampling=2.5)
    _close(ours.get_s(63), theirs.get_s(stir.Bin(0, 0, 0, 63)), "s with the changed bin size")
    for zoom in (1.0, 1.5):
        _assert_image_matches(
            ImageInfo.default_for(ours, zoom), stir.FloatVoxelsOnCartesianGrid(theirs, zoom), ours, f"zoom {zoom}"
        )


@pytest.mark.parametrize("span, n_seg0", [(3, 25), (1, 10)])
def test_default_image_planes_follow_segment_0(stir, span, n_seg0):
    """STIR's default number of planes comes from segment 0's axial positions (their number for
    span > 1, twice it minus one for span 1), not from the number of rings: here segment 0 is
    given fewer axial positions than construction would (as a header may)."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), span, 2, 96, 128, False
    )
    theirs.set_max_axial_pos_num(n_seg0 - 1, 0)
    built = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), span, 2, 96, 128, False)
    counts = [n_seg0 if s == 0 else built.get_num_axial_poss(s) for s in built.segment_nums]
    ours = built.replace(num_axial_poss=counts)
    _close(ours.get_m(0, 0), theirs.get_m(stir.Bin(0, 0, 0, 0)), "m of segment 0's first position")
    _assert_image_matches(ImageInfo.default_for(ours), stir.FloatVoxelsOnCartesianGrid(theirs), ours, f"span {span}")


def test_discovery_690_span_3_outer_segments(stir):
    """A divergence once found: GE Discovery 690, span 3, maximum ring difference 5.  The
    outermost segments hold ring difference +-5 alone; STIR gives them 2*24 - 1 - 2*5 = 37 axial
    positions at full ring spacing (6.54 mm), m from -117.72 mm; stirgpu gave 19 (N - |RD|)."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("GE Discovery 690"), 3, 5, 288, 381, False
    )
    ours = ProjDataInfo.construct(Scanner.from_name("GE Discovery 690"), 3, 5, 288, 381, False)
    for seg in (-2, 2):
        assert ours.get_num_axial_poss(seg) == theirs.get_num_axial_poss(seg) == 37
        _close(ours.get_sampling_in_m(seg), theirs.get_sampling_in_m(stir.Bin(seg, 0, 0, 0)), "sampling")
        _close(ours.get_m(seg, np.arange(37)), [theirs.get_m(stir.Bin(seg, 0, a, 0)) for a in range(37)], "m")


@pytest.mark.parametrize("counts", [[26, 44, 26], [0, 45, 27]])
def test_constructor_refuses_what_stir_refuses(counts):
    """Given axial positions STIR would refuse: an even count at half ring spacing (STIR aborts:
    the positions fall between the usual ring locations), or none at all.  The error names the
    segment and its ring differences."""
    with pytest.raises(GeometryError, match=r"segment -1 \(ring differences \[-4, -2\]\)"):
        ProjDataInfo(Scanner.from_name("ECAT 953"), [-4, -1, 2], [-2, 1, 4], 96, 128, False, num_axial_poss=counts)


@pytest.mark.parametrize(
    "scanner, span, max_rd",
    [
        ("ECAT 953", 2, 0),
        ("ECAT 953", 2, 5),
        ("ECAT 953", 4, 1),
        ("ECAT 953", 4, 7),
        ("ECAT 953", 6, 15),
        ("ECAT 953", 31, 15),
        ("GE Discovery 690", 8, 19),
        ("test_scanner", 7, 3),
        ("Siemens mMR", 10, 60),
    ],
)
def test_construct_any_span_like_stir(stir, scanner, span, max_rd):
    """``construct`` with even spans (STIR: segment 0 holds span + 1 ring differences, clipped at
    the maximum ring difference, so [-1, 0] for span 2 and max RD 0), the largest span 2N - 1 and
    clipped outer segments: the same segments, axial positions and m as STIR's
    ``construct_proj_data_info``.  stirgpu refused every even span."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name(scanner), span, max_rd, 12, 16, False
    )
    ours = ProjDataInfo.construct(Scanner.from_name(scanner), span, max_rd, 12, 16, False)
    segs = list(range(theirs.get_min_segment_num(), theirs.get_max_segment_num() + 1))
    assert list(ours.segment_nums) == segs
    for seg in segs:
        na = theirs.get_num_axial_poss(seg)
        assert (ours.get_min_ring_difference(seg), ours.get_max_ring_difference(seg), ours.get_num_axial_poss(seg)) == (
            theirs.get_min_ring_difference(seg),
            theirs.get_max_ring_difference(seg),
            na,
        )
        _close(
            ours.get_m(seg, np.array([0, na - 1])),
            [theirs.get_m(stir.Bin(seg, 0, a, 0)) for a in (0, na - 1)],
            f"m of segment {seg}",
        )


@pytest.mark.parametrize("scanner, num_views", [("ECAT 953", 100), ("ECAT 953", 7), ("GE Discovery 690", 250)])
def test_views_not_dividing_the_detectors_like_stir(stir, scanner, num_views, tmp_path):
    """A number of views that does not divide the unmashed views: STIR warns and goes on, with the
    scanner's view offset unshifted and the mashing factor rounded down; stirgpu gives the same
    phi and reads STIR's header of it.  stirgpu refused such geometries and headers."""
    theirs = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name(scanner), 1, 0, num_views, 16, False
    )
    ours = ProjDataInfo.construct(Scanner.from_name(scanner), 1, 0, num_views, 16, False)
    assert ours.get_view_mashing_factor() == theirs.get_view_mashing_factor()
    _close(ours.get_azimuthal_angle_offset(), theirs.get_azimuthal_angle_offset(), "phi offset", abs_=ABS_RAD)
    _close(
        ours.get_phi(np.arange(num_views)),
        [theirs.get_phi(stir.Bin(0, v, 0, 0)) for v in range(num_views)],
        "phi",
        abs_=ABS_RAD,
    )
    mode = stir.ios.out | stir.ios.ios_base_in | stir.ios.trunc
    written = stir.ProjDataInterfile(
        stir.ExamInfo(), theirs, str(tmp_path / "v.hs"), mode, stir.ProjDataFromStream.Segment_View_AxialPos_TangPos
    )
    del written
    assert read_projdata_header(tmp_path / "v.hs").proj_data_info == ours


@pytest.mark.parametrize("scanner", ["ECAT 953", "GE Discovery 690", "Siemens mMR"])
def test_tangential_limit_like_stir(stir, scanner):
    """Non-arc-corrected data may have at most the scanner's maximum number of non-arc-corrected
    bins (STIR refuses one more); arc-corrected data may have more.  stirgpu accepted any number
    (geometries STIR cannot hold, so headers STIR cannot read)."""
    sc_theirs, sc_ours = stir.Scanner.get_scanner_from_name(scanner), Scanner.from_name(scanner)
    n = sc_ours.max_num_non_arccorrected_bins
    assert n == sc_theirs.get_max_num_non_arccorrected_bins()
    stir.ProjDataInfo.construct_proj_data_info(sc_theirs, 1, 0, 12, n, False)
    ProjDataInfo.construct(sc_ours, 1, 0, 12, n, False)
    with pytest.raises(RuntimeError, match="exceeds the maximum number of non arc-corrected bins"):
        stir.ProjDataInfo.construct_proj_data_info(sc_theirs, 1, 0, 12, n + 1, False)
    with pytest.raises(GeometryError, match=rf"num_tangential_poss={n + 1} exceeds"):
        ProjDataInfo.construct(sc_ours, 1, 0, 12, n + 1, False)
    stir.ProjDataInfo.construct_proj_data_info(sc_theirs, 1, 0, 12, n + 41, True)
    assert ProjDataInfo.construct(sc_ours, 1, 0, 12, n + 41, True).get_num_tangential_poss() == n + 41


def test_cases_cover_the_required_features():
    """The seeded lists keep spanning the geometry features STIR's headers use (so an edit of ``cases.py`` cannot
    silently narrow them): every cylindrical scanner (every-scanner and large lists), spans 1..11,
    incomplete outer segments, odd and even maximum ring differences, view mashing, both arc
    flags, odd and even tangential and image sizes below the maxima, zooms, offsets on every axis,
    both FOV settings and storage orders; and the quick list stays cheap."""
    quick = quick_cases()
    for cases_ in (every_scanner_cases(), large_cases()):
        assert sorted({c.scanner for c in cases_}) == sorted(cylindrical_scanner_names())
    assert {c.span for c in quick} >= {1, 3, 5, 7, 9, 11}
    assert any(c.span > 1 and (c.max_ring_diff - (c.span - 1) // 2) % c.span for c in quick)
    assert {c.max_ring_diff % 2 for c in quick} == {0, 1}
    assert any(c.view_mash > 1 for c in quick) and {c.arc_corrected for c in quick} == {False, True}
    assert {c.num_tangential_poss % 2 for c in quick} == {0, 1}
    for c in quick + every_scanner_cases():
        sc = Scanner.from_name(c.scanner)
        limit = sc.default_num_arccorrected_bins if c.arc_corrected else sc.max_num_non_arccorrected_bins
        assert c.num_tangential_poss < limit and c.num_views >= 2, c.label
    assert {c.image_xy % 2 for c in quick if c.image_xy} == {0, 1} and any(c.image_xy is None for c in quick)
    assert any(c.image_z for c in quick) and len({c.zoom for c in quick}) >= 3
    assert all(any(c.offset_xyz[k] != 0 for c in quick) for k in range(3))
    assert {c.restrict_fov for c in quick} == {False, True}
    assert {c.storage_order for c in quick} == {"view", "sinogram"}
    assert any(c.scanner == "GE Discovery 690" and c.span == 3 and c.max_ring_diff == 5 for c in quick)
    assert max(c.num_bins for c in quick) <= 50_000 and len(set(c.label for c in quick)) == len(quick)
