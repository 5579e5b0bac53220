"""STIR's ``restrict to cylindrical FOV`` for the Parallelproj projector.

What STIR 6.5 does (``ForwardProjectorByBinParallelproj::set_input`` and
``BackProjectorByBinParallelproj::get_output``, both calling ``truncate_rim`` from
``recon_array_functions.cxx``): when the option is on (the default), the image is
zeroed outside a cylinder *before* forward projection (on STIR's own copy: the
caller's image is untouched) and the back projection is zeroed outside it *after*
back projection.  The LORs themselves are always clipped to the scanner's FOV
cylinder (``max FOV radius``) by the geometry; this option is about voxels only.

``truncate_rim(image, rim)`` works in *index* space, ignoring voxel sizes and origin:
with x indices ``xs..xe`` and y indices ``ys..ye`` (STIR's, i.e. centred on 0),
``xm = (xs + xe) / 2`` and ``ym = (ys + ye) / 2`` in C integer division (truncation
toward zero), ``r = (xe - xs) / 2 - rim`` (integer division), and every voxel with
``(x - xm)^2 + (y - ym)^2 >= r^2`` is set to 0 (strictly-less-than-radius kept), in
every plane.  The radius comes from the x range only, also for non-square images.

STIR computes ``rim = int(max((image_radius - R) / vx', 0))`` with
``image_radius = vx' * nx / 2`` in its rescaled units (vx' = 1) and ``R`` the inner
ring radius in mm; that is 0 unless nx > 2 R (mm), so the rim is 0 in practice
(:func:`stir_rim`).

The kernels never apply this; the projector layer calls :func:`apply_cylindrical_fov`
on a copy of the input image before ``forward_chunk`` and on the back-projected
image after the last ``back_chunk``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import array_kind, array_module, is_torch
from ..errors import GeometryError, StirGpuError

__all__ = ["cylindrical_fov_mask", "stir_rim", "apply_cylindrical_fov"]


def _c_div(a: int, b: int) -> int:
    """C/C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def stir_rim(nx: int, inner_ring_radius: float) -> int:
    """The ``rim_truncation_image`` STIR 6.5's Parallelproj projector passes to
    ``truncate_rim`` (see the module docstring; 0 unless nx > 2 * inner_ring_radius)."""
    # STIR: image_radius = vx' * nx / 2 with vx' = 1 (rescaled units), R in mm, / vx' again
    return int(max(nx / 2 - float(inner_ring_radius), 0.0))


def cylindrical_fov_mask(image_info, rim: int = 0, strictly_less_than_radius: bool = True) -> np.ndarray:
    """(ny, nx) bool mask, True where STIR's ``truncate_rim(image, rim, strictly_less_than_radius)``
    keeps a voxel (with ``strictly_less_than_radius`` False, voxels at the radius are kept too:
    STIR's ``TruncateToCylindricalFOVImageProcessor`` option).

    ``image_info`` is a :class:`stirgpu.geometry.ImageInfo` (its ``shape`` and
    ``min_indices`` are used).
    """
    try:
        _, ny, nx = (int(n) for n in image_info.shape)
        _, ymin, xmin = (int(i) for i in image_info.min_indices)
    except (AttributeError, TypeError, ValueError) as e:
        raise GeometryError(f"image_info: expected stirgpu.geometry.ImageInfo ({e})") from None
    if int(rim) != rim or rim < 0:
        raise GeometryError(f"rim: expected a non-negative integer, got {rim!r}")
    xs, xe = xmin, xmin + nx - 1
    ys, ye = ymin, ymin + ny - 1
    xm, ym = _c_div(xs + xe, 2), _c_div(ys + ye, 2)
    r = float(_c_div(xe - xs, 2) - int(rim))
    y = np.arange(ys, ye + 1, dtype=np.int64)[:, None]
    x = np.arange(xs, xe + 1, dtype=np.int64)[None, :]
    distance_squared = (xm - x) ** 2 + (ym - y) ** 2
    return distance_squared < r * r if strictly_less_than_radius else distance_squared <= r * r


def apply_cylindrical_fov(image, mask: np.ndarray, out=None):
    """``image`` with the voxels outside ``mask`` (ny, nx) set to 0 (assigned, not multiplied,
    so a NaN or inf outside the FOV becomes 0 as in STIR).

    Returns a new array unless ``out`` is given (``out`` may be ``image`` itself to
    truncate in place, as STIR does to its back projection).  Works for numpy, cupy and
    torch arrays; the result lives where ``image`` lives.
    """
    mask = np.asarray(mask, dtype=bool)
    shape = tuple(getattr(image, "shape", ()))
    if len(shape) != 3 or mask.shape != shape[1:]:
        raise GeometryError(
            f"apply_cylindrical_fov: image shape {shape} and mask shape {mask.shape} "
            f"do not match ((nz, ny, nx) and (ny, nx))"
        )
    if out is not None and tuple(getattr(out, "shape", ())) != shape:
        raise GeometryError(
            f"apply_cylindrical_fov: out shape {tuple(getattr(out, 'shape', ()))} differs from image shape {shape}"
        )
    if array_kind(image) in ("numpy", "cupy"):
        xp: Any = array_module(image)
        if out is None:
            result = xp.array(image, copy=True)
        else:
            result = out
            if out is not image:
                xp.copyto(result, image)
        xp.copyto(result, 0, where=xp.asarray(~mask))
        return result
    if is_torch(image):
        import torch

        outside = torch.as_tensor(~mask, device=image.device)
        if out is None:
            result = image.clone()
        else:
            result = out
            if out is not image:
                result.copy_(image)
        result.masked_fill_(outside, 0)
        return result
    raise StirGpuError(f"apply_cylindrical_fov: unsupported array type {type(image).__name__}")
