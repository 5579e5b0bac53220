"""Images: VoxelsOnCartesianGrid and Interfile .hv/.v read/write."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import stirgpu.formats.image as image_mod
from stirgpu.errors import FormatError, GeometryError
from stirgpu.formats import VoxelsOnCartesianGrid, read_image, write_image
from stirgpu.formats.image import format_image_header
from stirgpu.geometry import ImageInfo

INFO = ImageInfo((5, 7, 6), (3.375, 2.503456, 2.25), origin=(1.5, 2.0, -3.0))


def snapshot(folder):
    return {p.name: hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def random_image(info=INFO, seed=0):
    return VoxelsOnCartesianGrid(info, np.random.default_rng(seed).standard_normal(info.shape))


def test_stir_names():
    img = random_image()
    assert img.get_lengths() == (5, 7, 6)
    assert img.get_voxel_size() == (3.375, 2.503456, 2.25)
    assert img.get_origin() == (1.5, 2.0, -3.0)
    assert img.get_min_indices() == (0, -3, -3)
    assert img.get_max_indices() == (4, 3, 2)
    a = img.as_array()
    assert a.dtype == np.float32 and a.shape == (5, 7, 6)
    a[...] = 0
    assert np.any(img.as_array())  # as_array is a copy, as in STIR's Python
    img.fill(2.0)
    assert np.all(img.as_array() == 2.0)
    with pytest.raises(GeometryError, match="shape"):
        img.fill(np.zeros((5, 6, 7)))


def test_round_trip_bit_identical_with_geometry(tmp_path):
    """write -> read gives the same float32 bits and the same geometry (origin recovered from
    'first pixel offset' = origin + voxel * min_index)."""
    img = random_image()
    write_image(tmp_path / "im.hv", img)
    back = read_image(tmp_path / "im.hv")
    assert back.as_array().tobytes() == img.as_array().tobytes()
    assert back.info == img.info
    assert sorted(p.name for p in tmp_path.iterdir()) == ["im.hv", "im.v"]


def test_first_pixel_offset_is_origin_plus_voxel_times_min_index():
    text = format_image_header(INFO, "x.v")
    assert "first pixel offset (mm) [1] := -9.75" in text  # x: -3 + 2.25 * -3
    assert "first pixel offset (mm) [3] := 1.5" in text  # z: 1.5 + 3.375 * 0
    assert "!matrix size [1] := 6" in text and "!matrix size [3] := 5" in text


def write_raw(tmp_path, values, dtype, extra="", offset=0, fpo=True, name="r"):
    (tmp_path / f"{name}.v").write_bytes(b"\0" * offset + np.ascontiguousarray(values, dtype=dtype).tobytes())
    text = format_image_header(INFO, f"{name}.v", dtype)
    if not fpo:
        text = "\n".join(line for line in text.splitlines() if "first pixel offset" not in line) + "\n"
    text = text.replace("number of time frames := 1", extra + "number of time frames := 1")
    if offset:
        text = text.replace("number of time frames", f"data offset in bytes[1] := {offset}\nnumber of time frames")
    (tmp_path / f"{name}.hv").write_text(text)
    return tmp_path / f"{name}.hv"


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">i2", "<i4", "<u2"])
def test_number_formats_offset_scaling(tmp_path, dtype):
    """Any supported number format/byte order, after an offset, times the scaling factor."""
    stored = np.random.default_rng(3).integers(0, 100, INFO.shape).astype(np.float32)
    hv = write_raw(tmp_path, stored, dtype, extra="image scaling factor[1] := 0.25\n", offset=32)
    np.testing.assert_array_equal(read_image(hv).as_array(), stored * np.float32(0.25))


def test_per_plane_scaling_factors(tmp_path):
    stored = np.ones(INFO.shape, np.float32)
    hv = write_raw(tmp_path, stored, "<f4", extra="image scaling factor[1] := {1,2,3,4,5}\n")
    np.testing.assert_array_equal(read_image(hv).as_array()[:, 0, 0], [1, 2, 3, 4, 5])


def test_absent_first_pixel_offsets_mean_origin_zero(tmp_path):
    """STIR: without 'first pixel offset' the origin is 0 (test_image_3.hv has none)."""
    hv = write_raw(tmp_path, np.zeros(INFO.shape), "<f4", fpo=False)
    assert read_image(hv).get_origin() == (0.0, 0.0, 0.0)


def test_first_pixel_offset_counts_only_with_its_z_entry(tmp_path):
    """STIR reads the origin from 'first pixel offset' only when the z entry ([3]) is there: x and
    y entries alone leave the origin at 0; a z entry without x or y is refused (STIR would use an
    undefined value)."""
    hv = write_raw(tmp_path, np.zeros(INFO.shape), "<f4")
    text = hv.read_text()
    z_line = next(line for line in text.splitlines() if line.startswith("first pixel offset (mm) [3]"))
    hv.write_text(text.replace(z_line + "\n", ""))
    assert read_image(hv).get_origin() == (0.0, 0.0, 0.0)
    x_line = next(line for line in text.splitlines() if line.startswith("first pixel offset (mm) [1]"))
    hv.write_text(text.replace(x_line + "\n", ""))
    with pytest.raises(FormatError, match=r"first pixel offset \(mm\) \[1\]"):
        read_image(hv)


BAD = {
    "projection data": (lambda t: t.replace("!PET data type := Image", "!PET data type := Emission"), "PET data type"),
    "2D": (lambda t: t.replace("number of dimensions := 3", "number of dimensions := 2"), "number of dimensions"),
    "z,y,x labels": (
        lambda t: t.replace("matrix axis label [1] := x", "matrix axis label [1] := z"),
        "matrix axis label [1]",
    ),
    "bad size": (lambda t: t.replace("!matrix size [2] := 7", "!matrix size [2] := 0"), "matrix size [2]"),
    "number format": (lambda t: t.replace("!number format := float", "!number format := ascii"), "number format"),
    "bad voxel": (
        lambda t: t.replace("scaling factor (mm/pixel) [1] := 2.25", "scaling factor (mm/pixel) [1] := -1"),
        "scaling factor (mm/pixel) [1]",
    ),
    "frames": (
        lambda t: t.replace("number of time frames := 1", "number of time frames := 3"),
        "number of time frames",
    ),
    "scale list": (
        lambda t: t.replace("number of time frames", "image scaling factor[1] := {1,2}\nnumber of time frames"),
        "image scaling factor",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_headers(tmp_path, case):
    make, key = BAD[case]
    hv = write_raw(tmp_path, np.zeros(INFO.shape), "<f4")
    hv.write_text(make(hv.read_text()))
    before = snapshot(tmp_path)
    with pytest.raises(FormatError) as e:
        read_image(hv)
    assert "r.hv" in str(e.value) and key.lower() in str(e.value).lower(), str(e.value)
    assert snapshot(tmp_path) == before


def test_missing_and_truncated_data(tmp_path):
    hv = write_raw(tmp_path, np.zeros(INFO.shape), "<f4")
    with open(tmp_path / "r.v", "r+b") as f:
        f.truncate(100)
    with pytest.raises(FormatError, match=rf"r\.v.*truncated.*100 bytes.*{4 * 5 * 7 * 6}"):
        read_image(hv)
    (tmp_path / "r.v").unlink()
    with pytest.raises(FormatError, match=r"r\.v.*does not exist"):
        read_image(hv)


def test_garbage_file(tmp_path):
    (tmp_path / "g.hv").write_text("just some text\n")
    with pytest.raises(FormatError, match=r"g\.hv.*not an Interfile"):
        read_image(tmp_path / "g.hv")


def test_write_refuses_existing_unless_overwrite(tmp_path):
    write_image(tmp_path / "a.hv", random_image(seed=1))
    before = snapshot(tmp_path)
    with pytest.raises(FormatError, match="already exists"):
        write_image(tmp_path / "a.hv", random_image(seed=2))
    assert snapshot(tmp_path) == before
    write_image(tmp_path / "a.hv", random_image(seed=2), overwrite=True)
    np.testing.assert_array_equal(read_image(tmp_path / "a.hv").as_array(), random_image(seed=2).as_array())


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    """If writing the header fails, neither file appears (and no temporaries remain)."""

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(image_mod, "format_image_header", boom)
    with pytest.raises(OSError):
        write_image(tmp_path / "f.hv", random_image())
    assert list(tmp_path.iterdir()) == []


def test_write_float64(tmp_path):
    img = random_image()
    write_image(tmp_path / "d.hv", img, dtype=">f8")
    assert (tmp_path / "d.v").stat().st_size == 8 * 5 * 7 * 6
    np.testing.assert_array_equal(read_image(tmp_path / "d.hv").as_array(), img.as_array())


def test_longer_data_file_is_refused(tmp_path):
    """An image data file longer than its header describes is refused, naming both sizes
    (STIR reads the first bytes silently; a wrong size in the header would give garbage)."""
    write_image(tmp_path / "l.hv", random_image())
    need = 4 * 5 * 7 * 6
    with open(tmp_path / "l.v", "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(
        FormatError,
        match=rf"l\.v.*larger than its header describes.*{need + 8} bytes.*"
        rf"l\.hv describes {need}",
    ):
        read_image(tmp_path / "l.hv")


@pytest.mark.parametrize(
    "name, header, data",
    [("o", "o.hv", "o.v"), ("o.hv", "o.hv", "o.v"), ("o.v", "o.hv", "o.v"), ("o.img", "o.hv", "o.img")],
)
def test_write_names_files_as_stir(tmp_path, name, header, data):
    """STIR's names (write_basic_interfile): .hv name -> .v beside it, no extension -> both,
    another extension -> that is the data file and the header gets .hv; the header is returned."""
    img = random_image()
    assert write_image(tmp_path / name, img) == tmp_path / header
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({header, data})
    np.testing.assert_array_equal(read_image(tmp_path / header).as_array(), img.as_array())


@pytest.mark.parametrize("name", ["o.hs", "o.s"])
def test_write_refuses_projection_data_names(tmp_path, name):
    """A projection-data extension for an image output is refused (STIR would write the
    image's values into o.s or o.hs), and nothing is written."""
    with pytest.raises(FormatError, match=r"other kind.*images are written as \.hv \+ \.v"):
        write_image(tmp_path / name, random_image())
    assert list(tmp_path.iterdir()) == []


def test_write_a_numpy_array_with_its_geometry(tmp_path):
    """``write_image(path, array, info)`` writes what ``write_image(path, VoxelsOnCartesianGrid(info,
    array))`` writes, byte for byte (float64 input rounded to float32 the same way); the array
    is not modified; an existing output is refused as for an image unless ``overwrite=True``."""
    values = np.random.default_rng(3).standard_normal(INFO.shape)
    kept = values.copy()
    write_image(tmp_path / "a.hv", values, INFO)
    write_image(tmp_path / "b.hv", VoxelsOnCartesianGrid(INFO, values))
    assert (tmp_path / "a.v").read_bytes() == (tmp_path / "b.v").read_bytes()
    back = read_image(tmp_path / "a.hv")
    assert back.info == INFO and np.array_equal(values, kept)
    np.testing.assert_array_equal(back.as_array(), values.astype(np.float32))
    before = snapshot(tmp_path)
    with pytest.raises(FormatError, match="already exists"):
        write_image(tmp_path / "a.hv", values + 1, INFO)
    assert snapshot(tmp_path) == before
    write_image(tmp_path / "a.hv", values + 1, INFO, overwrite=True)
    np.testing.assert_array_equal(read_image(tmp_path / "a.hv").as_array(), (values + 1).astype(np.float32))


@pytest.mark.parametrize(
    "image, info, message",
    [
        (np.zeros(INFO.shape), None, r"a numpy array carries no geometry; give its ImageInfo"),
        (np.zeros((5, 6, 7)), INFO, r"the array's shape \(5, 6, 7\) differs from info's \(z, y, x\) \(5, 7, 6\)"),
        (np.zeros(INFO.shape, dtype=complex), INFO, r"the array holds complex128 values; images hold real numbers"),
        ([[[0.0]]], INFO, r"expected a VoxelsOnCartesianGrid or a numpy \(z, y, x\) array, not list"),
        (np.zeros(INFO.shape), (5, 7, 6), r"info must be an ImageInfo, not tuple"),
        (
            random_image(),
            INFO.replace(origin=(0.0, 0.0, 0.0)),
            r"info ImageInfo\(.*\) differs from the image's own geometry",
        ),
    ],
    ids=["no geometry", "wrong shape", "complex", "a list", "info not an ImageInfo", "two geometries"],
)
def test_write_refuses_an_array_it_cannot_place_in_one_line(tmp_path, image, info, message):
    """What write_image cannot write is refused in one line naming the output and what to give,
    before any file is touched."""
    with pytest.raises(GeometryError, match=r"^write_image\('.*x\.hv'\): " + message) as caught:
        write_image(tmp_path / "x.hv", image, info)
    assert "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []
