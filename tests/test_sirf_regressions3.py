"""stirgpu.sirf where SIRF's own PET scripts (``test_sirf_clients.py``) found it differing from
SIRF, written from SIRF's documented behaviour, numbers from the reference STIR.

* ``ImageData.transf_matrix()``: SIRF returns its geometrical info's index-to-physical-point
  matrix, a 4x4 float32 taking an (x, y, z) index to LPS mm (column i: direction of index axis i
  times its spacing; last column: the first voxel's LPS centre).  SIRF's ``acquisition_data.py``
  prints it for the data's default image.  Its LPS points are STIR's
  ``get_LPS_coordinates_for_indices`` for the same image, read by STIR from the file stirgpu wrote.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.interop import proj_data_info_from_stir

# (x, y, z) indices counted from the first voxel, as SIRF counts them
_INDICES = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (6, 5, 4)]


def _stir_lps(stir, stir_image, index) -> np.ndarray:
    """STIR's LPS point of the voxel ``index`` (x, y, z from the first voxel)."""
    low = stir_image.get_min_indices()
    i, j, k = index
    lps = stir_image.get_LPS_coordinates_for_indices(stir.Int3BasicCoordinate((k + low[1], j + low[2], i + low[3])))
    return np.array([lps[3], lps[2], lps[1]])  # STIR's coordinates are (z, y, x), 1-based


def _assert_maps_like_stir(stir, image: pet.ImageData, stir_image) -> None:
    m = image.transf_matrix()
    assert m.shape == (4, 4) and m.dtype == np.float32
    np.testing.assert_array_equal(m[3], [0, 0, 0, 1])
    for index in _INDICES:
        got = (m.astype(np.float64) @ np.array([*index, 1.0]))[:3]
        np.testing.assert_allclose(got, _stir_lps(stir, stir_image, index), rtol=1e-6, atol=1e-4)


@pytest.mark.stir
def test_transf_matrix_of_a_written_image_is_stirs_lps(stir, tmp_path):
    image = pet.ImageData()
    image.initialise((5, 6, 7), (2.0, 1.5, 2.5), (4.0, -3.0, 1.0))
    image.write(tmp_path / "image.hv")
    stir_image = stir.FloatVoxelsOnCartesianGrid.read_from_file(str(tmp_path / "image.hv"))
    _assert_maps_like_stir(stir, image, stir_image)
    # the columns' lengths are the spacings, SIRF's (x, y, z) order
    m = image.transf_matrix()
    np.testing.assert_allclose(np.linalg.norm(m[:3, :3], axis=0), image.voxel_sizes()[::-1])


@pytest.mark.stir
def test_transf_matrix_of_the_default_image_is_stirs_lps(stir):
    """``acquisition_data.py``'s case: the image ``create_uniform_image`` makes for the data."""
    scanner = stir.Scanner.get_scanner_from_name("ECAT 953")
    spdi = stir.ProjDataInfo.construct_proj_data_info(scanner, 3, 4, 12, 48, False)
    stir_image = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 1.0)
    with pet.storage_scheme("memory"):
        image = pet.AcquisitionData(ProjDataInMemory(proj_data_info_from_stir(spdi))).create_uniform_image(10.0)
    _assert_maps_like_stir(stir, image, stir_image)


def test_transf_matrix_is_a_copy():
    """Writing into the returned matrix leaves the image's geometry alone."""
    image = pet.ImageData()
    image.initialise((3, 4, 5), (2.0, 2.0, 2.0), (0.0, 1.0, 0.0))
    before = image.transf_matrix()
    image.transf_matrix()[:] = 0
    np.testing.assert_array_equal(image.transf_matrix(), before)
    assert image.voxel_sizes() == (2.0, 2.0, 2.0)


def test_transf_matrix_of_an_empty_image_is_refused():
    with pytest.raises(pet.error):
        pet.ImageData().transf_matrix()
