"""File names in Interfile headers: any name a file system holds, read as STIR reads it.

STIR reads a header as bytes and opens the data file whose name has the bytes written after
``name of data file :=``.  stirgpu reads each line as UTF-8 (what it writes), a line that is not
valid UTF-8 as Latin-1 (older STIR-written headers), and opens the data file by the line's own
bytes either way.  Names with spaces and non-ASCII letters are written as UTF-8; a name that is
not valid UTF-8 (given as bytes, ``os.fsdecode``'s surrogate escapes) is written as its bytes.
The messages for a folder named as the data file and for a key given twice are checked here too.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from stirgpu.errors import FormatError
from stirgpu.formats import ProjDataFromFile, VoxelsOnCartesianGrid, read_image, write_image
from stirgpu.formats import projdata_disk as projdata_disk_module
from stirgpu.formats.image import format_image_header
from stirgpu.formats.projdata_header import format_projdata_header
from stirgpu.formats.testing import small_proj_data_info
from stirgpu.geometry import ImageInfo

#: a Latin-1 name, as bytes (not valid UTF-8): what an old STIR wrote on a Latin-1 system
LATIN1_DATA = b"tr\xfcth im.v"


@pytest.fixture
def image():
    info = ImageInfo(shape=(3, 4, 5), voxel_size=(2.0, 1.5, 1.5))
    return VoxelsOnCartesianGrid(info, fill=np.arange(60, dtype=np.float32).reshape(3, 4, 5))


def _write_raw_image(folder, header_name: bytes, data_name: bytes, image, encoding: str) -> Path:
    """A header written by hand in ``encoding`` naming ``data_name``, and that data file; the
    header's path (names that are not UTF-8 as ``os.fsdecode`` gives them)."""
    text = format_image_header(image.info, "DATA_NAME")
    header = text.encode(encoding).replace(b"DATA_NAME", data_name)
    folder_b = os.fsencode(folder)
    with open(os.path.join(folder_b, data_name), "wb") as f:
        f.write(image.array.tobytes())
    path = os.path.join(folder_b, header_name)
    with open(path, "wb") as f:
        f.write(header)
    return Path(os.fsdecode(path))


def test_utf8_names_with_spaces_are_written_as_utf8_and_read_back(tmp_path, image):
    """An image and projection data named 'dir ü é/… ö' are written (no ASCII-only header
    writing), their headers are valid UTF-8 naming the data file as given, and they read back
    equal.  Guards against headers written with encoding='ascii' failing after the work."""
    folder = tmp_path / "dir ü é"
    folder.mkdir()
    hv = write_image(folder / "bild ö.hv", image)
    assert b"name of data file := bild \xc3\xb6.v\n" in hv.read_bytes()
    assert np.array_equal(read_image(hv).array, image.array)

    pdi = small_proj_data_info()
    with ProjDataFromFile.create(folder / "fwd ö.hs", pdi, fill=3.0) as pd:
        hs = pd.path
    hs.read_bytes().decode("utf-8")  # valid UTF-8
    assert "name of data file := fwd ö.s\n" in hs.read_text(encoding="utf-8")
    with ProjDataFromFile.open(hs) as pd:
        assert not pd.is_template and np.all(pd.as_array() == 3.0)


def test_a_utf8_header_opens_the_utf8_named_data_file(tmp_path, image):
    """A header written in UTF-8 naming 'trüth im.v' opens that file (it was read as Latin-1 and
    reported as a missing 'trÃ¼th im.v')."""
    hv = _write_raw_image(tmp_path, b"u.hv", "trüth im.v".encode(), image, "utf-8")
    assert np.array_equal(read_image(hv).array, image.array)


def test_a_latin1_header_opens_the_data_file_with_those_bytes(tmp_path, image):
    """A Latin-1 header (not valid UTF-8) naming b'tr\\xfcth im.v' opens the file whose name has
    exactly those bytes, as STIR does, for images and projection data; the header's own name is
    Latin-1 too."""
    hv = _write_raw_image(tmp_path, b"l\xe4tin.hv", LATIN1_DATA, image, "latin-1")
    assert np.array_equal(read_image(hv).array, image.array)

    pdi = small_proj_data_info()
    values = np.full(pdi.total_num_bins, 2.5, dtype=np.float32)
    (tmp_path / os.fsdecode(b"s\xfcn.s")).write_bytes(values.tobytes())
    text = format_projdata_header(pdi, "DATA_NAME", dtype=np.float32)
    hs = tmp_path / os.fsdecode(b"s\xfcn.hs")
    hs.write_bytes(text.encode("latin-1").replace(b"DATA_NAME", b"s\xfcn.s"))
    with ProjDataFromFile.open(hs) as pd:
        assert not pd.is_template and np.all(pd.as_array() == 2.5)


def test_each_line_is_read_in_its_own_encoding(tmp_path, image):
    """A header with one Latin-1 line (a comment-free key STIR ignores) and a UTF-8 data-file
    name: the name still opens the UTF-8-named file (the decision is per line, not per file)."""
    hv = _write_raw_image(tmp_path, b"mixed.hv", "dätä ü.v".encode(), image, "utf-8")
    with open(hv, "r+b") as f:
        text = f.read().replace(b"!INTERFILE :=\n", b"!INTERFILE :=\npatient name := M\xfcller\n")
        f.seek(0)
        f.write(text)
    assert np.array_equal(read_image(hv).array, image.array)


def test_a_name_that_is_not_utf8_is_written_as_its_own_bytes(tmp_path, image):
    """Output named with Latin-1 bytes (as a shell passes them): files with those bytes, a header
    naming the data file by them, and it reads back (what STIR writes and reads)."""
    hv = write_image(tmp_path / os.fsdecode(b"\xf6sem.hv"), image)
    assert os.fsencode(hv.name) == b"\xf6sem.hv"
    assert b"name of data file := \xf6sem.v\n" in hv.read_bytes()
    assert np.array_equal(read_image(hv).array, image.array)


def test_a_failing_header_write_leaves_no_file(tmp_path, monkeypatch):
    """The header of new projection data is written inside the abort/rename logic: when writing
    it fails, neither the data file nor the header (nor a temporary) is left behind."""

    def fail(text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(projdata_disk_module, "encode_header", fail)
    with pytest.raises(OSError, match="No space"):
        with ProjDataFromFile.create(tmp_path / "out ö.hs", small_proj_data_info(), fill=1.0):
            pass
    assert list(tmp_path.iterdir()) == []


def test_a_folder_named_as_data_file_is_said_to_be_a_folder(tmp_path, image):
    """'name of data file' naming a folder: the error says it is a folder (not 'truncated: it has
    4096 bytes'), naming the folder and the header, for images and projection data."""
    (tmp_path / "data.v").mkdir()
    hv = _write_raw_image(tmp_path, b"img.hv", b"x.v", image, "utf-8")
    os.replace(hv, tmp_path / "img.hv")
    (tmp_path / "img.hv").write_text((tmp_path / "img.hv").read_text().replace("x.v", "data.v"))
    with pytest.raises(FormatError) as e:
        read_image(tmp_path / "img.hv")
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'data.v'}: is a folder") and str(tmp_path / "img.hv") in msg
    assert "truncated" not in msg

    hs = tmp_path / "p.hs"
    hs.write_text(format_projdata_header(small_proj_data_info(), "data.v"))
    for allow_template in (True, False):
        with pytest.raises(FormatError) as e:
            ProjDataFromFile.open(hs, allow_template=allow_template)
        msg = str(e.value)
        assert msg.startswith(f"{tmp_path / 'data.v'}: is a folder") and str(hs) in msg


def test_a_key_given_twice_names_the_key_the_header_and_both_lines(tmp_path, image):
    """'!matrix size [1]' given twice with different values is refused naming the key, the header
    and both lines (it was reported as a data file of the wrong size); repeated with the same
    value it reads."""
    hv = tmp_path / "dup.hv"
    write_image(hv, image)
    text = hv.read_text()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("!matrix size [1]"))
    hv.write_text(text.replace("!matrix size [1] := 5\n", "!matrix size [1] := 5\nmatrix size[1] := 6\n"))
    with pytest.raises(FormatError) as e:
        read_image(hv)
    msg = str(e.value)
    assert msg.startswith(f"{hv}: key 'matrix size [1]': given twice with different values")
    assert f"line {at + 1} '5'" in msg and f"line {at + 2} '6'" in msg and "bytes" not in msg
    hv.write_text(text.replace("!matrix size [1] := 5\n", "!matrix size [1] := 5\nmatrix size[1] := 5\n"))
    assert np.array_equal(read_image(hv).array, image.array)
