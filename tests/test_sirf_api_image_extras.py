"""SIRF's smaller image calls: ``move_to_scanner_centre`` (SIRF's C++ sets STIR's origin to 0
and keeps everything else), ``GeometricalInfo.print_info`` (prints ``get_info``) and
``sirf.SIRF.copyto`` (numpy's ``copyto`` for arrays, as ``tests_view.py`` uses it)."""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.recon.simulate import demo_geometry


def _image():
    image = pet.ImageData()
    image.initialise((3, 4, 5), (2.0, 1.5, 1.0), (7.0, -3.0, 2.5))
    image.fill(np.arange(60, dtype=np.float32).reshape(3, 4, 5))
    return image


def _acquisition_data():
    pdi, _ = demo_geometry(num_views=6, num_tangential_poss=10)
    return pet.AcquisitionData(ProjDataInMemory(pdi))


def test_move_to_scanner_centre_zeroes_the_origin_of_a_copy():
    image = _image()
    moved = image.move_to_scanner_centre(_acquisition_data())
    assert moved is not image and moved.image_info.origin == (0.0, 0.0, 0.0)
    assert image.image_info.origin == (7.0, -3.0, 2.5)  # the original is unchanged
    assert moved.image_info.voxel_size == image.image_info.voxel_size
    assert moved.image_info.min_indices == image.image_info.min_indices
    np.testing.assert_array_equal(moved.as_array(), image.as_array())
    moved.fill(0.0)
    assert image.as_array().sum() == sum(range(60))  # no shared storage
    # LPS offset now follows from the zero origin alone (x, y, -z of the first voxel)
    assert moved.get_geometrical_info().get_offset() == (-2.0, -3.0, 0.0)


def test_move_to_scanner_centre_wants_acquisition_data():
    with pytest.raises(pet.error, match="proj_data should be of type AcquisitionData, not ImageData"):
        _image().move_to_scanner_centre(_image())


def test_print_info_prints_get_info(capsys):
    info = _image().get_geometrical_info()
    info.print_info()
    assert capsys.readouterr().out == info.get_info() + "\n"


def test_copyto_copies_arrays_and_containers():
    """Arrays: numpy's copyto (in place, broadcasting as numpy does); containers: the values."""
    y, x = np.zeros((2, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    assert pet.copyto(y, x) is None
    np.testing.assert_array_equal(y, x)
    a, b = _image(), _image().get_uniform_copy(2.0)
    pet.copyto(a, b)
    np.testing.assert_array_equal(a.as_array(), np.full((3, 4, 5), 2, np.float32))
    with pytest.raises(ValueError):
        pet.copyto(np.zeros(2), np.zeros(3))
