"""The Interfile keyword layer: STIR's parsing rules, typed getters, errors, writing."""

from __future__ import annotations

import pytest

from stirgpu.errors import FormatError
from stirgpu.formats.interfile import HeaderWriter, format_line, format_value, key_id, parse_header, read_header

HEADER = """\
; a comment before the start is allowed
!INTERFILE  :=
!Number_Of   bytes per pixel := 4   ; trailing comment
name of data file := data.s
!matrix size [2] := { 27,31, 27}
matrix size[1] := 128
scaling factor (mm/pixel) [3] := 3.375
applied corrections := {None}
empty list := {}
number of rings := 17
Number_of rings := 17
bad int := 3.5
integral float := 4.0
!END OF INTERFILE :=
after the end := ignored
"""


@pytest.fixture
def hdr():
    return parse_header(HEADER, "/some/dir/x.hs")


def test_key_id_ignores_case_spaces_underscores_and_bang():
    """num_gpu_chunks == 'num gpu chunks' == '!NUM GPU CHUNKS' (STIR's standardise_keyword)."""
    assert key_id("num_gpu_chunks") == key_id("num gpu chunks") == key_id("!NUM  GPU_Chunks")
    assert key_id("number of rings") != key_id("number of ring")


def test_keys_match_in_any_spelling(hdr):
    assert hdr.get_int("number of bytes per pixel") == 4
    assert hdr.get_int("!NUMBER_OF_BYTES_PER_PIXEL") == 4
    assert hdr.get_str("Name_Of_Data_File") == "data.s"


def test_indexed_keys_with_and_without_space(hdr):
    assert hdr.get_int_list("matrix size", 2) == [27, 31, 27]
    assert hdr.get_int_list("matrix size", 1) == [128]
    assert hdr.get_float("scaling factor (mm/pixel)", 3) == 3.375
    assert hdr.indices("matrix size") == [1, 2]
    assert not hdr.has("matrix size")  # the un-indexed key is a different key


def test_lists(hdr):
    assert hdr.get_list("applied corrections") == ["None"]
    assert hdr.get_list("empty list") == []
    assert hdr.get_list("name of data file") == ["data.s"]  # a single value is a 1-list


def test_a_key_repeated_with_its_value_is_that_value_and_end_stops_parsing(hdr):
    """A key given twice with the same value (in any spelling) reads as that value; nothing after
    !END OF INTERFILE is read."""
    assert hdr.get_int("number of rings") == 17
    assert not hdr.has("after the end")


def test_a_key_repeated_with_another_value_is_refused_naming_both_lines():
    """'!matrix size [1]' given twice with different values is refused when read, naming the
    header, the key and both lines (STIR silently takes the last, so a hand-edited header would
    otherwise be reported as a data file of the wrong size).  Other keys still read."""
    text = "!INTERFILE :=\n!matrix size [1] := 128\nname of data file := d.v\nmatrix_size[1] := 64\n"
    hdr = parse_header(text, "/data/dup.hv")
    with pytest.raises(FormatError) as e:
        hdr.get_int("matrix size", 1)
    msg = str(e.value)
    assert msg.startswith("/data/dup.hv: key 'matrix_size [1]': given twice with different values")
    assert "line 2 '128'" in msg and "line 4 '64'" in msg
    assert hdr.get_str("name of data file") == "d.v"


def test_integral_float_is_an_int_but_fraction_is_an_error(hdr):
    assert hdr.get_int("integral float") == 4
    with pytest.raises(FormatError) as e:
        hdr.get_int("bad int")
    msg = str(e.value)
    assert "/some/dir/x.hs" in msg and "bad int" in msg and "line 12" in msg


def test_missing_key_error_names_file_and_key(hdr):
    with pytest.raises(FormatError, match=r"x\.hs.*number format.*missing"):
        hdr.get_str("!number format")
    assert hdr.get_str("number format", default="float") == "float"
    assert hdr.get_int_list("absent", default=None) is None


def test_folder_for_data_files(hdr):
    assert str(hdr.folder) == "/some/dir"


@pytest.mark.parametrize(
    "text",
    [
        "hello world\nthis is not interfile\n",
        "name of data file := x.s\n!INTERFILE :=\n",  # INTERFILE must come first
        "",
    ],
)
def test_garbage_is_format_error_naming_file(text):
    with pytest.raises(FormatError, match=r"junk\.hs.*not an Interfile header"):
        parse_header(text, "junk.hs")


def test_line_without_assignment_after_start_names_line():
    with pytest.raises(FormatError, match=r"h\.hs.*line 3"):
        parse_header("!INTERFILE :=\na := 1\nstray text\n", "h.hs")


def test_read_header_refuses_binary_file(tmp_path):
    """Giving the raw data file instead of the header is a clear error, not a crash."""
    p = tmp_path / "data.s"
    p.write_bytes(b"\x00\x01\x02" * 1000)
    with pytest.raises(FormatError, match=r"data\.s.*not an Interfile header"):
        read_header(p)


def test_read_header_missing_file(tmp_path):
    with pytest.raises(FormatError, match=r"nothere\.hs.*not found"):
        read_header(tmp_path / "nothere.hs")


def test_format_value_and_lines():
    """Numbers keep up to 12 significant digits (no float noise); lists are {a,b}."""
    assert format_value(0.31293200000000004) == "0.312932"
    assert format_value([1, -2, 3]) == "{1,-2,3}"
    assert format_value(True) == "1"
    assert format_line("!matrix size", [3, 4], index=2) == "!matrix size [2] := {3,4}"
    assert format_line("!GENERAL DATA") == "!GENERAL DATA :="


def test_writer_output_parses_back():
    """What HeaderWriter writes, parse_header reads to the same values."""
    w = HeaderWriter()
    w.add("!number format", "float")
    w.add("!matrix size", [27, 31, 27], index=2)
    w.add("scale", 2.5e-7)
    w.add("Number of rings", 16, indent=2)
    h = parse_header(w.text())
    assert h.get_str("number format") == "float"
    assert h.get_int_list("matrix size", 2) == [27, 31, 27]
    assert h.get_float("scale") == 2.5e-7
    assert h.get_int("number of rings") == 16
    assert w.text().startswith("!INTERFILE :=\n") and w.text().endswith("!END OF INTERFILE :=\n")
