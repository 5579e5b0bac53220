"""SIRF's image data processors against STIR's own (the reference STIR's Python module):
``TruncateToCylinderProcessor`` is ``TruncateToCylindricalFOVImageProcessor``,
``SeparableGaussianImageFilter`` is ``SeparableGaussianImageFilter``, both set through the same
calls SIRF's C++ makes (``set_strictly_less_than_radius``; ``set_fwhms``, ``set_max_kernel_sizes``,
``set_normalise``), on seeded random images of random sizes, voxel sizes and index ranges.

Bound: bit for bit.  Truncation only assigns 0; the Gaussian filter is stirgpu's, which equals
STIR's bit for bit (tests/stir_differential/test_filters_vs_stir.py).  Also SIRF's processor
protocol (``apply`` in place; ``set_input`` / ``process`` / ``get_output`` on a copy)."""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet

_F = np.float32


def _pair(stir, rng, shape, voxel, odd_offsets=False):
    """A SIRF image and a STIR image holding the same random values (some NaN, which STIR's
    truncation replaces with 0 outside the cylinder)."""
    nz, ny, nx = shape
    lo = (0, -(ny // 2), -(nx // 2))
    if odd_offsets:  # index ranges not centred as STIR's default: the cylinder follows them
        lo = (0, int(rng.integers(-ny, 1)), int(rng.integers(-nx, 1)))
    hi = (nz - 1, lo[1] + ny - 1, lo[2] + nx - 1)
    x = rng.random(shape, dtype=_F)
    x[rng.random(shape) < 0.02] = np.nan
    img = stir.FloatVoxelsOnCartesianGrid(
        stir.ExamInfo(),
        stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi)),
        stir.FloatCartesianCoordinate3D(0, 0, 0),
        stir.FloatCartesianCoordinate3D(*voxel),
    )
    img.fill(x.ravel())
    from stirgpu.geometry import ImageInfo

    mine = pet.ImageData.from_array(x.copy(), ImageInfo(shape, voxel, (0, 0, 0), lo))
    return mine, img


@pytest.mark.stir
@pytest.mark.parametrize("strictly", [True, False])
def test_truncate_to_cylinder_is_stirs(stir, strictly):
    """Square and non-square images, even and odd sizes, centred and shifted index ranges:
    STIR's zeros (``(x - xm)^2 + (y - ym)^2`` against the x range's radius, ``>=`` or ``>``)."""
    rng = np.random.default_rng(7 + strictly)
    for k in range(12):
        shape = tuple(int(v) for v in rng.integers(1, 30, 3))
        voxel = tuple(float(_F(v)) for v in rng.uniform(0.5, 4, 3))
        mine, theirs = _pair(stir, rng, shape, voxel, odd_offsets=k % 3 == 2)
        proc = stir.TruncateToCylindricalFOVImageProcessor3DFloat()
        proc.set_strictly_less_than_radius(strictly)
        proc.apply(theirs)
        sirf = pet.TruncateToCylinderProcessor()
        sirf.set_strictly_less_than_radius(strictly)
        sirf.apply(mine)
        assert np.array_equal(mine.as_array(), theirs.as_array(), equal_nan=True), (shape, k)


@pytest.mark.stir
def test_gaussian_filter_is_stirs(stir):
    """Random FWHMs (z, y, x; some 0), maximum kernel sizes and normalisation: STIR's filter."""
    rng = np.random.default_rng(11)
    for _ in range(6):
        shape = tuple(int(v) for v in rng.integers(2, 24, 3))
        voxel = tuple(float(_F(v)) for v in rng.uniform(0.8, 4, 3))
        fwhm = tuple(float(_F(v)) if rng.random() < 0.85 else 0.0 for v in rng.uniform(0.5, 12, 3))
        sizes = tuple(int(rng.choice([-1, -1, 3, 7])) for _ in range(3))
        normalise = bool(rng.random() < 0.7)
        mine, theirs = _pair(stir, rng, shape, voxel)
        mine.fill(np.nan_to_num(mine.as_array()))
        theirs.fill(mine.as_array().ravel())
        f = stir.SeparableGaussianImageFilter3DFloat()
        f.set_fwhms(stir.FloatCartesianCoordinate3D(*fwhm))
        f.set_max_kernel_sizes(stir.IntCartesianCoordinate3D(*sizes))
        f.set_normalise(normalise)
        f.apply(theirs)
        sirf = pet.SeparableGaussianImageFilter()
        sirf.set_fwhms(fwhm)
        sirf.set_max_kernel_sizes(sizes)
        sirf.set_normalise(normalise)
        sirf.apply(mine)
        assert np.array_equal(mine.as_array(), theirs.as_array()), (shape, voxel, fwhm, sizes, normalise)


def _ones(shape=(2, 7, 7)):
    image = pet.ImageData()
    image.initialise(shape, (2.0, 2.0, 2.0))
    image.fill(1.0)
    return image


def test_truncation_keeps_the_inscribed_disc():
    """7 x 7: radius 3 around the centre; strictly inside by default (the 5 x 5 square: 25
    voxels), at the radius too without (and the 4 voxels at distance 3: 29)."""
    image = _ones()
    pet.TruncateToCylinderProcessor().apply(image)
    plane = image.as_array()[0]
    assert plane[3, 3] == 1 and plane[0, 3] == 0 and plane[1, 1] == 1 and plane[0, 0] == 0
    assert plane.sum() == 25
    proc = pet.TruncateToCylinderProcessor()
    assert proc.get_strictly_less_than_radius() is True
    proc.set_strictly_less_than_radius(False)
    assert proc.get_strictly_less_than_radius() is False
    image = _ones()
    proc.apply(image)
    assert image.as_array()[0, 0, 3] == 1 and image.as_array()[0].sum() == 29


def test_process_works_on_a_copy_and_keeps_it():
    """SIRF's protocol: ``process`` leaves the input alone, returns the result and keeps it for
    ``get_output``; ``process(image)`` sets the input; ``apply`` changes its argument."""
    proc = pet.TruncateToCylinderProcessor()
    assert proc.get_output() is None
    image = _ones()
    proc.set_input(image)
    out = proc.process()
    assert out is proc.get_output() and out is not image
    assert image.as_array().sum() == 2 * 49 and out.as_array().sum() == 2 * 25
    other = _ones((1, 5, 5))
    assert proc.process(other).dimensions() == (1, 5, 5)
    assert proc.input is other


def test_gaussian_kernels_are_built_once_as_in_stir():
    """STIR sets a processor up once (at ``set_up`` or the first ``apply``): FWHMs set afterwards
    do not change what it does."""
    f = pet.SeparableGaussianImageFilter()
    f.set_fwhms((0.0, 4.0, 4.0))
    a = _ones((1, 9, 9))
    f.apply(a)
    f.set_fwhms((0.0, 8.0, 8.0))
    b = _ones((1, 9, 9))
    f.apply(b)
    assert np.array_equal(a.as_array(), b.as_array())
    g = pet.SeparableGaussianImageFilter()
    g.set_fwhms((0.0, 8.0, 8.0))
    c = _ones((1, 9, 9))
    g.apply(c)
    assert not np.array_equal(a.as_array(), c.as_array())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pet.TruncateToCylinderProcessor().process(), "input image not set"),
        (lambda: pet.TruncateToCylinderProcessor().apply(np.ones((2, 3, 3))), "apply: expected ImageData"),
        (lambda: pet.TruncateToCylinderProcessor().apply(pet.ImageData()), "empty object"),
        (lambda: pet.TruncateToCylinderProcessor().set_strictly_less_than_radius("yes"), "expected True or False"),
        (lambda: pet.SeparableGaussianImageFilter().set_fwhms((1.0, 2.0)), "set_fwhms: expected 3 numbers"),
        (lambda: pet.SeparableGaussianImageFilter().set_max_kernel_sizes((1.5, 3, 3)), "set_max_kernel_sizes"),
    ],
)
def test_bad_arguments_are_one_line_errors(call, match):
    with pytest.raises(pet.error, match=match) as info:
        call()
    assert "\n" not in str(info.value)
