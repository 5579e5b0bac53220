"""STIR's ``Separable Cartesian Metz`` filter (``SeparableCartesianMetzImageFilter``).

Per axis, STIR builds a half kernel from the FWHM (mm) of a Gaussian, a Metz power and the
voxel size (``SeparableMetzArrayFilter.cxx``, ``build_metz`` / ``build_gauss``), in this
order (float32 where STIR computes in ``float``):

1. ``s2 = fwhm^2 / (8 ln 2)`` (the Gaussian's variance, mm^2); with ``n = 7``,
   ``samples_per_voxel = int(voxel * 2 sqrt(2 ln(10) n / s2) / (2 pi) + 1)`` and the fine
   sampling ``dx = voxel / samples_per_voxel``;
2. a transform length ``Res = 2^int(log2((sqrt(8 n ln(10) s2) + stretch) / dx) + 1)``, where
   ``stretch`` is 10000 mm when ``samples_per_voxel > 1`` (else 0);
3. the Gaussian sampled at ``dx`` on that periodic grid, centred at index 0, from its peak
   ``1 / sqrt(2 pi s2)`` outwards until a sample falls below 1e-6 of the peak (that sample
   is kept, the rest are 0), then divided by the float32 sum of the samples taken;
4. its discrete Fourier transform ``G``; with ``z = |G|^2`` (clamped to ``1 - 1e-6`` above 1,
   and set to 0 beyond ``Res / (2 samples_per_voxel)`` when ``stretch > 0``: the cut-off at the
   voxel grid's Nyquist frequency), the Metz transform ``(1 - (1 - z)^(P+1)) conj(G) / z``
   (0 where ``z`` is 0) -- ``P = 0`` gives back the Gaussian, band-limited;
5. the inverse transform, sampled at every ``samples_per_voxel``-th fine sample up to
   ``Res / 2`` and scaled by ``samples_per_voxel`` (``voxel / dx``);
6. kept up to the last coefficient whose magnitude is at least 1e-4 of the centre one, then
   cut to ``max_kernel_size // 2`` coefficients when a maximum kernel size is given.

A FWHM of 0 gives the trivial kernel (the axis is not filtered).  The transforms here are
numpy's float64 FFTs of the float32 samples (STIR uses its own float32 FFT); everything else
follows STIR's arithmetic (float32, and C's double ``pow``), and the kernels agree with STIR's
to about 2e-7 of their centre value where ``samples_per_voxel > 1``, to about 5e-6 where it is 1
(a short transform, whose rounding STIR's ``1 - (1 - z)^(P+1)`` amplifies: docs/filters.md;
``tests/stir_differential/test_filters_vs_stir.py``).  The image is then convolved with STIR's
symmetric-kernel convolution (:mod:`stirgpu.kernels.convolution`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..errors import StirGpuError
from .separable import AXES, AxisKernel, SeparableImageFilter, float32_triple

__all__ = ["SeparableCartesianMetzFilter", "metz_kernel"]

_F = np.float32
_ZERO_TOL = _F(1e-6)
_TWO_PI = 6.28318530717958647692
_N_CUTOFF = 7  # STIR's 'n': how far out the Gaussian is sampled, in space and frequency


def _fine_gaussian(res: int, s2: np.float32, dx: np.float32) -> np.ndarray:
    """Step 3: the normalised float32 Gaussian on the periodic grid of ``res`` fine samples,
    index 0 the centre (float64 copy of the float32 values)."""
    peak = _F(1.0 / math.sqrt(float(s2) * _TWO_PI))
    j = np.arange(1, res // 2, dtype=np.float32)
    x = (j * dx).astype(np.float64)  # STIR: j * dx in float, the rest in double
    samples = (float(peak) * np.exp(-0.5 * x * x / float(s2))).astype(np.float32)
    below = np.flatnonzero(samples < peak * _ZERO_TOL)
    samples = samples[: below[0] + 1] if below.size else samples
    # STIR adds the peak, then twice each sample outwards, in float32
    total = np.add.accumulate(np.concatenate(([peak], _F(2) * samples)), dtype=np.float32)[-1]
    grid = np.zeros(res, dtype=np.float32)
    grid[0] = peak
    grid[1 : samples.size + 1] = samples
    grid[res - samples.size :] = samples[::-1]
    return (grid / total).astype(np.float64)


def _metz_transform(spectrum: np.ndarray, power: np.float32, cutoff: int | None) -> np.ndarray:
    """Step 4 on the non-negative frequencies: ``z`` and the quotients in float32, the power and
    ``1 - (1 - z)^(P+1)`` in double (STIR's ``pow`` of two floats is C's double ``pow``), each
    result rounded to float32 as STIR stores it."""
    re, im = spectrum.real.astype(np.float32), spectrum.imag.astype(np.float32)
    z = re * re + im * im
    if cutoff is not None:
        z[cutoff + 1 :] = 0  # frequencies i > cutoff (and Res - i > cutoff: the mirror half)
    z[z > 1] = _F(1) - _ZERO_TOL
    pos = z > 0
    factor = 1.0 - np.power((_F(1) - z[pos]).astype(np.float64), float(power + _F(1)))
    out = np.zeros(z.shape, dtype=np.complex128)
    out.real[pos] = (factor * (re[pos] / z[pos])).astype(np.float32)
    out.imag[pos] = (factor * (-im[pos] / z[pos])).astype(np.float32)
    return out


def metz_kernel(fwhm: float, power: float, voxel_size: float, max_kernel_size: int = -1) -> np.ndarray:
    """STIR's Metz half kernel (float32, index 0 the centre) for one axis: the underlying
    Gaussian's ``fwhm`` (mm), the Metz ``power``, the ``voxel_size`` (mm) along that axis and the
    maximum kernel size (-1: none).  A FWHM of 0 gives ``[1]`` (no filtering)."""
    fw, p, mm = _F(fwhm), _F(power), _F(voxel_size)
    if not fw > 0:
        return np.ones(1, dtype=np.float32)
    s2 = _F(fw * fw / _F(_F(8) * _F(math.log(2.0))))
    root = _F(math.sqrt(float(_F(_F(_F(_F(2) * _F(math.log(10.0))) * _F(_N_CUTOFF)) / s2))))
    spv = int(float(_F(mm * _F(2)) * root) / _TWO_PI + 1)
    dx = _F(mm / _F(spv))
    stretch = 10000.0 if spv > 1 else 0.0
    exponent = int(
        math.log((math.sqrt(8 * _N_CUTOFF * math.log(10.0) * float(s2)) + stretch) / float(dx)) / math.log(2.0) + 1
    )
    res = 2**exponent
    cutoff = int(_F(_F(dx * _F(res)) / _F(_F(2) * mm))) if stretch > 0 else None
    spectrum = np.fft.rfft(_fine_gaussian(res, s2, dx))
    fine = np.fft.irfft(_metz_transform(spectrum, p, cutoff), n=res)[: res // 2 + 1 : spv]
    coefficients = (fine.astype(np.float32) * mm / dx).astype(np.float32)
    keep = np.flatnonzero(np.abs(coefficients.astype(np.float64)) >= 0.0001 * float(coefficients[0]))
    length = int(keep[-1]) + 1 if keep.size else 0
    if max_kernel_size > 0:
        length = min(length, max_kernel_size // 2)
    return coefficients[:length].copy()


@dataclasses.dataclass(frozen=True)
class SeparableCartesianMetzFilter(SeparableImageFilter):
    """STIR's ``Separable Cartesian Metz`` filter.  Every parameter is one number (all axes) or
    three in (z, y, x) order: ``fwhm`` (mm, of the underlying Gaussian; 0: that axis is not
    filtered), ``metz_power`` (0: a band-limited Gaussian), ``max_kernel_size`` (-1: unrestricted;
    STIR keeps ``max_kernel_size // 2`` coefficients a side including the centre, so 1 means no
    filtering).  ``SeparableCartesianMetzFilter(fwhm=(8, 5, 5), metz_power=1).apply(image, voxel_size)``.
    """

    registered_name: ClassVar[str] = "Separable Cartesian Metz"
    block_name: ClassVar[str] = "Separable Cartesian Metz Filter Parameters"

    fwhm: tuple[float, float, float] = (0.0, 0.0, 0.0)
    metz_power: tuple[float, float, float] = (0.0, 0.0, 0.0)
    max_kernel_size: tuple[int, int, int] = (-1, -1, -1)

    def __post_init__(self) -> None:
        fwhm = float32_triple("fwhm", self.fwhm)
        power = float32_triple("metz_power", self.metz_power)
        sizes = float32_triple("max_kernel_size", self.max_kernel_size, int)
        if any(not (math.isfinite(v) and v >= 0) for v in fwhm):
            raise StirGpuError(f"{self.registered_name}: fwhm must be >= 0 mm, got {fwhm}")
        if any(not (math.isfinite(v) and v >= 0) for v in power):
            raise StirGpuError(f"{self.registered_name}: metz_power must be >= 0, got {power}")
        if any(v < 1 and v != -1 for v in sizes):
            raise StirGpuError(
                f"{self.registered_name}: max_kernel_size must be -1 (unrestricted) or >= 1, got {sizes}"
            )
        object.__setattr__(self, "fwhm", fwhm)
        object.__setattr__(self, "metz_power", power)
        object.__setattr__(self, "max_kernel_size", sizes)

    def kernels(self, voxel_size) -> tuple[AxisKernel, AxisKernel, AxisKernel]:
        """The (z, y, x) half kernels for ``voxel_size`` ((z, y, x) mm)."""
        z, y, x = (
            AxisKernel(metz_kernel(f, p, v, m), "symmetric")
            for f, p, v, m in zip(self.fwhm, self.metz_power, voxel_size, self.max_kernel_size, strict=True)
        )
        return z, y, x

    def par_lines(self) -> list[str]:
        lines = [f"{self.block_name} :="]
        for i in (2, 1, 0):
            d = AXES[i]
            lines += [
                f"  {d}-dir filter FWHM (in mm) := {self.fwhm[i]!r}",
                f"  {d}-dir filter Metz power := {self.metz_power[i]!r}",
                f"  {d}-dir maximum kernel size := {self.max_kernel_size[i]}",
            ]
        return [*lines, f"END {self.block_name} :="]
