"""Projection-data headers: scanner block, segments, orders, TOF, arc correction, errors."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from stirgpu.errors import FormatError
from stirgpu.formats import StorageOrder
from stirgpu.formats.interfile import parse_header
from stirgpu.formats.projdata_header import format_projdata_header, projdata_header_from_interfile, scanner_from_header
from stirgpu.formats.testing import small_proj_data_info, small_tof_proj_data_info
from stirgpu.geometry import ProjDataInfo, Scanner

# A header as STIR 6 writes it (shape of ../shared/fixtures/stir_reference_lpp2.0.7/ecat953_span3_fwd.hs)
STIR_SPAN3 = """\
!INTERFILE  :=
!imaging modality := PT
name of data file := span3.s
originating system := ECAT 953
!version of keys := STIR6.0
!GENERAL DATA :=
!GENERAL IMAGE DATA :=
!type of data := PET
imagedata byte order := LITTLEENDIAN
number of radionuclides := 1
!PET STUDY (General) :=
!PET data type := Emission
applied corrections := {None}
!number format := float
!number of bytes per pixel := 4
number of dimensions := 4
matrix axis label [4] := segment
!matrix size [4] := 3
matrix axis label [3] := view
!matrix size [3] := 96
matrix axis label [2] := axial coordinate
!matrix size [2] := { 27,31,27}
matrix axis label [1] := tangential coordinate
!matrix size [1] := 128
minimum ring difference per segment := { -4,-1,2}
maximum ring difference per segment := { -2,1,4}
Scanner parameters:=
  Scanner type := ECAT 953
  Number of rings                          := 16
  Number of detectors per ring             := 384
  Inner ring diameter (cm)                 := 76.5
  Average depth of interaction (cm)        := 0.7
  Distance between rings (cm)              := 0.675
  Default bin size (cm)                    := 0.312932
  View offset (degrees)                    := -15
  Maximum number of non-arc-corrected bins := 160
  Default number of arc-corrected bins     := 160
  Energy resolution         := 0
  Reference energy (in keV) := 511
  Number of blocks per bucket in transaxial direction         := 4
  Number of blocks per bucket in axial direction              := 1
  Number of crystals per block in axial direction             := 8
  Number of crystals per block in transaxial direction        := 8
  Number of detector layers                                   := 1
  Number of crystals per singles unit in axial direction      := 8
  Number of crystals per singles unit in transaxial direction := 32
  Scanner geometry (BlocksOnCylindrical/Cylindrical/Generic)  := Cylindrical
End scanner parameters:=
number of time frames := 1
!END OF INTERFILE :=
"""


def parse(text, name="test.hs"):
    return projdata_header_from_interfile(parse_header(text, f"/data/{name}"))


def edit(text: str, key_regex: str, new_line: str | None) -> str:
    """Replace (or with None, delete) the line whose key matches ``key_regex``."""
    pat = re.compile(rf"^[ \t]*{key_regex}[ \t]*:=.*$\n?", re.MULTILINE | re.IGNORECASE)
    assert pat.search(text), key_regex
    return pat.sub("" if new_line is None else new_line + "\n", text, count=1)


def test_stir_header_gives_stir_geometry():
    """STIR's span-3 header: segments -1..1 with ring differences [-4,-2],[-1,1],[2,4] and
    27/31/27 axial positions, 96 views, 128 tangential positions, not arc-corrected."""
    h = parse(STIR_SPAN3)
    pdi = h.proj_data_info
    assert pdi == ProjDataInfo.construct(
        Scanner.from_name("ECAT 953"), span=3, max_ring_diff=4, num_views=96, num_tangential_poss=128
    )
    assert [pdi.get_num_axial_poss(s) for s in (-1, 0, 1)] == [27, 31, 27]
    assert h.storage_order is StorageOrder.VIEW
    assert h.dtype == np.dtype("<f4") and h.data_offset == 0 and h.scale_factor == 1.0
    assert h.segment_sequence == (-1, 0, 1)
    assert str(h.data_path) == "/data/span3.s"


@pytest.mark.parametrize("sizes", ["{37,43,47,43,37}", "{19,43,47,43,19}"])
@pytest.mark.parametrize("order", [StorageOrder.VIEW, StorageOrder.SINOGRAM])
def test_single_difference_segments_take_the_headers_axial_counts(sizes, order):
    """GE Discovery 690, span 3, max ring difference 5 (a header STIR writes for it): the segments of ring difference
    +-5 alone have 37 axial positions as STIR constructs them, or whatever count a header gives
    (19 = N - |RD| here), at full ring spacing with m symmetric about 0, as STIR reads them.
    stirgpu refused the 37 of STIR's own headers ('disagrees with the geometry')."""
    built = ProjDataInfo.construct(Scanner.from_name("GE Discovery 690"), 3, 5, 288, 381)
    text = format_projdata_header(built, "d690.s", order)
    assert "{37,43,47,43,37}" in text
    pdi = parse(text.replace("{37,43,47,43,37}", sizes)).proj_data_info
    n = int(sizes[1:3])
    assert [pdi.get_num_axial_poss(s) for s in pdi.segment_nums] == [n, 43, 47, 43, n]
    assert pdi.get_sampling_in_m(2) == pytest.approx(6.54, rel=1e-6)
    assert pdi.get_m(2, 0) == pytest.approx(-(n - 1) * 6.54 / 2, rel=1e-6)
    assert pdi.get_m(-2, n - 1) == pytest.approx((n - 1) * 6.54 / 2, rel=1e-6)


def test_known_scanner_values_written_with_six_digits_are_that_scanner():
    """STIR writes floats with 6 significant digits: UPENN_6rings' TOF bin size 19.53125 ps comes
    out as 19.5312 (2.6e-6 off).  Such a header is still the predefined scanner, so its geometry
    equals the constructed one; stirgpu turned it into a different scanner."""
    built = ProjDataInfo.construct(Scanner.from_name("UPENN_6rings"), 3, 4, 3, 14, arc_corrected=True)
    text = format_projdata_header(built, "u.s")
    assert "Size of unmashed TOF time bins (ps) := 19.53125" in text
    text = text.replace("19.53125", "19.5312")
    pdi = parse(text).proj_data_info
    assert pdi.get_scanner() == Scanner.from_name("UPENN_6rings")
    assert pdi.get_tangential_sampling() == Scanner.from_name("UPENN_6rings").default_bin_size
    assert pdi == built


def test_views_not_dividing_the_detectors_are_read_like_stir():
    """97 views of a 192-view scanner: STIR reads the header (with a warning) and keeps the
    scanner's view offset unshifted; stirgpu refused it."""
    pdi = parse(STIR_SPAN3.replace("!matrix size [3] := 96", "!matrix size [3] := 97")).proj_data_info
    assert pdi.get_num_views() == 97
    assert pdi.get_azimuthal_angle_offset() == pytest.approx(math.radians(-15), abs=1e-7)
    assert pdi.get_phi(1) == pytest.approx(math.pi / 97 + math.radians(-15), abs=1e-7)


def test_scanner_block_units_cm_to_mm_degrees_to_radians():
    """Header lengths are cm (diameter for the ring), angles degrees; Scanner holds mm/radians."""
    text = STIR_SPAN3.replace("Scanner type := ECAT 953", "Scanner type := my scanner")
    text = text.replace("originating system := ECAT 953", "originating system := my scanner")
    sc = scanner_from_header(parse_header(text, "x.hs"))
    assert sc.name == "my scanner"
    assert sc.inner_ring_radius == pytest.approx(382.5)
    assert sc.average_depth_of_interaction == pytest.approx(7.0)
    assert sc.ring_spacing == pytest.approx(6.75)
    assert sc.default_bin_size == pytest.approx(3.12932)
    assert sc.intrinsic_azimuthal_tilt == pytest.approx(math.radians(-15))
    assert sc == Scanner.from_name("ECAT 953")  # same values, user-defined name


def test_known_scanner_name_alone_gives_its_values():
    """A 'Scanner type' STIR knows, with no other keys, is that scanner."""
    start = STIR_SPAN3.index("  Number of rings")
    end = STIR_SPAN3.index("End scanner parameters")
    sc = scanner_from_header(parse_header(STIR_SPAN3[:start] + STIR_SPAN3[end:], "x.hs"))
    assert sc == Scanner.from_name("ECAT 953")


def test_explicit_keys_override_a_known_scanner():
    text = edit(STIR_SPAN3, r"Average depth of interaction \(cm\)", "Average depth of interaction (cm) := 1.2")
    sc = scanner_from_header(parse_header(text, "x.hs"))
    assert sc.average_depth_of_interaction == pytest.approx(12.0)
    assert sc.num_rings == 16 and sc.inner_ring_radius == pytest.approx(382.5)


def test_negative_means_not_given_like_stir():
    """STIR writes -1 for unset lengths (scatter_cylinder.hs: 'Default bin size (cm) := -1')."""
    text = edit(STIR_SPAN3, r"Default bin size \(cm\)", "Default bin size (cm) := -1")
    assert scanner_from_header(parse_header(text, "x.hs")).default_bin_size == pytest.approx(3.12932, rel=1e-6)


def test_unknown_scanner_needs_full_block():
    text = STIR_SPAN3.replace("ECAT 953", "Mystery PET")
    text = edit(text, "Distance between rings \\(cm\\)", None)
    with pytest.raises(FormatError) as e:
        parse(text)
    assert "/data/test.hs" in str(e.value) and "Distance between rings (cm)" in str(e.value)


def test_applied_corrections_rules():
    """STIR: 'applied corrections' absent => arc-corrected; {None} => not; {arc correction} => yes."""
    assert not parse(STIR_SPAN3).proj_data_info.is_arc_corrected()
    absent = parse(edit(STIR_SPAN3, "applied corrections", None)).proj_data_info
    assert absent.is_arc_corrected()
    arc = parse(edit(STIR_SPAN3, "applied corrections", "applied corrections := {arc correction}"))
    assert arc.proj_data_info.is_arc_corrected()


def test_effective_central_bin_size_is_the_arc_corrected_sampling():
    text = edit(STIR_SPAN3, "applied corrections", "applied corrections := {arc correction}")
    text = text.replace("number of time frames", "effective central bin size (cm) := 0.25\nnumber of time frames")
    assert parse(text).proj_data_info.get_tangential_sampling() == pytest.approx(2.5)


def test_sinogram_order_from_axis_labels():
    text = STIR_SPAN3.replace("matrix axis label [3] := view", "matrix axis label [3] := axial coordinate")
    text = text.replace("!matrix size [3] := 96", "!matrix size [3] := { 27,31,27}")
    text = text.replace("matrix axis label [2] := axial coordinate", "matrix axis label [2] := view")
    text = text.replace("!matrix size [2] := { 27,31,27}", "!matrix size [2] := 96")
    h = parse(text)
    assert h.storage_order is StorageOrder.SINOGRAM
    assert h.proj_data_info.get_num_views() == 96


def test_segments_in_any_file_order():
    """Segment numbers follow the ring differences, whatever order the file lists them in."""
    text = edit(STIR_SPAN3, "minimum ring difference per segment", "minimum ring difference per segment := {2,-1,-4}")
    text = edit(text, "maximum ring difference per segment", "maximum ring difference per segment := {4,1,-2}")
    h = parse(text)
    assert h.segment_sequence == (1, 0, -1)
    assert h.proj_data_info.get_min_ring_difference(1) == 2


def test_number_formats_and_byte_order():
    cases = {
        ("float", 8, "BIGENDIAN"): ">f8",
        ("signed integer", 2, "LITTLEENDIAN"): "<i2",
        ("signed integer", 4, "BIGENDIAN"): ">i4",
        ("unsigned integer", 2, "LITTLEENDIAN"): "<u2",
    }
    for (fmt, nb, order), expected in cases.items():
        text = edit(STIR_SPAN3, "!number format", f"!number format := {fmt}")
        text = edit(text, "!number of bytes per pixel", f"!number of bytes per pixel := {nb}")
        text = edit(text, "imagedata byte order", f"imagedata byte order := {order}")
        assert parse(text).dtype == np.dtype(expected)


def test_missing_byte_order_is_big_endian_like_stir():
    assert parse(edit(STIR_SPAN3, "imagedata byte order", None)).dtype == np.dtype(">f4")


def test_offset_and_scale_factor():
    text = STIR_SPAN3.replace(
        "number of time frames",
        "data offset in bytes[1] := 1024\nimage scaling factor[1] := 0.5\nnumber of time frames",
    )
    h = parse(text)
    assert h.data_offset == 1024 and h.scale_factor == 0.5


def test_tof_five_dimensions():
    text = format_projdata_header(small_tof_proj_data_info(), "tof.s")
    assert "matrix axis label [5] := timing positions" in text
    h = parse(text)
    assert h.proj_data_info == small_tof_proj_data_info()
    assert h.proj_data_info.get_num_tof_poss() == 3


@pytest.mark.parametrize("pdi_maker", [small_proj_data_info, small_tof_proj_data_info])
@pytest.mark.parametrize("order", list(StorageOrder))
@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8"])
@pytest.mark.parametrize("arc", [False, True])
def test_written_header_reads_back_to_same_geometry(pdi_maker, order, dtype, arc):
    pdi = pdi_maker()
    if arc:
        pdi = pdi.replace(arc_corrected=True, tangential_sampling=2.25)
    h = parse(format_projdata_header(pdi, "x.s", order, dtype))
    assert h.proj_data_info == pdi
    assert h.storage_order is order and h.dtype == np.dtype(dtype)
    assert h.segment_sequence == pdi.segment_nums


def test_written_header_has_stirs_keys_and_values():
    """Our header for STIR's span-3 geometry carries every key STIR wrote, with STIR's values
    (numbers compared as numbers, lists as lists)."""
    stir = parse_header(STIR_SPAN3)
    ours = parse_header(format_projdata_header(parse(STIR_SPAN3).proj_data_info, "span3.s"))
    for e in stir.entries:
        o = ours.entry(e.key, e.index)
        assert o is not None, e.key
        a, b = stir.get_list(e.key, e.index), ours.get_list(e.key, e.index)
        try:
            assert [float(x) for x in a] == pytest.approx([float(x) for x in b], rel=1e-6), e.key
        except ValueError:
            assert [x.lower() for x in a] == [x.lower() for x in b], e.key


# -- bad headers: a FormatError naming the file and the key ---------------------------------

BAD = {
    "non-emission": (lambda t: edit(t, "!PET data type", "!PET data type := Transmission"), "PET data type"),
    "no PET data type": (lambda t: edit(t, "!PET data type", None), "PET data type"),
    "unknown number format": (lambda t: edit(t, "!number format", "!number format := bit"), "number format"),
    "bad bytes per pixel": (
        lambda t: edit(t, "!number of bytes per pixel", "!number of bytes per pixel := 3"),
        "number of bytes per pixel",
    ),
    "bad byte order": (
        lambda t: edit(t, "imagedata byte order", "imagedata byte order := MIDDLEENDIAN"),
        "imagedata byte order",
    ),
    "even axial size at half ring spacing (STIR refuses it)": (
        lambda t: t.replace("{ 27,31,27}", "{ 27,30,27}"),
        "matrix size [2]",
    ),
    "axial list too short": (lambda t: t.replace("{ 27,31,27}", "{ 27,31}"), "matrix size [2]"),
    "ring difference list too long": (
        lambda t: edit(t, "minimum ring difference per segment", "minimum ring difference per segment := {-4,-1,2,5}"),
        "minimum ring difference per segment",
    ),
    "overlapping segments": (
        lambda t: edit(t, "minimum ring difference per segment", "minimum ring difference per segment := {-4,-2,2}"),
        "minimum ring difference per segment",
    ),
    "no segment zero": (
        lambda t: edit(
            edit(t, "minimum ring difference per segment", "minimum ring difference per segment := {1,2,3}"),
            "maximum ring difference per segment",
            "maximum ring difference per segment := {1,2,3}",
        ),
        "minimum ring difference per segment",
    ),
    "3 dimensions": (lambda t: edit(t, "number of dimensions", "number of dimensions := 3"), "number of dimensions"),
    "bad tangential label": (lambda t: t.replace("tangential coordinate", "bins"), "matrix axis label [1]"),
    "no views": (lambda t: t.replace("!matrix size [3] := 96", "!matrix size [3] := 0"), "matrix size [3]"),
    "bad integer": (lambda t: t.replace("!matrix size [1] := 128", "!matrix size [1] := 12x8"), "matrix size [1]"),
    "TOF on a non-TOF scanner": (
        lambda t: t.replace(
            "number of dimensions := 4",
            "number of dimensions := 5\nmatrix axis label [5] := timing positions\n!matrix size [5] := 3",
        ),
        "matrix size [5]",
    ),
    "two frames": (
        lambda t: t.replace("number of time frames := 1", "number of time frames := 2"),
        "number of time frames",
    ),
    "SPECT": (lambda t: t.replace("!type of data := PET", "!type of data := Tomographic"), "type of data"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_headers_name_file_and_key(case):
    make, key = BAD[case]
    with pytest.raises(FormatError) as e:
        parse(make(STIR_SPAN3), "bad.hs")
    msg = str(e.value)
    assert "/data/bad.hs" in msg, msg
    assert key.lower() in msg.lower(), msg
