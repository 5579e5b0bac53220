"""File names with spaces and non-ASCII letters, between stirgpu and a real STIR 6.5.

Identities checked: STIR reads the image stirgpu writes under a UTF-8 name (the header names its
data file in UTF-8) with the same values; stirgpu reads the image STIR writes under such a name;
and a header in Latin-1 naming its data file by Latin-1 bytes (not valid UTF-8) gives the same
values read by STIR and by stirgpu, so both open the file with those bytes.  Values are float32
and compared exactly (a file is a copy).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from stirgpu.formats import VoxelsOnCartesianGrid, read_image, write_image
from stirgpu.formats.image import format_image_header
from stirgpu.geometry import ImageInfo

pytestmark = pytest.mark.stir


@pytest.fixture
def image():
    info = ImageInfo(shape=(3, 6, 5), voxel_size=(2.0, 1.5, 1.5))
    values = np.random.default_rng(7).standard_normal(info.shape).astype(np.float32)
    return VoxelsOnCartesianGrid(info, fill=values)


def _stir_values(stir, path) -> np.ndarray:
    return np.asarray(stir.FloatVoxelsOnCartesianGrid.read_from_file(str(path)).as_array(), dtype=np.float32)


def test_stir_reads_what_stirgpu_writes_under_a_utf8_name(stir, image, tmp_path):
    """stirgpu writes 'dir ü é/bild ö.hv' (+ 'bild ö.v', named in UTF-8): STIR reads its values."""
    folder = tmp_path / "dir ü é"
    folder.mkdir()
    hv = write_image(folder / "bild ö.hv", image)
    np.testing.assert_array_equal(_stir_values(stir, hv), image.as_array())


def test_stirgpu_reads_what_stir_writes_under_a_utf8_name(stir, image, tmp_path):
    """STIR writes an image under 'dir ü é/bild ö.hv'; stirgpu reads the same values."""
    folder = tmp_path / "dir ü é"
    folder.mkdir()
    write_image(tmp_path / "source.hv", image)
    theirs = stir.FloatVoxelsOnCartesianGrid.read_from_file(str(tmp_path / "source.hv"))
    theirs.write_to_file(str(folder / "bild ö.hv"))
    assert (folder / "bild ö.v").is_file()
    np.testing.assert_array_equal(read_image(folder / "bild ö.hv").as_array(), image.as_array())


def test_a_latin1_header_opens_the_same_file_in_stir_and_stirgpu(stir, image, tmp_path):
    """A Latin-1 header naming b'tr\\xfcth im.v' beside a decoy 'trüth im.v' (the UTF-8 spelling)
    holding other values: STIR and stirgpu both read the file with the header's bytes."""
    (tmp_path / os.fsdecode(b"tr\xfcth im.v")).write_bytes(image.as_array().tobytes())
    (tmp_path / "trüth im.v").write_bytes((image.as_array() + 1).tobytes())
    text = format_image_header(image.info, "DATA")
    hv = tmp_path / "latin.hv"
    hv.write_bytes(text.encode("latin-1").replace(b"DATA", b"tr\xfcth im.v"))
    np.testing.assert_array_equal(_stir_values(stir, hv), image.as_array())
    np.testing.assert_array_equal(read_image(hv).as_array(), image.as_array())
