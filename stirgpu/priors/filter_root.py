"""STIR's ``FilterRootPrior`` with its ``Median`` filter: the median root prior (MRP).

STIR's ``FilterRootPrior`` has no penalty value (its ``compute_value`` warns and returns 0);
its gradient at ``x``, with ``m`` the filtered image, is voxel by voxel, in float32::

    beta * (q(x, m) - 1),   q(x, m) = x / m          if |x| < 1000 |m|
                                    = +-1000          otherwise (the sign of x times that of m,
                                                       0 counting as positive)

so OSMAPOSL's One-Step-Late update with it pulls each voxel towards the median of its
neighbourhood.  The filter is STIR's ``MedianImageFilter3D`` (``mask radius x/y/z``), reproduced
value for value, edges included (:mod:`stirgpu.kernels.priors.median`).
"""

from __future__ import annotations

import numpy as np

from ..arrays import is_cupy
from ..errors import GeometryError, StirGpuError
from ..formats import VoxelsOnCartesianGrid
from ..geometry import ImageInfo
from ..kernels.priors.median import stir_median_filter
from .base import PenalisedPrior

__all__ = ["FilterRootPrior", "MedianFilter"]

#: STIR's bound on the quotient x / filtered(x) (``quotient_with_max``'s ``max``)
_QUOTIENT_MAX = np.float32(1000)


class MedianFilter:
    """STIR's ``Median`` image filter: mask radii in voxels (``mask radius z/y/x``, default 0)."""

    registered_name = "Median"

    def __init__(self, mask_radius_z: int = 0, mask_radius_y: int = 0, mask_radius_x: int = 0):
        radii = (mask_radius_z, mask_radius_y, mask_radius_x)
        if any(int(r) != r or r < 0 for r in radii):
            raise StirGpuError(f"Median filter: mask radii must be whole numbers >= 0, got {radii}")
        self.radius = (int(mask_radius_z), int(mask_radius_y), int(mask_radius_x))

    def apply(self, array: np.ndarray) -> np.ndarray:
        return stir_median_filter(array, self.radius)

    def __repr__(self) -> str:
        z, y, x = self.radius
        return f"MedianFilter(mask_radius_z={z}, mask_radius_y={y}, mask_radius_x={x})"


class FilterRootPrior(PenalisedPrior):
    """STIR's ``FilterRootPrior`` (``prior type := FilterRootPrior``) with a :class:`MedianFilter`:
    ``get_gradient`` is STIR's ``compute_gradient``; ``get_value`` is 0, as in STIR."""

    registered_name = "FilterRootPrior"

    def __init__(self, penalisation_factor: float = 0.0, *, median_mask_radius: tuple[int, int, int] | None = None):
        """``median_mask_radius``: (z, y, x) radii of the Median filter (STIR's ``mask radius z/y/x``);
        None: no filter (STIR's ``Filter type := None``: a zero gradient)."""
        super().__init__(penalisation_factor)
        self._filter = None if median_mask_radius is None else MedianFilter(*median_mask_radius)
        self._info: ImageInfo | None = None

    def get_gradient_filename_prefix(self) -> None:
        """None: STIR's FilterRootPrior writes no gradient files."""
        return None

    def get_filter(self) -> MedianFilter | None:
        return self._filter

    def is_convex(self) -> bool:
        return False

    def set_up(self, image) -> None:
        info = image.info if isinstance(image, VoxelsOnCartesianGrid) else image
        if not isinstance(info, ImageInfo):
            raise GeometryError(f"FilterRootPrior.set_up: expected an ImageInfo or image, not {type(image).__name__}")
        self._info = info

    def get_value(self, image) -> float:
        """0: STIR's FilterRootPrior has no penalty value."""
        self._array(image)
        return 0.0

    def get_gradient(self, image, out=None, *, write_file: bool = True):
        """``beta (q(x, median(x)) - 1)`` (module docstring), into ``out`` or a new image / array
        (a cupy image is filtered on the host, as STIR filters, and the result returned on its GPU).
        ``write_file`` is accepted for the OSEM loop's sake: this prior writes no files."""
        x = self._array(image)
        host = x.get() if is_cupy(x) else np.asarray(x)
        host = np.ascontiguousarray(host, dtype=np.float32)
        if self.is_zero or self._filter is None:  # STIR: a zero gradient then
            grad = np.zeros_like(host)
        else:
            grad = _filter_root_gradient(host, self._filter.apply(host), np.float32(self._beta))
        result = _like(x, grad)
        if out is not None:
            self._array(out, "out")[...] = result
            return out
        return VoxelsOnCartesianGrid(image.info, fill=grad) if isinstance(image, VoxelsOnCartesianGrid) else result

    def _array(self, image, name: str = "image"):
        if self._info is None:
            raise StirGpuError("FilterRootPrior: call set_up(image) first (STIR: the prior is not set up)")
        a = image.array if isinstance(image, VoxelsOnCartesianGrid) else image
        if getattr(a, "ndim", None) != 3 or tuple(a.shape) != tuple(self._info.shape):
            raise GeometryError(
                f"{name}: shape {getattr(a, 'shape', None)} differs from the set-up one {self._info.shape}"
            )
        return a

    def __repr__(self) -> str:
        return f"FilterRootPrior(penalisation_factor={self._beta!r}, filter={self._filter!r})"


def _filter_root_gradient(x: np.ndarray, filtered: np.ndarray, beta: np.float32) -> np.ndarray:
    """STIR's ``penalisation_factor * (quotient_with_max(x, filtered, 1000) - 1)`` in float32."""
    inside = np.abs(x) < _QUOTIENT_MAX * np.abs(filtered)
    quotient = np.divide(x, filtered, out=np.zeros_like(x), where=inside)
    signs = np.where(x >= 0, 1, -1) * np.where(filtered >= 0, 1, -1)
    quotient = np.where(inside, quotient, _QUOTIENT_MAX * signs.astype(np.float32))
    return (beta * (quotient - np.float32(1))).astype(np.float32)


def _like(x, host: np.ndarray):
    if is_cupy(x):
        import cupy

        return cupy.asarray(host, dtype=x.dtype)
    return host.astype(x.dtype, copy=False)
