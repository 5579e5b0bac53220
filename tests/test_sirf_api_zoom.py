"""``ImageData.zoom_image`` / ``zoom_image_as_template`` against STIR's own ``zoom_image`` (the
reference STIR's Python module: what SIRF's C++ calls), on seeded random images, zooms, offsets,
sizes and all three scaling options.

Bounds: values within 2e-6 of STIR's maximum (measured: at most 8e-7): STIR sums the overlaps
incrementally in float32, here one float64 overlap matrix per axis is applied.  Voxel sizes and
origins within 1e-6 relative (a float32 ulp: STIR is built with fast-math division).  Shapes and
index ranges equal."""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.geometry import ImageInfo

_F = np.float32
OPTIONS = ["preserve_sum", "preserve_values", "preserve_projections"]


def _stir_image(stir, info: ImageInfo, x=None):
    lo, hi = info.get_min_indices(), info.get_max_indices()
    img = stir.FloatVoxelsOnCartesianGrid(
        stir.ExamInfo(),
        stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi)),
        stir.FloatCartesianCoordinate3D(*info.origin),
        stir.FloatCartesianCoordinate3D(*info.voxel_size),
    )
    if x is not None:
        img.fill(x.ravel())
    return img


def _f32(rng, lo, hi, k):
    return tuple(float(_F(v)) for v in rng.uniform(lo, hi, k))


def _same_grid(mine: ImageInfo, theirs):
    o, v = theirs.get_origin(), theirs.get_voxel_size()
    assert mine.shape == tuple(theirs.as_array().shape)
    assert mine.min_indices == (theirs.get_min_z(), theirs.get_min_y(), theirs.get_min_x())
    np.testing.assert_allclose(mine.voxel_size, (v.z(), v.y(), v.x()), rtol=1e-6)
    np.testing.assert_allclose(mine.origin, (o.z(), o.y(), o.x()), rtol=1e-6, atol=1e-5)


def _close(mine: np.ndarray, theirs: np.ndarray):
    scale = max(float(np.abs(theirs).max()), 1e-30)
    assert float(np.abs(mine - theirs).max()) <= 2e-6 * scale


@pytest.mark.stir
def test_zoom_image_is_stirs(stir):
    rng = np.random.default_rng(0)
    for k in range(12):
        info = ImageInfo(tuple(int(v) for v in rng.integers(2, 20, 3)), _f32(rng, 0.7, 4, 3), _f32(rng, -10, 10, 3))
        x = rng.random(info.shape, dtype=_F)
        zooms, offsets = _f32(rng, 0.3, 3, 3), _f32(rng, -5, 5, 3)
        size = tuple(int(v) for v in rng.integers(1, 25, 3))
        option = OPTIONS[k % 3]
        theirs = stir.zoom_image(
            _stir_image(stir, info, x),
            stir.FloatCartesianCoordinate3D(*zooms),
            stir.FloatCartesianCoordinate3D(*offsets),
            stir.Int3BasicCoordinate(size),
            stir.ZoomOptions(getattr(stir.ZoomOptions, option)),
        )
        mine = pet.ImageData.from_array(x.copy(), info).zoom_image(zooms, offsets, size, option)
        _same_grid(mine.image_info, theirs)
        _close(mine.as_array(), theirs.as_array())


@pytest.mark.stir
def test_zoom_image_as_template_is_stirs(stir):
    """Onto another grid (sizes, voxel sizes, origins, index ranges all different)."""
    rng = np.random.default_rng(5)
    for k in range(6):
        info = ImageInfo(tuple(int(v) for v in rng.integers(2, 16, 3)), _f32(rng, 0.7, 4, 3), _f32(rng, -6, 6, 3))
        target = ImageInfo(tuple(int(v) for v in rng.integers(2, 16, 3)), _f32(rng, 0.7, 4, 3), _f32(rng, -6, 6, 3))
        x = rng.random(info.shape, dtype=_F)
        out = _stir_image(stir, target)
        option = OPTIONS[k % 3]
        stir.zoom_image(out, _stir_image(stir, info, x), stir.ZoomOptions(getattr(stir.ZoomOptions, option)))
        template = pet.ImageData.from_array(np.zeros(target.shape, _F), target)
        mine = pet.ImageData.from_array(x.copy(), info).zoom_image_as_template(template, option)
        assert mine.image_info == target
        _close(mine.as_array(), out.as_array())


def test_sirf_tests_one_zoom_keeps_the_size_asked_for():
    """SIRF's ``tests_one.py``: ``zoom_image(size=(3, 2, 5))`` has those dimensions; -1 keeps a size."""
    image = pet.ImageData()
    image.initialise((4, 6, 7), (2.0, 2.0, 2.0))
    image.fill(1.0)
    assert image.zoom_image(size=(3, 2, 5)).dimensions() == (3, 2, 5)
    assert image.zoom_image(size=(-1, 3, -1)).dimensions() == (4, 3, 7)


def test_identity_zoom_and_sum_preservation():
    """Zoom 1, no offset, same sizes: the image itself.  Zoom 0.5 in x with an even size and
    'preserve_sum': the total is kept (every input box lies inside the output)."""
    rng = np.random.default_rng(2)
    x = rng.random((3, 4, 8), dtype=_F)
    image = pet.ImageData.from_array(x.copy(), ImageInfo((3, 4, 8), (1.0, 1.0, 1.0)))
    np.testing.assert_array_equal(image.zoom_image().as_array(), x)
    half = image.zoom_image(zooms=(1.0, 1.0, 0.5), size=(-1, -1, 4))
    assert half.voxel_sizes()[2] == 2
    np.testing.assert_allclose(half.as_array().sum(), x.sum(), rtol=1e-6)
    np.testing.assert_allclose(half.as_array()[:, :, 1], x[:, :, 2] + x[:, :, 3], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"zooms": [1, 1, 1]}, "zooms should be a tuple of 3"),
        ({"size": (1, 2)}, "size should be a tuple of 3"),
        ({"zooms": (1.0, 0.0, 1.0)}, "zooms must be positive"),
        ({"scaling": "preserve_counts"}, "unknown scaling option 'preserve_counts'"),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, match):
    image = pet.ImageData()
    image.initialise((2, 3, 3))
    with pytest.raises(pet.error, match=match) as info:
        image.zoom_image(**kwargs)
    assert "\n" not in str(info.value)
