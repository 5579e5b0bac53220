"""The image as the forward kernels read it, made once per image and kept: :class:`PreparedImage`,
the image and its two zero-framed copies (``frame.cu``): A (z, y, x) and B (z, x, y), each with a
one-voxel frame of zeros, read by the framed walks of ``joseph.cu`` (no bounds checks; walks along
x read B, where neighbouring LORs read contiguous voxels).
"""

from __future__ import annotations

import numpy as np

from ...arrays import import_cupy
from .arrays import as_cupy, check_array
from .compile import compiled_module

__all__ = ["PreparedImage", "prepare_image", "image_arg", "framed_shapes", "framed_copies", "framed_copies_fit"]

#: CUDA's limit on a grid's y and z sizes (the copy kernel's grid: tiles of y, planes)
GRID_YZ_LIMIT = 65535
#: the copy kernel's tile (FRAME_TILE x FRAME_ROWS threads per block in frame.cu)
_TILE, _ROWS = 32, 8


class PreparedImage:
    """A device image (``image``) and its zero-framed copies (``a``, ``b``; None where the image
    is too large for them, :func:`framed_copies_fit`), made once (:func:`prepare_image`) and
    read by every forward projection of that image.  It carries the image's
    ``__cuda_array_interface__``, shape and dtype, so it can be passed wherever the image can.
    It is a snapshot: prepare again after changing the image.  ``source``: what was prepared (a
    result takes its kind: torch in, torch out)."""

    def __init__(self, source, image, a, b, device_id: int):
        self.source = source
        self.image = image
        self.a = a
        self.b = b
        self.device_id = device_id

    @property
    def __cuda_array_interface__(self):
        return self.image.__cuda_array_interface__

    @property
    def shape(self):
        return self.image.shape

    @property
    def dtype(self):
        return self.image.dtype

    @property
    def framed(self):
        """The copies ``(a, b)``, or None."""
        return (self.a, self.b) if self.a is not None else None


def prepare_image(image) -> PreparedImage:
    """``image`` ((nz, ny, nx) float32 on a CUDA device) with its framed copies (two images of
    (n + 2)^3-ish float32 of device memory), made on the current stream."""
    cp = import_cupy()
    if isinstance(image, PreparedImage):
        return image
    img = as_cupy(cp, "image", image)
    check_array("image", img, ndim=3)
    dev = int(img.device.id)
    a = b = None
    if framed_copies_fit(img.shape):
        with cp.cuda.Device(dev):
            a, b = framed_copies(cp, img)
    return PreparedImage(image, img, a, b, dev)


def image_arg(cp, image):
    """(cupy image, its framed copies or None, the object whose kind the result takes)."""
    if isinstance(image, PreparedImage):
        return image.image, image.framed, image.source
    return as_cupy(cp, "image", image), None, image


def framed_shapes(shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Shapes of the framed copies A (z, y, x) and B (z, x, y)."""
    nz, ny, nx = (int(n) for n in shape)
    return (nz + 2, ny + 2, nx + 2), (nz + 2, nx + 2, ny + 2)


def framed_copies_fit(shape) -> bool:
    """Whether an image of ``shape`` has framed copies: the kernels index their voxels with 32-bit
    offsets (``StirFramed`` in ``joseph.cu``), and the copy kernel's grid has a block row per
    framed plane and tile of y."""
    nz, ny, nx = (int(n) + 2 for n in shape)
    return nz * ny * nx < 2**31 and nz <= GRID_YZ_LIMIT and -(-ny // _TILE) <= GRID_YZ_LIMIT


def framed_copies(cp, image):
    """The framed copies A (z, y, x) and B (z, x, y) of the cupy ``image`` (on its device, the
    current one), made on the current stream."""
    nz, ny, nx = image.shape
    a, b = (cp.empty(s, dtype=cp.float32) for s in framed_shapes(image.shape))
    kernel = compiled_module(int(image.device.id), ("frame.cu",), ("--std=c++17",)).get_function("framed_copies")
    grid = (-(-(nx + 2) // _TILE), -(-(ny + 2) // _TILE), nz + 2)
    kernel(grid, (_TILE, _ROWS), (image, a, b, np.int32(nz), np.int32(ny), np.int32(nx)))
    return a, b
