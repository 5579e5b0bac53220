"""STIR's ``zoom_image`` (behind SIRF's ``ImageData.zoom_image`` and ``zoom_image_as_template``, and
the scatter simulation's images).

What STIR computes (``zoom.cxx``, ``overlap_interpolate``):

* the new grid (``zoom_image(image, zooms, offsets_in_mm, new_sizes)``): voxel sizes
  ``old / zooms`` (float32), STIR's default index ranges for the new sizes (z from 0, y and x
  from ``-(n // 2)``), and the origin that puts the new grid's middle (half-way between its
  first and last voxel centres) at the old grid's middle plus ``offsets_in_mm``;
* the values, axis by axis (x, then y, then z): each voxel is a box, and an output box receives
  every input box's value times the fraction of that input box it covers ("overlap"
  interpolation: counts are preserved), with the output's index ``i`` covering input indices
  ``(i -+ 1/2) / zoom + offset``, ``zoom = old voxel size / new voxel size`` and
  ``offset = (new origin - old origin) / old voxel size`` per axis;
* ``preserve_sum`` (SIRF's default) keeps that; ``preserve_values`` multiplies by the product of
  the three zooms and ``preserve_projections`` by the y and z zooms.

Here each axis is one matrix of overlaps (float64) applied to the float32 values, so values
differ from STIR's incremental float32 sums by rounding only.
"""

from __future__ import annotations

import numpy as np

from ..errors import GeometryError
from ..geometry import ImageInfo

__all__ = ["SCALINGS", "zoomed_info", "zoom_values"]

_F = np.float32

#: SIRF's scaling options -> which zooms the result is multiplied by ((z, y, x) flags)
SCALINGS = {
    "preserve_sum": (False, False, False),
    "preserve_values": (True, True, True),
    "preserve_projections": (True, True, False),
}


def _middle(info: ImageInfo) -> np.ndarray:
    lo = np.asarray(info.get_min_indices(), dtype=_F) * np.asarray(info.voxel_size, _F) + np.asarray(info.origin, _F)
    hi = np.asarray(info.get_max_indices(), dtype=_F) * np.asarray(info.voxel_size, _F) + np.asarray(info.origin, _F)
    return (lo + hi) / _F(2)


def zoomed_info(info: ImageInfo, zooms, offsets_in_mm, sizes) -> ImageInfo:
    """STIR's new grid for ``zoom_image(image, zooms, offsets_in_mm, new_sizes)`` ((z, y, x) each;
    a size <= 0 keeps the image's, SIRF's rule)."""
    zooms = np.asarray(zooms, dtype=_F)
    if not np.all(zooms > 0):
        raise GeometryError(f"zoom_image: zooms must be positive, got {tuple(float(z) for z in zooms)}")
    nz, ny, nx = (int(n) if int(n) > 0 else int(old) for n, old in zip(sizes, info.shape, strict=True))
    vz, vy, vx = (float(v) for v in np.asarray(info.voxel_size, dtype=_F) / zooms)
    at_zero = ImageInfo((nz, ny, nx), (vz, vy, vx))
    origin = np.asarray(offsets_in_mm, dtype=_F) + _middle(info) - _middle(at_zero)
    return at_zero.replace(origin=tuple(float(o) for o in origin))


def _overlaps(n_out: int, out_min: int, n_in: int, in_min: int, zoom: float, offset: float) -> np.ndarray:
    """(n_out, n_in) fractions of each input box that each output box covers."""
    centres = (np.arange(n_out, dtype=np.float64) + out_min) / zoom + offset
    lo, hi = centres - 0.5 / zoom, centres + 0.5 / zoom
    in_lo = np.arange(n_in, dtype=np.float64) + in_min - 0.5
    return np.clip(np.minimum(hi[:, None], in_lo[None, :] + 1) - np.maximum(lo[:, None], in_lo[None, :]), 0, None)


def zoom_values(values: np.ndarray, info_in: ImageInfo, info_out: ImageInfo, scaling: str) -> np.ndarray:
    """``values`` ((z, y, x) on ``info_in``) on the grid ``info_out``: STIR's overlap interpolation."""
    if scaling not in SCALINGS:
        raise GeometryError(f"zoom_image: unknown scaling option {scaling!r} (SIRF's: {', '.join(SCALINGS)})")
    vin, vout = np.asarray(info_in.voxel_size, _F), np.asarray(info_out.voxel_size, _F)
    zooms = vin / vout
    offsets = (np.asarray(info_out.origin, _F) - np.asarray(info_in.origin, _F)) / vin
    out = np.asarray(values, dtype=np.float64)
    for axis in (2, 1, 0):  # STIR's order: x, then y, then z
        w = _overlaps(
            info_out.shape[axis],
            info_out.get_min_indices()[axis],
            info_in.shape[axis],
            info_in.get_min_indices()[axis],
            float(zooms[axis]),
            float(offsets[axis]),
        )
        out = np.moveaxis(np.tensordot(w, out, axes=([1], [axis])), 0, axis)
    result = out.astype(_F)
    factor = _F(1)
    for scaled, zoom in zip(SCALINGS[scaling], zooms, strict=True):
        if scaled:
            factor = _F(factor * zoom)
    if factor != 1:
        result *= factor
    return np.ascontiguousarray(result)
