"""Image geometry (STIR's ``VoxelsOnCartesianGrid``).

Arrays are (z, y, x), x fastest.  STIR's index ranges: z from 0, y and x from
``-(n // 2)``.  ``physical(k, j, i) = origin + (k vz, j vy, i vx)`` in STIR's
image frame, whose z = 0 is the first ring; projectors need the *gantry* frame
(z = 0 at the scanner's axial centre): :attr:`ImageInfo.gantry_origin`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError

if TYPE_CHECKING:  # pragma: no cover
    from .proj_data_info import ProjDataInfo

__all__ = ["ImageInfo"]


def _triple(name, value, cast):
    try:
        t = tuple(cast(v) for v in value)
    except TypeError:
        raise GeometryError(f"ImageInfo: {name} must be a sequence of 3 numbers, not {value!r}") from None
    if len(t) != 3:
        raise GeometryError(f"ImageInfo: {name} must have 3 entries (z, y, x), not {len(t)}")
    return t


@dataclasses.dataclass(frozen=True, eq=False)
class ImageInfo:
    """Geometry of a voxelised image: ``shape`` (nz, ny, nx), ``voxel_size`` (vz, vy, vx) mm,
    ``origin`` (oz, oy, ox) mm (STIR's origin) and ``min_indices`` (STIR's index offsets;
    default ``(0, -(ny // 2), -(nx // 2))``)."""

    shape: tuple[int, int, int]
    voxel_size: tuple[float, float, float]
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)
    min_indices: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        shape = _triple("shape", self.shape, int)
        vox = _triple("voxel_size", self.voxel_size, float)
        org = _triple("origin", self.origin, float)
        if min(shape) < 1:
            raise GeometryError(f"ImageInfo: shape must be positive, not {shape}")
        if not all(v > 0 and math.isfinite(v) for v in vox):
            raise GeometryError(f"ImageInfo: voxel_size must be positive, not {vox}")
        if not all(math.isfinite(o) for o in org):
            raise GeometryError(f"ImageInfo: origin must be finite, not {org}")
        mi = (
            (0, -(shape[1] // 2), -(shape[2] // 2))
            if self.min_indices is None
            else _triple("min_indices", self.min_indices, int)
        )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "voxel_size", vox)
        object.__setattr__(self, "origin", org)
        object.__setattr__(self, "min_indices", mi)

    # -- derived -----------------------------------------------------------------------
    @property
    def first_pixel_offset(self) -> tuple[float, float, float]:
        """Physical position (STIR image frame) of array element [0, 0, 0]: origin + voxel * min_index.
        This is Interfile's ``first pixel offset (mm)``."""
        (oz, oy, ox), (vz, vy, vx), (mz, my, mx) = self.origin, self.voxel_size, self.get_min_indices()
        return (oz + vz * mz, oy + vy * my, ox + vx * mx)

    @property
    def gantry_origin(self) -> tuple[float, float, float]:
        """Centre of array element [0, 0, 0] in the gantry frame (z = 0 at the scanner's axial
        centre), axis order (z, y, x).  STIR (and its Parallelproj bridge) puts the image's z
        index range centred on the scanner: z shifts by -(nz - 1) vz / 2; x and y do not."""
        fz, fy, fx = self.first_pixel_offset
        return (fz - (self.shape[0] - 1) * self.voxel_size[0] / 2, fy, fx)

    @property
    def num_voxels(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    @property
    def nbytes_float32(self) -> int:
        return 4 * self.num_voxels

    # STIR names
    def get_lengths(self) -> tuple[int, int, int]:
        return self.shape

    def get_voxel_size(self) -> tuple[float, float, float]:
        return self.voxel_size

    def get_origin(self) -> tuple[float, float, float]:
        return self.origin

    def get_min_indices(self) -> tuple[int, int, int]:
        mi = self.min_indices
        assert mi is not None  # (__post_init__ sets the default)
        return mi

    def get_max_indices(self) -> tuple[int, int, int]:
        (mz, my, mx), (nz, ny, nx) = self.get_min_indices(), self.shape
        return (mz + nz - 1, my + ny - 1, mx + nx - 1)

    def replace(self, **changes) -> ImageInfo:
        if "shape" in changes and "min_indices" not in changes:
            changes["min_indices"] = None
        return dataclasses.replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        """Same geometry: equal shape and index offsets, voxel sizes to 1e-5 relative and
        origins to 1e-3 mm.  Tolerant on purpose: STIR writes 6 significant digits
        (``3.12932``, ``-147.078``), so an image STIR wrote for a geometry reads back with
        an origin some 1e-5 mm off, and STIR itself treats it as the same geometry."""
        if not isinstance(other, ImageInfo):
            return NotImplemented
        if self.shape != other.shape or self.min_indices != other.min_indices:
            return False
        if any(abs(a - b) > 1e-5 * max(abs(a), abs(b)) for a, b in zip(self.voxel_size, other.voxel_size, strict=True)):
            return False
        return all(abs(a - b) <= 1e-3 for a, b in zip(self.origin, other.origin, strict=True))

    def __hash__(self) -> int:
        return hash((self.shape, self.min_indices))

    def __repr__(self) -> str:
        return (
            f"ImageInfo(shape={self.shape}, voxel_size={self.voxel_size}, origin={self.origin}, "
            f"min_indices={self.min_indices})"
        )

    # -- STIR's default image ------------------------------------------------------------
    @classmethod
    def default_for(
        cls,
        proj_data_info: ProjDataInfo,
        zoom: float = 1.0,
        xy_size: int | None = None,
        z_size: int | None = None,
        origin=(0.0, 0.0, 0.0),
    ) -> ImageInfo:
        """The image STIR derives from projection data (``VoxelsOnCartesianGrid(proj_data_info,
        zoom, origin, xy size, z size)``, STIR's ``VoxelsOnCartesianGrid.cxx``): z voxel = ring
        spacing / 2; planes = segment 0's axial positions (span > 1) or twice them minus one
        (span 1), i.e. 2 N_rings - 1 for constructed data; xy voxel = the scanner's default bin
        size / zoom, arc-corrected or not (STIR ignores the data's own tangential sampling here);
        2 ceil(max |s| / voxel) + 1 pixels unless ``xy_size`` is given (``-1`` and ``None`` both
        mean "default")."""
        zoom = float(zoom)
        if not zoom > 0:
            raise GeometryError(f"default image: zoom must be positive (got {zoom})")
        sc = proj_data_info.get_scanner()
        vxy = sc.default_bin_size / zoom
        vz = sc.ring_spacing / 2
        if xy_size is None or xy_size == -1:
            t = np.array([proj_data_info.get_min_tangential_pos_num(), proj_data_info.get_max_tangential_pos_num()])
            max_s = float(np.max(np.abs(proj_data_info.get_s(t))))
            xy_size = 2 * int(math.ceil(max_s / vxy)) + 1
        if z_size is None or z_size == -1:
            seg0 = proj_data_info.segment(0)
            z_size = seg0.num_axial_poss if seg0.min_ring_diff < seg0.max_ring_diff else 2 * seg0.num_axial_poss - 1
        if int(xy_size) < 1 or int(z_size) < 1:
            raise GeometryError(f"default image: sizes must be positive (xy {xy_size}, z {z_size})")
        return cls((int(z_size), int(xy_size), int(xy_size)), (vz, vxy, vxy), tuple(origin))
