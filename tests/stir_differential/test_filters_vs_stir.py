"""stirgpu's filters against STIR 6.5's own ``SeparableCartesianMetzImageFilter`` and
``SeparableGaussianImageFilter`` (STIR's Python module), on seeded random images.

STIR parses the filter's parameter block from a file, exactly as a ``.par`` gives it, and
filters a ``FloatVoxelsOnCartesianGrid`` of the same values and voxel size.  Kernels are read
off STIR by filtering a unit impulse in an image that is one voxel wide in the other two
directions (where STIR's convolution adds only exact zeros, so the output is the kernel).

Bounds: the Gaussian filter is STIR's bit for bit (kernels and convolution).  The Metz filter
within 1e-5 of STIR's maximum (measured: at most 3.1e-6 over 150 random draws): STIR's kernels
come from its own float32 FFT, ours from numpy's float64 one of the same float32 samples.  Where
STIR samples the Gaussian finer than the voxels (FWHM up to about 4 voxels) its transform is
2^13 or longer and the kernels agree to about 2e-7 of their centre; where it takes one sample per
voxel (broader filters) the transform is short (2^6 here), each frequency weighs 1/64, and the
float32 step ``1 - (1 - z)^(P+1)`` turns STIR's FFT rounding into differences of up to about
5e-6 of the centre -- and the last coefficient above STIR's 1e-4 cut may then be kept by one
and not by the other.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.filters import SeparableCartesianMetzFilter, SeparableGaussianFilter, gaussian_kernel, metz_kernel
from stirgpu.filters.gaussian import fwhm_in_voxels

pytestmark = pytest.mark.stir

METZ_TOL = 1e-5
#: kernels, of the centre coefficient: with several fine samples per voxel, and with one
FINE_KERNEL_TOL, COARSE_KERNEL_TOL = 1e-6, 1e-5
_F = np.float32


def _image(stir, shape, voxel):
    nz, ny, nx = shape
    lo = (0, -(ny // 2), -(nx // 2))
    hi = (nz - 1, lo[1] + ny - 1, lo[2] + nx - 1)
    rng3 = stir.IndexRange3D(stir.Int3BasicCoordinate(lo), stir.Int3BasicCoordinate(hi))
    return stir.FloatVoxelsOnCartesianGrid(
        stir.ExamInfo(), rng3, stir.FloatCartesianCoordinate3D(0, 0, 0), stir.FloatCartesianCoordinate3D(*voxel)
    )


def _metz_block(fwhm, power, sizes) -> str:
    lines = ["Separable Cartesian Metz Filter Parameters :="]
    for i, d in ((2, "x"), (1, "y"), (0, "z")):
        lines += [
            f"{d}-dir filter FWHM (in mm) := {fwhm[i]!r}",
            f"{d}-dir filter Metz power := {power[i]!r}",
            f"{d}-dir maximum kernel size := {sizes[i]}",
        ]
    return "\n".join([*lines, "END Separable Cartesian Metz Filter Parameters :=", ""])


def _gaussian_block(fwhm, sizes, normalise) -> str:
    lines = ["Separable Gaussian Filter Parameters :="]
    for i, d in ((2, "x"), (1, "y"), (0, "z")):
        lines += [f"{d}-dir filter FWHM (in mm) := {fwhm[i]!r}", f"{d}-dir maximum kernel size := {sizes[i]}"]
    return "\n".join(
        [*lines, f"Normalise filter to 1 := {int(normalise)}", "END Separable Gaussian Filter Parameters :=", ""]
    )


def stir_filtered(stir, tmp_path, kind: str, block: str, array: np.ndarray, voxel) -> np.ndarray:
    """STIR's filter ``kind`` ("metz" or "gaussian") parsed from ``block``, applied to ``array``."""
    par = tmp_path / f"{kind}.par"
    par.write_text(block)
    f = (
        stir.SeparableCartesianMetzImageFilter3DFloat if kind == "metz" else stir.SeparableGaussianImageFilter3DFloat
    )()
    assert f.parse(str(par))
    img = _image(stir, array.shape, voxel)
    img.fill(np.ascontiguousarray(array, dtype=np.float32).ravel())
    f.apply(img)
    return img.as_array()


def _draw(rng):
    shape = tuple(int(v) for v in rng.integers(2, 36, 3))
    voxel = tuple(float(_F(v)) for v in rng.uniform(0.8, 4.5, 3))
    fwhm = tuple(float(_F(v)) if rng.random() < 0.85 else 0.0 for v in rng.uniform(0.3, 14, 3))
    sizes = tuple(int(rng.choice([-1, -1, 1, 2, 5, 8, 31])) for _ in range(3))
    return shape, voxel, fwhm, sizes


@pytest.mark.parametrize("seed", range(8))
def test_gaussian_filter_is_stirs_bit_for_bit(stir, tmp_path, seed):
    """Random sizes (2..35 voxels an axis), voxel sizes, FWHMs (some 0), maximum kernel sizes
    (-1, odd, even, 1: a lone centre coefficient) and ``Normalise filter to 1`` on and off:
    STIR's output bit for bit.  Guards the kernel (FWHM in voxels through STIR's fast-math
    division in z and y, truncation, float32 rounding, flush to zero, double-sum
    normalisation), the zero-boundary convolution and its summation order, and the z, y, x order."""
    rng = np.random.default_rng(seed)
    for _ in range(3):
        shape, voxel, fwhm, sizes = _draw(rng)
        normalise = bool(rng.random() < 0.6)
        x = rng.random(shape, dtype=np.float32) * _F(rng.uniform(0.1, 10))
        theirs = stir_filtered(stir, tmp_path, "gaussian", _gaussian_block(fwhm, sizes, normalise), x, voxel)
        f = SeparableGaussianFilter(fwhm=fwhm, max_kernel_size=sizes, normalise=normalise)
        mine = f.apply(x, voxel_size=voxel)
        assert np.array_equal(mine, theirs), (shape, voxel, fwhm, sizes, normalise)


@pytest.mark.parametrize("seed", range(8))
def test_metz_filter_matches_stir(stir, tmp_path, seed):
    """Random sizes, voxel sizes, FWHMs, Metz powers (0, fractional, up to 3.5) and maximum
    kernel sizes: within 1e-5 of STIR's maximum.  Guards the whole Metz construction (fine
    sampling, transform length, band limit, power, resampling, 1e-4 truncation, maximum kernel
    size) and STIR's symmetric-kernel convolution."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(3):
        shape, voxel, fwhm, sizes = _draw(rng)
        power = tuple(float(v) for v in rng.choice([0.0, 0.5, 1.0, 1.5, 2.0, 3.5], 3))
        x = rng.random(shape, dtype=np.float32) * _F(rng.uniform(0.1, 10))
        theirs = stir_filtered(stir, tmp_path, "metz", _metz_block(fwhm, power, sizes), x, voxel)
        mine = SeparableCartesianMetzFilter(fwhm=fwhm, metz_power=power, max_kernel_size=sizes).apply(
            x, voxel_size=voxel
        )
        err = np.abs(mine.astype(np.float64) - theirs).max() / np.abs(theirs).max()
        assert err <= METZ_TOL, (shape, voxel, fwhm, power, sizes, err)


def _impulse_response(stir, tmp_path, kind, block, n, voxel_z) -> np.ndarray:
    x = np.zeros((n, 1, 1), dtype=np.float32)
    x[n // 2] = 1
    return stir_filtered(stir, tmp_path, kind, block, x, (voxel_z, 1.0, 1.0))[:, 0, 0]


@pytest.mark.parametrize(
    "fwhm, power, voxel, size",
    [
        (8.0, 1.0, 2.5, -1),  # STIR's test-pack values
        (8.33, 2.0, 1.1493, -1),  # one fine sample per voxel, a 64-point transform: the coarse regime
        (5.0, 0.0, 2.0, -1),  # power 0: band-limited Gaussian, with the sinc's ripples kept to 1e-4
        (6.0, 2.0, 2.0, 31),  # cut to 31 // 2 = 15 coefficients a side
        (20.0, 1.0, 4.0, -1),  # one fine sample per voxel: no stretch, no band limit
        (2.0, 3.0, 1.0, -1),
        (4.3, 1.5, 3.27, -1),  # FWHM near the voxel size: ripples above 1e-4 out to Res/2 (2049 coefficients)
        (7.0, 1.0, 2.0, 4),  # an even maximum: 4 // 2 = 2 coefficients a side, 3 in all
        (7.0, 1.0, 2.0, 1),  # 1 // 2 = 0: no kernel, the axis is left alone
    ],
)
def test_metz_kernels_match_stir(stir, tmp_path, fwhm, power, voxel, size):
    """The Metz kernel STIR builds (read off its impulse response): the same length and values
    within 1e-6 of the centre (1e-5 with one fine sample per voxel, where the length may differ
    by the one coefficient at STIR's 1e-4 cut).  Guards each step of the construction on the
    regimes that differ (band limit on or off, truncation by 1e-4 or by the maximum kernel size,
    long ripples)."""
    mine = metz_kernel(fwhm, power, voxel, size)
    coarse = _samples_per_voxel(fwhm, voxel) == 1
    n = 2 * max(mine.size, 8) + 41
    response = _impulse_response(
        stir, tmp_path, "metz", _metz_block((fwhm, 0, 0), (power, 0, 0), (size, -1, -1)), n, voxel
    )
    theirs = response[n // 2 :]
    nonzero = np.flatnonzero(theirs)
    theirs = theirs[: nonzero[-1] + 1]
    if size == 1:
        assert mine.size == 0 and np.array_equal(response[n // 2 :][:1], [1.0])
        return
    assert np.array_equal(response[: n // 2 + 1][::-1], response[n // 2 :])  # symmetric
    common = min(mine.size, theirs.size)
    if coarse:
        longer = mine if mine.size > theirs.size else theirs
        assert abs(mine.size - theirs.size) <= 1 and np.all(np.abs(longer[common:]) < 1.1e-4 * theirs[0])
    else:
        assert mine.size == theirs.size
    tol = COARSE_KERNEL_TOL if coarse else FINE_KERNEL_TOL
    assert np.abs(mine[:common].astype(np.float64) - theirs[:common]).max() <= tol * theirs[0]


def _samples_per_voxel(fwhm: float, voxel: float) -> int:
    """STIR's fine samples per voxel (SeparableMetzArrayFilter.cxx), in double: enough away from
    its integer boundaries for the cases above."""
    s2 = fwhm * fwhm / (8 * np.log(2))
    return int(voxel * 2 * np.sqrt(2 * np.log(10) * 7 / s2) / (2 * np.pi) + 1)


@pytest.mark.parametrize(
    "fwhm, voxel, size, normalise",
    [(5.0, 2.0, -1, True), (8.0, 2.5, 7, False), (6.0, 2.0, 1, False), (6.0, 2.0, 4, True), (4.06, 4.03, 12, True)],
)
def test_gaussian_kernels_are_stirs(stir, tmp_path, fwhm, voxel, size, normalise):
    """STIR's Gaussian kernel along z, bit for bit: automatic length, an odd and an even maximum
    (4 gives 5 coefficients), 1 (the centre alone: unnormalised, a scaling), and a narrow
    kernel with a large maximum whose outer coefficients underflow (flushed to 0 by STIR's build)."""
    fz = fwhm_in_voxels((fwhm, 0, 0), (voxel, 1, 1))[0]
    mine = gaussian_kernel(fz, size, normalise)
    n = mine.size + 40
    response = _impulse_response(
        stir, tmp_path, "gaussian", _gaussian_block((fwhm, 0, 0), (size, -1, -1), normalise), n, voxel
    )
    half = mine.size // 2
    assert np.array_equal(response[n // 2 - half : n // 2 + half + 1], mine)
    assert not response[: n // 2 - half].any() and not response[n // 2 + half + 1 :].any()
