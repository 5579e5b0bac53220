"""``EllipticCylinder`` and ``ImageData.add_shape`` against STIR's own ``EllipsoidalCylinder`` and
``Shape3D::construct_volume`` (the reference STIR's Python module: what SIRF's ``cSTIR_addShape``
calls), and SIRF's setter conventions.

Bound: equal bit for bit.  Both test the voxel centres and STIR's float32 sub-sample offsets
with the same float32 arithmetic; any difference means a sample placed or tested differently.
The in-place order of STIR's refinement pass (a voxel sees its earlier neighbours' refined
values) changes a few voxels in some draws; the draws below include such cases, and the test
checks that they do.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.geometry import ImageInfo
from stirgpu.sirf import shapes

_F = np.float32


def _stir_volume(stir, info: ImageInfo, length, rx, ry, centre, n) -> np.ndarray:
    lo, hi = info.get_min_indices(), info.get_max_indices()
    rng3 = stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi))
    img = stir.FloatVoxelsOnCartesianGrid(
        stir.ExamInfo(),
        rng3,
        stir.FloatCartesianCoordinate3D(*info.origin),
        stir.FloatCartesianCoordinate3D(*info.voxel_size),
    )
    cyl = stir.EllipsoidalCylinder()
    cyl.set_length(length)
    cyl.set_radius_x(rx)
    cyl.set_radius_y(ry)
    cyl.set_origin(stir.FloatCartesianCoordinate3D(*centre))
    cyl.construct_volume(img, stir.IntCartesianCoordinate3D(n, n, n))
    return img.as_array()


def _draw(rng):
    def f(lo, hi, k=None):
        if k is None:
            return float(_F(rng.uniform(lo, hi)))
        return tuple(float(_F(v)) for v in rng.uniform(lo, hi, k))

    info = ImageInfo(tuple(int(v) for v in rng.integers(3, 20, 3)), f(0.7, 4, 3), f(-8, 8, 3))
    return info, f(2, 40), f(1, 20), f(1, 20), f(-6, 6, 3), int(rng.choice([1, 2, 3, 4]))


def _without_order(cyl, info, n) -> np.ndarray:
    """The refinement done all at once from the first pass's values (not STIR's order)."""
    v = shapes._first_pass(cyl, info)
    padded, (nz, ny, nx) = np.pad(v, 1), v.shape
    differs = np.zeros(v.shape, bool)
    for dz, dy, dx in shapes._NEIGHBOURS:
        differs |= padded[1 + dz : 1 + dz + nz, 1 + dy : 1 + dy + ny, 1 + dx : 1 + dx + nx] != v
    idx = np.argwhere(differs)
    v[tuple(idx.T)] = shapes._voxel_weights(cyl, info, idx, n)
    return v


@pytest.mark.stir
def test_add_shape_is_stirs_construct_volume_bit_for_bit(stir):
    """60 random images (sizes, voxel sizes, origins), cylinders and sample counts 1..4: SIRF's
    ``add_shape(shape, scale=1)`` on a zero image equals STIR's ``construct_volume``; at least one
    draw depends on STIR's in-place order (so the order is really tested)."""
    rng = np.random.default_rng(1)
    order_matters = 0
    for _ in range(60):
        info, length, rx, ry, centre, n = _draw(rng)
        theirs = _stir_volume(stir, info, length, rx, ry, centre, n)
        image = pet.ImageData()
        image.initialise(info.shape, info.voxel_size, info.origin)
        cyl = pet.EllipticCylinder()
        cyl.set_length(length)
        cyl.set_radii((ry, rx))
        cyl.set_origin(centre)
        image.add_shape(cyl, scale=1, num_samples_in_each_direction=n)
        assert np.array_equal(image.as_array(), theirs), (info, length, rx, ry, centre, n)
        order_matters += int(n > 1 and not np.array_equal(_without_order(cyl, info, n), theirs))
    assert order_matters > 0


@pytest.mark.stir
def test_sirf_example_phantom_is_stirs(stir):
    """SIRF's ``acquisition_model.py`` / ``input_output.py`` phantom (three cylinders, scales 1,
    1.5, 0.75, on an image of SIRF's example data's size) equals STIR's volumes scaled and summed
    in float32, as ``cSTIR_addShape`` does."""
    info = ImageInfo((31, 111, 111), (3.375, 2.08626, 2.08626))
    image = pet.ImageData()
    image.initialise(info.shape, info.voxel_size)
    expected = np.zeros(info.shape, _F)
    shape = pet.EllipticCylinder()
    shape.set_length(400)
    for radii, origin, scale in (
        ((40, 100), (10, 60, 0), 1),
        ((30, 30), (10, -30, 60), 1.5),
        ((30, 30), (10, -30, -60), 0.75),
    ):
        shape.set_radii(radii)
        shape.set_origin(origin)
        image.add_shape(shape, scale=scale)
        expected += _stir_volume(stir, info, 400, radii[1], radii[0], origin, 1) * _F(scale)
    assert np.array_equal(image.as_array(), expected)
    assert expected.max() == _F(1.5) and (expected == _F(0.75)).any()


def test_sirf_conventions_of_the_setters():
    """SIRF's ``STIR.py``: ``set_origin((z, y, x))`` but ``get_origin()`` is (x, y, z);
    ``set_radii((ry, rx))`` but ``get_radii()`` is (rx, ry); values are float32 (SIRF's handles)."""
    cyl = pet.EllipticCylinder()
    assert cyl.get_length() == 0 and cyl.get_radii() == (0, 0) and cyl.get_origin() == (0, 0, 0)
    cyl.set_origin((10, 60, 0))
    assert cyl.get_origin() == (0, 60, 10)
    cyl.set_radii((40, 100))
    assert cyl.get_radii() == (100, 40) and cyl.get_radius_x() == 100 and cyl.get_radius_y() == 40
    cyl.set_radius_x(0.1)
    assert cyl.get_radius_x() == _F(0.1) and isinstance(cyl.get_radius_x(), np.float32)
    cyl.set_length(12.5)
    assert cyl.get_length() == _F(12.5)
    assert isinstance(cyl, pet.Shape)


def test_shape_with_unset_sizes_adds_nothing():
    """STIR's default cylinder (radii and length 0) contains no point: the image is unchanged."""
    image = pet.ImageData()
    image.initialise((3, 4, 5))
    image.fill(2.0)
    image.add_shape(pet.EllipticCylinder(), scale=7, num_samples_in_each_direction=2)
    assert np.array_equal(image.as_array(), np.full((3, 4, 5), 2, _F))


def test_add_shape_adds_to_the_image():
    """``add_shape`` adds ``scale`` times the volume to what is there (it does not overwrite)."""
    image = pet.ImageData()
    image.initialise((3, 9, 9), (2.0, 2.0, 2.0))
    image.fill(1.0)
    cyl = pet.EllipticCylinder()
    cyl.set_length(100)
    cyl.set_radii((3, 3))
    image.add_shape(cyl, scale=2)
    a = image.as_array()
    assert a[1, 4, 4] == 3 and a[1, 0, 0] == 1 and set(np.unique(a)) == {1, 3}


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda im: im.add_shape("cylinder", 1), "shape must be a Shape"),
        (lambda im: im.add_shape(pet.EllipticCylinder(), 1, 0), "num_samples_in_each_direction"),
        (lambda im: im.add_shape(pet.EllipticCylinder(), "2"), "add_shape: scale: expected a number"),
        (lambda im: pet.EllipticCylinder().set_radii((1, 2, 3)), "set_radii: expected 2 numbers"),
        (lambda im: pet.EllipticCylinder().set_origin(5), "set_origin: expected 3 numbers"),
        (lambda im: pet.EllipticCylinder().set_length("10"), "set_length: expected a number"),
    ],
)
def test_bad_arguments_are_one_line_errors(call, match):
    image = pet.ImageData()
    image.initialise((2, 3, 3))
    with pytest.raises(pet.error, match=match) as info:
        call(image)
    assert "\n" not in str(info.value)
    assert np.array_equal(image.as_array(), np.zeros((2, 3, 3), _F))
