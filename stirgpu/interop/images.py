"""Images in and out of the projectors: numpy, cupy, torch (DLPack), stirgpu and ``stir`` images.

An image is a (z, y, x) float32 array, x fastest.  Accepted as input:

* numpy arrays (converted to C-contiguous float32 if they are not already);
* CUDA arrays: cupy, or anything with ``__cuda_array_interface__`` / a CUDA DLPack
  device (torch) -- kept on their GPU, viewed through cupy without a copy;
* torch CPU tensors (through DLPack, no copy);
* :class:`stirgpu.formats.VoxelsOnCartesianGrid` (its live array) and real
  ``stir.FloatVoxelsOnCartesianGrid`` objects or look-alikes (``as_array()``).

Results are written back the same way (:func:`store_image`): assigned into numpy /
cupy / torch arrays, into a stirgpu image's array, or with ``fill()`` for ``stir`` images.
``torch`` and ``cupy`` are imported only when such an object is seen.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays import as_cupy_view, is_cupy, is_torch, on_cuda
from ..errors import GeometryError, StirGpuError

__all__ = ["as_image_array", "is_cuda_array", "image_info_of", "store_image", "version_stamp", "coordinate_triple"]


def is_cuda_array(obj: Any) -> bool:
    """True for arrays living in CUDA memory (cupy, torch on a GPU, CUDA-array-interface objects,
    CUDA DLPack): :func:`stirgpu.arrays.on_cuda`."""
    return on_cuda(obj)


def as_image_array(image: Any, shape: tuple[int, int, int] | None = None, name: str = "image"):
    """The values of ``image`` as a C-contiguous float32 (z, y, x) array: numpy on the host,
    cupy on a GPU.  No copy where none is needed.  ``shape`` is checked when given."""
    if image is None:
        raise StirGpuError(f"{name}: no image given")
    if isinstance(image, np.ndarray):
        arr = np.ascontiguousarray(image, dtype=np.float32)
    elif is_cuda_array(image):
        import cupy

        arr = cupy.ascontiguousarray(as_cupy_view(image), dtype=cupy.float32)
    elif is_torch(image):
        arr = np.ascontiguousarray(np.from_dlpack(image.detach()), dtype=np.float32)
    elif hasattr(image, "array") and isinstance(image.array, np.ndarray):
        arr = np.ascontiguousarray(image.array, dtype=np.float32)  # stirgpu image: live array
    elif hasattr(image, "as_array"):
        arr = np.ascontiguousarray(np.asarray(image.as_array()), dtype=np.float32)
    else:
        raise StirGpuError(
            f"{name}: expected a numpy/cupy/torch array or an image with as_array(), not {type(image).__name__}"
        )
    if arr.ndim != 3:
        raise GeometryError(f"{name}: expected a 3-D (z, y, x) image, got shape {tuple(arr.shape)}")
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise GeometryError(
            f"{name}: shape {tuple(arr.shape)} differs from the projector's image {tuple(shape)} (z, y, x)"
        )
    return arr


def coordinate_triple(c: Any, cast=float) -> tuple:
    """(z, y, x) from a tuple/array or from a STIR ``BasicCoordinate`` (indexed 1..3)."""
    if isinstance(c, (tuple, list, np.ndarray)):
        vals = tuple(c)
    else:
        try:
            vals = (c[1], c[2], c[3])  # STIR coordinates are 1-based
        except (TypeError, IndexError, KeyError):
            vals = tuple(c)
    if len(vals) != 3:
        raise GeometryError(f"expected 3 coordinates (z, y, x), got {vals!r}")
    return tuple(cast(v) for v in vals)


def image_info_of(image: Any, name: str = "image"):
    """The :class:`~stirgpu.geometry.ImageInfo` of a stirgpu or ``stir`` image (for the latter,
    :func:`~stirgpu.interop.stir_geometry.image_info_from_stir`); None for plain arrays."""
    from ..geometry import ImageInfo

    info = getattr(image, "info", None)
    if isinstance(info, ImageInfo):
        return info
    needed = ("get_voxel_size", "get_origin", "get_lengths", "get_min_indices")
    if all(hasattr(image, n) for n in needed):
        from .stir_geometry import image_info_from_stir

        return image_info_from_stir(image, name)
    return None


def version_stamp(image: Any):
    """Something that changes whenever ``image`` is modified in place, where the object keeps one
    (torch's ``_version``, a ``version`` attribute); None when there is no such thing
    (numpy, cupy), so a cached copy of it can never be trusted."""
    v = getattr(image, "_version", None) if is_torch(image) else getattr(image, "version", None)
    return None if v is None or callable(v) else v


def store_image(image_out: Any, values: Any, accumulate: bool = False) -> Any:
    """Put (or add, with ``accumulate``) ``values`` (numpy, or cupy) into ``image_out``; returns
    ``image_out``.  GPU values go into a cupy ``image_out`` without visiting host memory."""
    if is_cupy(values):
        if is_cupy(image_out):
            import cupy

            _check_shape(image_out.shape, values.shape)
            with cupy.cuda.Device(image_out.device.id):
                v = values if values.device.id == image_out.device.id else values.copy()  # copy: to this GPU
                if accumulate:
                    image_out += v
                else:
                    image_out[...] = v
            return image_out
        values = values.get()
    values = np.asarray(values, dtype=np.float32)
    if isinstance(image_out, np.ndarray):
        _check_shape(image_out.shape, values.shape)
        if accumulate:
            image_out += values
        else:
            image_out[...] = values
    elif is_cupy(image_out):
        import cupy

        _check_shape(image_out.shape, values.shape)
        with cupy.cuda.Device(image_out.device.id):
            v = cupy.asarray(values)
            if accumulate:
                image_out += v
            else:
                image_out[...] = v
    elif is_torch(image_out):
        import torch

        _check_shape(tuple(image_out.shape), values.shape)
        v = torch.from_numpy(values).to(device=image_out.device, dtype=image_out.dtype)
        with torch.no_grad():
            if accumulate:
                image_out.add_(v)
            else:
                image_out.copy_(v)
    elif hasattr(image_out, "array") and isinstance(image_out.array, np.ndarray):
        _check_shape(image_out.array.shape, values.shape)
        if accumulate:
            image_out.array[...] += values
        else:
            image_out.array[...] = values
    elif hasattr(image_out, "fill") and hasattr(image_out, "as_array"):
        # STIR images: fill() takes a numpy array of the image's size straight (far faster
        # than the .flat iterator); the current values are read only to add to them
        if accumulate or not hasattr(image_out, "get_lengths"):
            current = np.asarray(image_out.as_array(), dtype=np.float32)
            shape = current.shape
        else:
            shape = coordinate_triple(image_out.get_lengths(), int)
        _check_shape(shape, values.shape)
        new = current + values if accumulate else values
        image_out.fill(np.ascontiguousarray(new, dtype=np.float32))
    else:
        raise StirGpuError(
            f"image_out: cannot write into a {type(image_out).__name__} (expected a "
            f"numpy/cupy/torch array or an image with as_array()/fill())"
        )
    return image_out


def _check_shape(have, want) -> None:
    if tuple(have) != tuple(want):
        raise GeometryError(f"image_out: shape {tuple(have)} differs from the projector's image {tuple(want)}")
