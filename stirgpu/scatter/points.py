"""Scatter points as STIR samples them (``ScatterSimulation::downsample_density_image_for_scatter_points``,
``sample_scatter_points.cxx``).

The attenuation image is zoomed (``preserve_values``) onto a coarser grid that keeps its origin:
by default x/y voxels the size of the template's default image voxels (``zoom_xy = old / default``;
``old_x * zoom_xy + 1`` voxels, made odd) and ``(default planes + 1) / 2`` planes, with the z zoom
then reset to ``(new planes - 1) / (old planes - 1)`` so both images span the same planes
(STIR issue #495).  Every voxel of that image whose value is at least the attenuation threshold
(cm^-1) is a scatter point, at the voxel's centre or, with random placement, at a uniformly drawn
point of the voxel.  STIR draws with C's ``rand()`` seeded by the time, so its random points
cannot be reproduced; here they come from a numpy ``Generator`` (seedable).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import GeometryError
from ..filters.zoom import zoom_values
from ..geometry import ImageInfo, ProjDataInfo

__all__ = [
    "ScatterPoints",
    "ZoomSettings",
    "scatter_point_image_info",
    "sample_scatter_points",
    "points_of_image",
    "stir_divide",
    "z_middle",
]

_F = np.float32


def stir_divide(values: np.ndarray, divisors) -> np.ndarray:
    """``values`` ((n, 3) or (3,), z y x) divided by ``divisors`` (z y x) as STIR's build divides a
    ``CartesianCoordinate3D<float>`` by another: GCC's fast-math code takes z and y as a packed
    pair (``rcpps`` and a Newton step: :func:`stirgpu.kernels.joseph.lors.divide_newton`) and x
    by a true division.  Measured on the reference build: 20 / 8 in z comes out just below 2.5
    (the point starts in the lower voxel), where the exact quotient would round up."""
    from ..kernels.joseph.lors import divide_newton_each

    v = np.atleast_2d(np.asarray(values, dtype=_F))
    d = np.asarray(divisors, dtype=_F)
    out = np.empty_like(v)
    for axis in (0, 1):
        out[:, axis] = divide_newton_each(np.ascontiguousarray(v[:, axis]), d[axis])
    out[:, 2] = v[:, 2] / d[2]
    return out.reshape(np.shape(values))


@dataclasses.dataclass(frozen=True)
class ZoomSettings:
    """STIR's ``zoom XY/Z for attenuation image for scatter points`` and ``XY/Z size of
    downsampled image for scatter points`` (negative: STIR's default)."""

    zoom_xy: float = -1.0
    zoom_z: float = -1.0
    size_xy: int = -1
    size_z: int = -1


@dataclasses.dataclass(frozen=True, eq=False)
class ScatterPoints:
    """The scatter points: ``positions`` (points, 3) mm in the gantry frame (z, y, x), ``mu`` their
    voxels' attenuation (cm^-1), ``volume`` one voxel's volume (mm^3), and the zoomed image they
    were taken from (``image``, ``info``)."""

    positions: np.ndarray
    mu: np.ndarray
    volume: float
    image: np.ndarray
    info: ImageInfo


def z_middle(info: ImageInfo) -> float:
    """STIR's ``z_to_middle``: how far the image's middle plane lies from its origin plane."""
    lo, hi = info.get_min_indices()[0], info.get_max_indices()[0]
    return float(_F((hi + lo) * _F(info.voxel_size[0]) / _F(2)))


def scatter_point_image_info(att: ImageInfo, pdi: ProjDataInfo, zoom: ZoomSettings = ZoomSettings()) -> ImageInfo:
    """The grid STIR samples scatter points on (see the module docstring)."""
    old_z, old_y, old_x = att.shape
    zoom_xy, zoom_z, size_z = _F(zoom.zoom_xy), _F(zoom.zoom_z), zoom.size_z
    if zoom_xy < 0 or zoom_z < 0:
        tmpl = ImageInfo.default_for(pdi)
        if zoom_xy < 0:
            zoom_xy = _F(_F(att.voxel_size[2]) / _F(tmpl.voxel_size[2]))
        if zoom_z < 0:
            z_length = max(_F((old_z + 1) * _F(att.voxel_size[0])), _F((tmpl.shape[0] + 1) * _F(tmpl.voxel_size[0])))
            if size_z < 0:
                size_z = (tmpl.shape[0] + 1) // 2
            zoom_z = _F(_F(att.voxel_size[0]) / _F(z_length / _F(size_z)))
    new_x = int(_F(old_x * zoom_xy) + 1) if zoom.size_xy == -1 else zoom.size_xy
    new_y = int(_F(old_y * zoom_xy) + 1) if zoom.size_xy == -1 else zoom.size_xy
    new_z = int(_F(old_z * zoom_z) + 1) if size_z == -1 else size_z
    new_x += 1 - new_x % 2  # odd sizes: no half-voxel shifts
    new_y += 1 - new_y % 2
    if old_z < 2 or new_z < 2:
        raise GeometryError(
            f"scatter simulation: the attenuation image has {old_z} plane(s) and the scatter-point image "
            f"{new_z}; STIR's scatter-point zoom needs at least 2 of each"
        )
    zoom_z_kept = _F(_F(new_z - 1) / _F(old_z - 1))
    if zoom.zoom_z > 0 and abs(zoom_z_kept - zoom.zoom_z) > 0.1:
        raise GeometryError(f"scatter simulation: use zoom Z -1 or {zoom_z_kept} (STIR's current limitation)")
    if new_x < 1 or new_y < 1:
        raise GeometryError(f"scatter simulation: scatter-point image size {new_x} x {new_y} is not positive")
    vz, vy, vx = (float(v) for v in stir_divide(np.array(att.voxel_size, dtype=_F), (zoom_z_kept, zoom_xy, zoom_xy)))
    return ImageInfo((new_z, new_y, new_x), (vz, vy, vx), origin=att.origin)


def sample_scatter_points(
    att_values: np.ndarray,
    att: ImageInfo,
    grid: ImageInfo,
    threshold: float,
    rng: np.random.Generator | None,
) -> ScatterPoints:
    """STIR's scatter points on ``grid``, the attenuation image zoomed onto it (``rng`` None:
    voxel centres, STIR's ``randomly place scatter points := 0``)."""
    return points_of_image(zoom_values(att_values, att, grid, "preserve_values"), grid, threshold, rng)


def points_of_image(
    image: np.ndarray, grid: ImageInfo, threshold: float, rng: np.random.Generator | None
) -> ScatterPoints:
    """The scatter points of an attenuation image on its own grid (STIR's
    ``sample_scatter_points``; also what ``attenuation image for scatter points filename`` gives)."""
    image = np.ascontiguousarray(image, dtype=_F)
    kz, ky, kx = np.nonzero(image >= _F(threshold))  # STIR's loop order: z, then y, then x
    mz, my, mx = grid.get_min_indices()
    index = np.stack([kz + mz, ky + my, kx + mx], axis=1).astype(_F)
    if rng is not None:
        index = index + rng.uniform(-0.5, 0.5, size=index.shape).astype(_F)
    origin = np.array(grid.origin, dtype=_F)
    origin[0] -= _F(z_middle(grid))
    positions = (index * np.array(grid.voxel_size, dtype=_F) + origin).astype(np.float64)
    vz, vy, vx = grid.voxel_size
    return ScatterPoints(
        positions=positions,
        mu=image[kz, ky, kx].astype(np.float64),
        volume=float(_F(_F(vz) * _F(vy) * _F(vx))),
        image=image,
        info=grid,
    )
