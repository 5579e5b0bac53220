"""SIRF's phantom shapes (``EllipticCylinder``) and STIR's voxelisation of them (``add_shape``).

SIRF's ``ImageData.add_shape(shape, scale, num_samples_in_each_direction)`` is STIR's
``Shape3D::construct_volume`` on a zeroed copy of the image, times ``scale``, added to the image.
What STIR computes, in float32 as STIR does:

* coordinates are STIR's (mm, the image's own frame): voxel ``(z, y, x)`` of index ``i`` sits at
  ``i * voxel_size + origin``; a shape's origin is in the same frame;
* first pass: every voxel is 1 where its centre is inside the shape, else 0;
* with ``n > 1`` samples a direction, a second pass visits the voxels in (z, y, x) raster order
  and, where any of the 27 voxels around one (outside the image counting 0) differs from it,
  replaces it with the fraction of ``n^3`` sub-voxel points inside the shape
  (``get_voxel_weight``: offsets ``-(n - 1) / (2n)`` stepping by ``1 / n`` in float32 while
  ``<= 0.5``).  The pass works in place, so a voxel's earlier neighbours hold their refined values
  when it is checked: :func:`construct_volume` keeps that order (a voxel is re-checked only where
  an earlier neighbour changed).

SIRF's coordinate conventions (``STIR.py``): ``set_origin((z, y, x))`` but ``get_origin()``
returns ``(x, y, z)``; ``set_radii((ry, rx))`` but ``get_radii()`` returns ``(rx, ry)``.  Kept
as they are, since SIRF's scripts are written against them.
"""

from __future__ import annotations

import heapq
import itertools
from numbers import Real

import numpy as np

from ..geometry import ImageInfo
from .errors import InputError, InputTypeError, translate_class_errors

__all__ = ["Shape", "EllipticCylinder", "construct_volume", "scaled_volume"]

_F = np.float32


def _number(what: str, value) -> np.float32:
    if isinstance(value, bool) or not isinstance(value, (Real, np.number)):
        raise InputTypeError(f"{what}: expected a number, not {type(value).__name__}")
    return _F(value)


def _pair_or_triple(what: str, value, n: int) -> tuple:
    try:
        items = tuple(value)
    except TypeError:
        raise InputTypeError(f"{what}: expected {n} numbers, not {type(value).__name__}") from None
    if len(items) != n:
        raise InputError(f"{what}: expected {n} numbers, got {len(items)}")
    return tuple(_number(what, v) for v in items)


@translate_class_errors
class Shape:
    """SIRF's ``Shape``: a shape with an origin (STIR coordinates in mm)."""

    def __init__(self):
        self._origin = (_F(0), _F(0), _F(0))  # (z, y, x), STIR's default

    def set_origin(self, origin) -> None:
        """The shape's centre, given as (z, y, x) in mm (SIRF's order)."""
        self._origin = _pair_or_triple("set_origin", origin, 3)

    def get_origin(self) -> tuple[np.float32, np.float32, np.float32]:
        """The shape's centre as (x, y, z) in mm (SIRF returns this order)."""
        z, y, x = self._origin
        return (x, y, z)

    def is_inside(self, z, y, x) -> np.ndarray:
        """Whether the points (float32 arrays of STIR coordinates, mm) are inside the shape."""
        raise NotImplementedError

    def _relative(self, z, y, x):
        """The points in the shape's frame (STIR's default orientation: a translation only)."""
        oz, oy, ox = self._origin
        return z - oz, y - oy, x - ox


@translate_class_errors
class EllipticCylinder(Shape):
    """SIRF's ``EllipticCylinder`` (STIR's ``EllipsoidalCylinder``): axis along z, ``length`` mm
    long, radii ``radius_x`` and ``radius_y`` mm; all 0 until set (an empty shape, as in STIR)."""

    def __init__(self):
        super().__init__()
        self._length = self._radius_x = self._radius_y = _F(0)

    def set_length(self, value) -> None:
        self._length = _number("set_length", value)

    def get_length(self) -> np.float32:
        return self._length

    def set_radius_x(self, value) -> None:
        self._radius_x = _number("set_radius_x", value)

    def get_radius_x(self) -> np.float32:
        return self._radius_x

    def set_radius_y(self, value) -> None:
        self._radius_y = _number("set_radius_y", value)

    def get_radius_y(self) -> np.float32:
        return self._radius_y

    def set_radii(self, radii) -> None:
        """``(radius_y, radius_x)`` in mm (SIRF's order: y first)."""
        self._radius_y, self._radius_x = _pair_or_triple("set_radii", radii, 2)

    def get_radii(self) -> tuple[np.float32, np.float32]:
        """``(radius_x, radius_y)`` in mm (SIRF returns x first)."""
        return (self._radius_x, self._radius_y)

    def is_inside(self, z, y, x) -> np.ndarray:
        """STIR's test: ``|dz| < length / 2`` and ``(dx / rx)^2 + (dy / ry)^2 <= 1``, in float32
        (a zero radius or length: nothing is inside, as STIR's division by 0 gives)."""
        dz, dy, dx = self._relative(z, y, x)
        if self._radius_x == 0 or self._radius_y == 0 or not self._length > 0:
            return np.zeros(np.shape(dz), dtype=bool)
        along = np.abs(dz) < self._length / _F(2)
        across = np.square(dx / self._radius_x) + np.square(dy / self._radius_y) <= _F(1)
        return along & across


# -- STIR's construct_volume -------------------------------------------------------------------------
def _sample_offsets(n: int) -> np.ndarray:
    """STIR's sub-voxel offsets (fractions of a voxel) in one direction, accumulated in float32."""
    step, offset, out = _F(1) / _F(n), -_F(n - 1) / _F(n) / _F(2), []
    while offset <= _F(0.5):
        out.append(offset)
        offset = _F(offset + step)
    return np.array(out, dtype=_F)


def _centres(info: ImageInfo, index: np.ndarray) -> np.ndarray:
    """(..., 3) STIR coordinates (float32) of voxels given as (..., 3) array indices."""
    vox = np.asarray(info.voxel_size, dtype=_F)
    origin = np.asarray(info.origin, dtype=_F)
    stir_index = (index + np.asarray(info.get_min_indices())).astype(_F)
    return stir_index * vox + origin


def _voxel_weights(shape: Shape, info: ImageInfo, index: np.ndarray, n: int) -> np.ndarray:
    """STIR's ``get_voxel_weight`` for voxels given as (k, 3) array indices: float32 fractions."""
    offsets = _sample_offsets(n)
    grid = np.stack(np.meshgrid(offsets, offsets, offsets, indexing="ij"), axis=-1).reshape(-1, 3)
    points = _centres(info, index)[:, None, :] + grid[None, :, :] * np.asarray(info.voxel_size, dtype=_F)
    inside = shape.is_inside(points[..., 0], points[..., 1], points[..., 2])
    return (inside.sum(axis=1).astype(_F) / _F(len(grid))).astype(_F)


def _first_pass(shape: Shape, info: ImageInfo) -> np.ndarray:
    idx = np.indices(info.shape).reshape(3, -1).T
    c = _centres(info, idx)
    return shape.is_inside(c[:, 0], c[:, 1], c[:, 2]).astype(_F).reshape(info.shape)


_NEIGHBOURS = [d for d in itertools.product((-1, 0, 1), repeat=3) if d != (0, 0, 0)]


def _differs_from_a_neighbour(padded: np.ndarray, z: int, y: int, x: int) -> bool:
    """STIR's recompute test for array voxel (z, y, x), on the zero-padded current values."""
    return bool(np.any(padded[z : z + 3, y : y + 3, x : x + 3] != padded[z + 1, y + 1, x + 1]))


def _refine(shape: Shape, info: ImageInfo, volume: np.ndarray, n: int) -> None:
    """STIR's second pass, in raster order, on ``volume`` in place."""
    padded = np.pad(volume, 1)
    centre = padded[1:-1, 1:-1, 1:-1]
    differs = np.zeros(volume.shape, dtype=bool)
    nz, ny, nx = volume.shape
    for dz, dy, dx in _NEIGHBOURS:
        differs |= padded[1 + dz : 1 + dz + nz, 1 + dy : 1 + dy + ny, 1 + dx : 1 + dx + nx] != centre
    candidates = np.argwhere(differs)
    weights: dict[tuple[int, int, int], np.float32] = {
        (int(z), int(y), int(x)): w
        for (z, y, x), w in zip(candidates.tolist(), _voxel_weights(shape, info, candidates, n), strict=True)
    }
    dims = volume.shape
    queue = [(z * dims[1] + y) * dims[2] + x for z, y, x in weights]
    queued = set(queue)
    heapq.heapify(queue)
    while queue:
        flat = heapq.heappop(queue)
        z, rest = divmod(flat, dims[1] * dims[2])
        y, x = divmod(rest, dims[2])
        if not _differs_from_a_neighbour(padded, z, y, x):
            continue
        key = (z, y, x)
        if key not in weights:  # reached only through a changed neighbour: STIR checks it all the same
            weights[key] = _voxel_weights(shape, info, np.array([key]), n)[0]
        if weights[key] == padded[z + 1, y + 1, x + 1]:
            continue
        padded[z + 1, y + 1, x + 1] = weights[key]
        for dz, dy, dx in _NEIGHBOURS:  # later voxels around this one now see its new value
            nz_, ny_, nx_ = z + dz, y + dy, x + dx
            if 0 <= nz_ < dims[0] and 0 <= ny_ < dims[1] and 0 <= nx_ < dims[2]:
                later = (nz_ * dims[1] + ny_) * dims[2] + nx_
                if later > flat and later not in queued:
                    queued.add(later)
                    heapq.heappush(queue, later)
    volume[...] = centre


def construct_volume(shape: Shape, info: ImageInfo, num_samples: int = 1) -> np.ndarray:
    """STIR's ``construct_volume(image, (n, n, n))`` of ``shape`` on the grid ``info``: a new
    (z, y, x) float32 array of the fractions of each voxel inside the shape."""
    if not isinstance(shape, Shape):
        raise InputTypeError(f"add_shape: shape must be a Shape (e.g. EllipticCylinder), not {type(shape).__name__}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
        raise InputError(f"add_shape: num_samples_in_each_direction must be a positive integer, got {num_samples!r}")
    volume = _first_pass(shape, info)
    if num_samples > 1:
        _refine(shape, info, volume, int(num_samples))
    return volume


def scaled_volume(shape: Shape, info: ImageInfo, scale, num_samples: int = 1) -> np.ndarray:
    """What ``add_shape`` adds: :func:`construct_volume` times ``scale``, in float32 (SIRF's rule)."""
    factor = _number("add_shape: scale", scale)
    volume = construct_volume(shape, info, num_samples)
    volume *= factor
    return volume
