"""Interfile images (``.hv`` + ``.v``) both ways between stirgpu and a real STIR 6.5.

Identities checked, case by case (``cases.py``: zooms, odd and even sizes, x/y/z origin offsets):
STIR reads what stirgpu writes with the same geometry (lengths, index ranges, voxel sizes,
origin) and values, and stirgpu reads what STIR writes with the geometry of its own
``ImageInfo.default_for`` and the same values.  Values are float32 and compared exactly (a file
is a copy); voxel sizes to 1e-5 relative and origins to 1e-3 mm, because STIR writes 6
significant digits (an origin of -147.078 mm is 1e-4 mm off its float32 value).
"""

from __future__ import annotations

import numpy as np
import pytest
from cases import (
    every_scanner_cases,
    large_cases,
    large_marks,
    params,
    quick_cases,
    stir_image,
    stir_proj_data_info,
    stirgpu_image_info,
    stirgpu_proj_data_info,
)

from stirgpu.formats import VoxelsOnCartesianGrid, read_image, write_image
from stirgpu.geometry import ImageInfo

pytestmark = pytest.mark.stir

IMAGE_CASES = params(quick_cases()) + params(every_scanner_cases()) + params(large_cases(), marks=large_marks())


def _stir_geometry(image):
    lengths, mins = image.get_lengths(), image.get_min_indices()
    vox, org = image.get_voxel_size(), image.get_origin()
    return (
        (lengths[1], lengths[2], lengths[3]),
        (mins[1], mins[2], mins[3]),
        (vox.z(), vox.y(), vox.x()),
        (org.z(), org.y(), org.x()),
    )


def _assert_same_geometry(info: ImageInfo, stir_img) -> None:
    shape, mins, vox, org = _stir_geometry(stir_img)
    assert info.shape == shape and info.min_indices == mins, (info, shape, mins)
    np.testing.assert_allclose(info.voxel_size, vox, rtol=1e-5)
    np.testing.assert_allclose(info.origin, org, rtol=0, atol=1e-3)


def _values(case, shape) -> np.ndarray:
    return case.rng(3).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("case", IMAGE_CASES)
def test_stir_reads_what_stirgpu_writes(stir, case, tmp_path):
    """stirgpu writes the case's image; STIR's ``read_from_file`` gives the same geometry and the
    same values.  Guards against a ``first pixel offset`` or axis order STIR reads differently
    (offsets, odd/even sizes, zoomed voxels)."""
    info = stirgpu_image_info(case, stirgpu_proj_data_info(case))
    img = VoxelsOnCartesianGrid.from_array(_values(case, info.shape), info)
    write_image(tmp_path / "ours.hv", img)
    theirs = stir.FloatVoxelsOnCartesianGrid.read_from_file(str(tmp_path / "ours.hv"))
    _assert_same_geometry(info, theirs)
    np.testing.assert_array_equal(np.asarray(theirs.as_array(), dtype=np.float32), img.as_array())


@pytest.mark.parametrize("case", IMAGE_CASES)
def test_stirgpu_reads_what_stir_writes(stir, case, tmp_path):
    """STIR writes its image of the case (``VoxelsOnCartesianGrid(pdi, zoom, origin, sizes)``
    filled with seeded values); stirgpu reads STIR's geometry and values.  Guards against
    misreading STIR's headers (first pixel offset to origin, index ranges, x/y/z order)."""
    theirs = stir_image(stir, case, stir_proj_data_info(stir, case))
    shape = _stir_geometry(theirs)[0]
    data = _values(case, shape)
    theirs.fill(data.flat)
    theirs.write_to_file(str(tmp_path / "theirs.hv"))
    ours = read_image(tmp_path / "theirs.hv")
    _assert_same_geometry(ours.info, theirs)
    np.testing.assert_array_equal(ours.as_array(), data)


@pytest.mark.parametrize(
    "shape, origin", [((5, 8, 6), (1.5, -2.25, 3.0)), ((3, 7, 9), (0.0, 4.0, -6.5)), ((1, 4, 5), (-10.0, 0.0, 0.0))]
)
def test_non_square_images_both_ways(stir, tmp_path, shape, origin):
    """Images with x and y sizes of different parity and size (STIR's default image can be
    non-square, see ``test_geometry_vs_stir``), voxel sizes differing on every axis: STIR reads
    stirgpu's and stirgpu reads STIR's with the same geometry and values."""
    info = ImageInfo(shape, (2.5, 1.75, 2.0), origin)
    data = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    write_image(tmp_path / "ours.hv", VoxelsOnCartesianGrid.from_array(data, info))
    theirs = stir.FloatVoxelsOnCartesianGrid.read_from_file(str(tmp_path / "ours.hv"))
    _assert_same_geometry(info, theirs)
    np.testing.assert_array_equal(np.asarray(theirs.as_array(), dtype=np.float32), data)
    theirs.write_to_file(str(tmp_path / "theirs.hv"))
    back = read_image(tmp_path / "theirs.hv")
    assert back.info == info
    np.testing.assert_array_equal(back.as_array(), data)


def test_first_pixel_offset_without_z_entry_like_stir(stir, tmp_path):
    """A header with x and y first pixel offsets but no z entry: STIR ignores them (origin 0);
    so does stirgpu, which read the x and y entries."""
    info = ImageInfo((4, 6, 5), (2.0, 1.5, 1.5), (3.0, -2.0, 4.0))
    write_image(tmp_path / "a.hv", VoxelsOnCartesianGrid(info, 1.0))
    text = (tmp_path / "a.hv").read_text()
    (tmp_path / "a.hv").write_text(
        "\n".join(line for line in text.splitlines() if not line.startswith("first pixel offset (mm) [3]")) + "\n"
    )
    theirs = stir.FloatVoxelsOnCartesianGrid.read_from_file(str(tmp_path / "a.hv"))
    ours = read_image(tmp_path / "a.hv").info
    _assert_same_geometry(ours, theirs)
    assert ours.origin == (0.0, 0.0, 0.0)
