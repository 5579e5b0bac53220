"""The one place that maps an image's geometry to the kernels' frame and units.

STIR's Parallelproj bridge works in "x-voxel" units: it divides LOR endpoints, the
image origin and the voxel sizes by the x voxel size before calling libparallelproj,
so line integrals come out in units of vx, not mm.  Joseph's algorithm is
scale-invariant (every plane choice, weight and interpolation coordinate is a ratio
of lengths), so projecting in mm and multiplying by 1/vx gives the same numbers;
the kernels therefore take mm and a ``scale`` factor.

The image sits in the gantry frame (z = 0 at the scanner's axial centre) with the
centre of array element [0, 0, 0] at :attr:`stirgpu.geometry.ImageInfo.gantry_origin`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError

if TYPE_CHECKING:
    from ..geometry import ProjDataInfo

__all__ = ["KernelGeometry", "stir_scaled_geometry", "NUMERICS"]

#: ``"stir"``: STIR's float32 endpoints and libparallelproj 2.0.3's float32 Joseph projector
#: (STIR's numbers, forward bit for bit); ``"exact"``: float64 geometry (the exact Joseph
#: integral of the exact LOR). docs/joseph.md, "Precision".
NUMERICS = ("stir", "exact")


def checked_triple(name: str, value: object, positive: bool) -> tuple[float, float, float]:
    """A kernel argument ``name`` (origin, voxel size) as 3 finite floats (z, y, x), positive
    where asked; a GeometryError naming it otherwise."""
    try:
        t = tuple(float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError):
        raise GeometryError(f"{name}: expected 3 numbers (z, y, x), got {value!r}") from None
    if len(t) != 3:
        raise GeometryError(f"{name}: expected 3 numbers (z, y, x), got {len(t)}")
    if not all(math.isfinite(v) for v in t):
        raise GeometryError(f"{name}: must be finite, got {t}")
    if positive and not all(v > 0 for v in t):
        raise GeometryError(f"{name}: must be positive, got {t}")
    return t


@dataclass(frozen=True)
class KernelGeometry:
    """What :func:`stirgpu.kernels.forward_chunk` / :func:`back_chunk` need besides tables
    and arrays: ``origin`` and ``voxel_size`` (z, y, x) in mm, gantry frame, and ``scale``
    (multiplies every line integral).  With ``numerics == "stir"`` the chunk programs use
    :func:`stirgpu.kernels.forward_chunk_stir` / :func:`back_chunk_stir` instead, with
    ``proj_data_info`` and ``stir_frame`` (:func:`stirgpu.kernels.stir_lors.stir_image_frame`)."""

    origin: tuple[float, float, float]
    voxel_size: tuple[float, float, float]
    scale: float
    numerics: str = "exact"
    proj_data_info: ProjDataInfo | None = field(default=None, compare=False, repr=False)
    #: (origin, voxel size, rescale), float32 (:func:`stirgpu.kernels.stir_lors.stir_image_frame`)
    stir_frame: tuple[np.ndarray, np.ndarray, np.float32] | None = field(default=None, compare=False, repr=False)

    def as_kwargs(self) -> dict:
        return {"origin": self.origin, "voxel_size": self.voxel_size, "scale": self.scale}


def stir_scaled_geometry(
    image_info, stir_units: bool = True, numerics: str = "exact", proj_data_info=None
) -> KernelGeometry:
    """Kernel geometry of ``image_info`` (a :class:`stirgpu.geometry.ImageInfo`).

    With ``stir_units`` (the default) results equal STIR's Parallelproj projector:
    line integrals in units of the x voxel size (``scale = 1 / vx``).  With
    ``stir_units=False`` they are in mm (``scale = 1``).  ``numerics="stir"`` (STIR units
    only) also needs ``proj_data_info``.
    """
    if numerics not in NUMERICS:
        raise GeometryError(f"numerics must be one of {NUMERICS}, not {numerics!r}")
    if numerics == "stir" and not stir_units:
        raise GeometryError("numerics='stir' gives STIR's numbers, in STIR's units: it needs units='stir'")
    if numerics == "stir" and proj_data_info is None:
        raise GeometryError("numerics='stir' needs the projection-data geometry (proj_data_info)")
    try:
        origin = tuple(float(v) for v in image_info.gantry_origin)
        vox = tuple(float(v) for v in image_info.voxel_size)
    except AttributeError as e:
        raise GeometryError(f"image_info: expected stirgpu.geometry.ImageInfo ({e})") from None
    if len(origin) != 3 or len(vox) != 3 or not all(v > 0 for v in vox):
        raise GeometryError(f"image_info: bad origin {origin} or voxel size {vox}")
    frame = None
    if numerics == "stir":
        from .stir_lors import stir_image_frame

        frame = stir_image_frame(image_info)
    return KernelGeometry(origin, vox, 1.0 / vox[2] if stir_units else 1.0, numerics, proj_data_info, frame)
