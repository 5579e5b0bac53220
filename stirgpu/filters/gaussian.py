"""STIR's ``Separable Gaussian`` filter (``SeparableGaussianImageFilter``,
``SeparableGaussianArrayFilter.cxx``).

Per axis, STIR samples a Gaussian at the voxel centres directly (no transform):

1. the FWHM in voxels, ``fwhm / voxel`` in float32 -- for z and y through GCC's fast-math
   packed division (``rcpps`` and one Newton step), for x a true division (what the reference
   build computes; :func:`stirgpu.kernels.joseph.lors.divide_newton`);
2. ``sd = sqrt(fwhm^2 / (8 ln 2))`` (double); 0 gives no filtering on that axis;
3. ``L = ceil(sqrt(-2 ln 1e-6) sd)`` coefficients a side (the last about 1e-6 of the centre),
   or ``max_kernel_size // 2`` when a maximum kernel size is given (so a maximum of 4 gives 5
   coefficients, 1 gives the centre one alone);
4. ``k[0] = 1 / sqrt(2 pi) / sd``, ``k[i] = k[-i] = exp(-i^2 / (2 sd^2)) / sqrt(2 pi sd^2)``,
   each rounded to float32 (values below float32's smallest normal number are 0: the build's
   flush-to-zero);
5. with ``Normalise filter to 1`` (the default), each divided by the double sum of the float32
   coefficients.

The image is then convolved with STIR's general convolution (:mod:`stirgpu.kernels.convolution`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ..errors import StirGpuError
from .separable import AXES, AxisKernel, SeparableImageFilter, float32_triple

__all__ = ["SeparableGaussianFilter", "gaussian_kernel", "fwhm_in_voxels"]

_F = np.float32
_TINY = np.finfo(np.float32).tiny
_NORMAL_MAX_X = math.sqrt(-2 * math.log(1e-6))  # where the Gaussian is 1e-6 of its peak, in sd


def _flush(a: np.ndarray) -> np.ndarray:
    a[np.abs(a) < _TINY] = 0
    return a


def fwhm_in_voxels(fwhm_mm, voxel_size) -> tuple[np.float32, np.float32, np.float32]:
    """(z, y, x) FWHM / voxel size in float32, rounded as STIR's reference build divides them."""
    from ..kernels.joseph.lors import divide_newton

    fz, fy, fx = (_F(f) for f in fwhm_mm)
    vz, vy, vx = (_F(v) for v in voxel_size)
    return _F(divide_newton(fz, vz)), _F(divide_newton(fy, vy)), _F(fx / vx)


def gaussian_kernel(fwhm_voxels: float | np.floating, max_kernel_size: int = -1, normalise: bool = True) -> np.ndarray:
    """STIR's Gaussian kernel (float32, odd length, centre in the middle) for a FWHM given in
    voxels; empty for a FWHM of 0 (no filtering)."""
    if max_kernel_size == 0:
        raise StirGpuError("Separable Gaussian: max_kernel_size 0 (STIR refuses it; -1 means automatic)")
    f = _F(fwhm_voxels)
    sd = math.sqrt(float(f * f) / (8 * math.log(2.0)))
    if sd == 0:
        return np.zeros(0, dtype=np.float32)
    half = max_kernel_size // 2 if max_kernel_size > 0 else int(math.ceil(_NORMAL_MAX_X * sd))
    i = np.arange(1, half + 1, dtype=np.float64)
    side = _flush((np.exp(-(i * i) / (2.0 * sd * sd)) / math.sqrt(2 * sd * sd * math.pi)).astype(np.float32))
    centre = np.array([1 / math.sqrt(2 * math.pi) / sd], dtype=np.float32)
    kernel = _flush(np.concatenate([side[::-1], centre, side]))
    if normalise:
        total = float(np.add.accumulate(kernel.astype(np.float64))[-1])  # STIR's sequential double sum
        kernel = _flush((kernel.astype(np.float64) / total).astype(np.float32))
    return kernel


@dataclasses.dataclass(frozen=True)
class SeparableGaussianFilter(SeparableImageFilter):
    """STIR's ``Separable Gaussian`` filter.  ``fwhm`` (mm) and ``max_kernel_size`` are one
    number (all axes) or three in (z, y, x) order (FWHM 0: that axis is not filtered; maximum
    kernel size -1: automatic, ``2 ceil(5.26 sd) + 1`` coefficients); ``normalise``: STIR's
    ``Normalise filter to 1`` (the coefficients sum to 1).
    ``SeparableGaussianFilter(fwhm=4.0).apply(image, voxel_size)``."""

    registered_name: ClassVar[str] = "Separable Gaussian"
    block_name: ClassVar[str] = "Separable Gaussian Filter Parameters"

    fwhm: tuple[float, float, float] = (0.0, 0.0, 0.0)
    max_kernel_size: tuple[int, int, int] = (-1, -1, -1)
    normalise: bool = True

    def __post_init__(self) -> None:
        fwhm = float32_triple("fwhm", self.fwhm)
        sizes = float32_triple("max_kernel_size", self.max_kernel_size, int)
        if any(not (math.isfinite(v) and v >= 0) for v in fwhm):
            raise StirGpuError(f"{self.registered_name}: fwhm must be >= 0 mm, got {fwhm}")
        if any(v < 1 and v != -1 for v in sizes):
            raise StirGpuError(f"{self.registered_name}: max_kernel_size must be -1 (automatic) or >= 1, got {sizes}")
        object.__setattr__(self, "fwhm", fwhm)
        object.__setattr__(self, "max_kernel_size", sizes)
        object.__setattr__(self, "normalise", bool(self.normalise))

    def kernels(self, voxel_size) -> tuple[AxisKernel, AxisKernel, AxisKernel]:
        """The (z, y, x) kernels for ``voxel_size`` ((z, y, x) mm)."""
        z, y, x = (
            AxisKernel(gaussian_kernel(f, m, self.normalise), "general")
            for f, m in zip(fwhm_in_voxels(self.fwhm, voxel_size), self.max_kernel_size, strict=True)
        )
        return z, y, x

    def par_lines(self) -> list[str]:
        lines = [f"{self.block_name} :="]
        for i in (2, 1, 0):
            d = AXES[i]
            lines += [
                f"  {d}-dir filter FWHM (in mm) := {self.fwhm[i]!r}",
                f"  {d}-dir maximum kernel size := {self.max_kernel_size[i]}",
            ]
        return [*lines, f"  Normalise filter to 1 := {int(self.normalise)}", f"END {self.block_name} :="]
