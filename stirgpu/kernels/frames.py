"""The one place that maps an image's geometry to the kernels' frame and units.

STIR's Parallelproj bridge works in "x-voxel" units: it multiplies LOR endpoints, the image
origin and the voxel sizes by ``rescale = 1 / vx`` (in float32) before calling libparallelproj, so
line integrals come out in units of vx, not mm.  The kernels do the same, with STIR's float32
frame (:func:`stirgpu.kernels.joseph.lors.stir_image_frame`); in mm, ``rescale`` is 1.

The image sits in the gantry frame (z = 0 at the scanner's axial centre) with the
centre of array element [0, 0, 0] at :attr:`stirgpu.geometry.ImageInfo.gantry_origin`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError

if TYPE_CHECKING:
    from ..geometry import ProjDataInfo

__all__ = ["KernelGeometry", "kernel_geometry", "UNITS"]

#: ``"stir"``: line integrals in STIR's units (x voxels), as STIR's Parallelproj projector gives
#: them; ``"mm"``: in mm
UNITS = ("stir", "mm")


@dataclass(frozen=True)
class KernelGeometry:
    """What the chunk kernels need besides a chunk's tables and the arrays: the projection-data
    geometry the tables come from (``proj_data_info``) and the image's ``frame``, its
    ``(origin, voxel_size, rescale)`` as STIR's Parallelproj projector hands them to
    libparallelproj (float32, (z, y, x): the centre of voxel [0, 0, 0] in the gantry frame, and
    the voxel size, both times ``rescale``; LOR endpoints are multiplied by ``rescale`` too), in
    ``units``: ``"stir"`` (``rescale = 1 / vx``, STIR's x-voxel units) or ``"mm"`` (1)."""

    proj_data_info: ProjDataInfo = field(compare=False, repr=False)
    frame: tuple[np.ndarray, np.ndarray, np.float32] = field(compare=False, repr=False)
    units: str = "stir"

    @property
    def origin(self) -> tuple[float, float, float]:
        """The frame's origin (z, y, x), in its units."""
        return tuple(float(v) for v in self.frame[0])  # type: ignore[return-value]

    @property
    def voxel_size(self) -> tuple[float, float, float]:
        """The frame's voxel size (z, y, x), in its units."""
        return tuple(float(v) for v in self.frame[1])  # type: ignore[return-value]


def kernel_geometry(image_info, proj_data_info, units: str = "stir") -> KernelGeometry:
    """The :class:`KernelGeometry` of ``image_info`` (a :class:`stirgpu.geometry.ImageInfo`) for
    projections of ``proj_data_info``: with ``units="stir"`` (the default) results equal STIR's
    Parallelproj projector's, line integrals in units of the x voxel size; with ``"mm"`` they are
    in mm (the same float32 arithmetic on the unscaled frame)."""
    if units not in UNITS:
        raise GeometryError(f"units must be one of {UNITS}, not {units!r}")
    if proj_data_info is None:
        raise GeometryError("kernel_geometry needs the projection-data geometry (proj_data_info)")
    from .joseph.lors import stir_image_frame

    try:
        frame = stir_image_frame(image_info, stir_units=units == "stir")
    except AttributeError as e:
        raise GeometryError(f"image_info: expected stirgpu.geometry.ImageInfo ({e})") from None
    return KernelGeometry(proj_data_info, frame, units)
