"""Device memory the tiled kernels work in, made once and kept across chunks (and calls):
:class:`PreparedImage` (an image plus its two zero-framed layouts, read by the forward kernels)
and :class:`BackAccumulator` (an image plus the two zero-framed accumulators the back kernels
add into, folded into the image by :meth:`BackAccumulator.finish`); the padded layouts' shapes,
copies and fold, and the rule of when the tiled kernels fit the CUDA grid.
"""

from __future__ import annotations

import numpy as np

from ..arrays import import_cupy
from .cuda_arrays import as_cupy, check_array
from .cuda_compile import get_kernel
from .cuda_options import DEFAULT_OPTIONS, KernelOptions

__all__ = [
    "ImageWithWorkspace",
    "PreparedImage",
    "BackAccumulator",
    "prepare_image",
    "prepare_back_accumulator",
    "image_arg",
    "padded_shapes",
    "padded_voxels",
    "padded_copies",
    "scratch_accumulators",
    "combine_accumulators",
    "tiled_possible",
    "try_scratch",
    "GRID_YZ_LIMIT",
]

GRID_YZ_LIMIT = 65535


class ImageWithWorkspace:
    """A device image (``image``) plus two padded workspaces (``a``, ``b``) of the tiled
    kernels.  It carries the image's ``__cuda_array_interface__``, shape and dtype, so it can
    be passed wherever the image can."""

    def __init__(self, image, a, b, device_id: int):
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


class PreparedImage(ImageWithWorkspace):
    """An image on a device plus the zero-framed copies that the tiled kernels read,
    made once (:func:`prepare_image`) and reused by every forward projection of that
    image -- a projector sweeping many chunks saves one copy per chunk.

    It carries the image's ``__cuda_array_interface__``, so it can be passed wherever the
    image can (including :func:`stirgpu.kernels.forward_chunk`).  It is a snapshot:
    prepare again after changing the image.
    """

    def __init__(self, source, image, a, b, device_id: int):
        super().__init__(image, a, b, device_id)
        self.source = source


def prepare_image(image, options: KernelOptions | None = None) -> PreparedImage:
    """Copy ``image`` ((nz, ny, nx) float32 on a CUDA device) into the layouts of the tiled
    forward kernels (two images of (n+2)^3-ish float32 of device memory)."""
    cp = import_cupy()
    options = options or DEFAULT_OPTIONS
    if isinstance(image, PreparedImage):
        return image
    img = as_cupy(cp, "image", image)
    check_array("image", img, ndim=3)
    dev = int(img.device.id)
    with cp.cuda.Device(dev):
        a, b = padded_copies(cp, dev, options, img)
    return PreparedImage(image, img, a, b, dev)


class BackAccumulator(ImageWithWorkspace):
    """A device image plus the two zero-framed accumulators of the tiled back projection,
    kept across many :func:`back_chunk` calls (:func:`prepare_back_accumulator`).

    Without it, each tiled back projection allocates, zeroes and folds two image-sized
    accumulators, which only pays for large chunks (``auto`` then picks the slower one-LOR-
    per-thread kernels for small ones).  A projector sweeping many chunks keeps one of these
    per device and calls :meth:`finish` once: every chunk gets the tiled kernels.  It carries
    the image's ``__cuda_array_interface__``, so it can be passed wherever ``out_image`` can.
    Until :meth:`finish`, the image does not yet hold what was added through the accumulators.
    """

    def finish(self, options: KernelOptions | None = None, reuse: bool = True, overwrite: bool = False) -> None:
        """Add the accumulators into the image (on the current stream) -- or, with
        ``overwrite``, replace the image's values by them (the image need not have been
        initialised; without accumulators, i.e. ``a`` None, the chunks added into the image
        itself, which is then left as it is); then, with ``reuse``, zero them for more
        chunks, else let them go back to the memory pool (the last use)."""
        if self.a is None:
            return
        cp = import_cupy()
        with cp.cuda.Device(self.device_id):
            combine_accumulators(
                self.device_id, options or DEFAULT_OPTIONS, self.image, self.a, self.b, add=not overwrite
            )
            if reuse:
                self.a.fill(0)
                self.b.fill(0)
            else:
                self.a = self.b = None  # back to the memory pool; the image is complete


def prepare_back_accumulator(out_image, options: KernelOptions | None = None, scratch=None) -> BackAccumulator:
    """Wrap ``out_image`` ((nz, ny, nx) float32 on a CUDA device) with the accumulators of the
    tiled back projection (two zeroed images of (n+2)^3-ish float32 of device memory; none
    when the options or the image's size rule the tiled kernels out).  ``scratch``: the
    ``(a, b)`` of an earlier accumulator of an image of this shape on this device, zeroed
    (on the current stream) and used again instead of new memory -- a caller running many
    back projections keeps them; anything else is ignored."""
    cp = import_cupy()
    options = options or DEFAULT_OPTIONS
    if isinstance(out_image, BackAccumulator):
        return out_image
    img = as_cupy(cp, "out_image", out_image)
    check_array("out_image", img, ndim=3)
    dev = int(img.device.id)
    a = b = None
    if options.variant != "simple" and tiled_possible(img.shape):
        with cp.cuda.Device(dev):
            if _fits_accumulators(scratch, img.shape, dev):
                a, b = scratch
                stream = cp.cuda.get_current_stream()
                for x in (a, b):
                    x.data.memset_async(0, x.nbytes, stream)
            else:
                a, b = scratch_accumulators(cp, img.shape)
    return BackAccumulator(img, a, b, dev)


def _fits_accumulators(pair, shape, device_id: int) -> bool:
    """Whether ``pair`` is the two accumulators of an image of ``shape`` on that device."""
    if not (isinstance(pair, tuple) and len(pair) == 2):
        return False
    return all(
        getattr(x, "shape", None) == w
        and getattr(x, "dtype", None) == np.float32
        and x.flags.c_contiguous
        and x.device.id == device_id
        for x, w in zip(pair, padded_shapes(shape), strict=True)
    )


def image_arg(cp, image):
    """(cupy image, prepared copies or None, the object whose kind the result takes)."""
    if isinstance(image, PreparedImage):
        return image.image, (image.a, image.b), image.source
    img = as_cupy(cp, "image", image)
    return img, None, image


def padded_voxels(shape) -> int:
    return (shape[0] + 2) * (shape[1] + 2) * (shape[2] + 2)


def tiled_possible(shape) -> bool:
    return shape[0] + 2 <= GRID_YZ_LIMIT and (shape[1] + 31) // 32 + 1 <= GRID_YZ_LIMIT


def tile_grid(nz: int, ny: int, nx: int) -> tuple[int, int, int]:
    return ((nx + 31) // 32, (ny + 31) // 32, nz)


def padded_copies(cp, dev: int, options: KernelOptions, image):
    """Layouts A (z, y, x) and B (z, x, y) of ``image`` with a one-voxel zero frame."""
    nz, ny, nx = image.shape
    a, b = (cp.empty(s, dtype=cp.float32) for s in padded_shapes(image.shape))
    dims = (np.int32(nz), np.int32(ny), np.int32(nx))
    get_kernel(dev, options, "pad_ab")(tile_grid(nz + 2, ny + 2, nx + 2), (32, 8), (image, a, b) + dims)
    return a, b


def padded_shapes(shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Shapes of the tiled kernels' layouts A (z, y, x) and B (z, x, y), each with a one-voxel frame."""
    nz, ny, nx = (int(n) for n in shape)
    return (nz + 2, ny + 2, nx + 2), (nz + 2, nx + 2, ny + 2)


def scratch_accumulators(cp, shape):
    return tuple(cp.zeros(s, dtype=cp.float32) for s in padded_shapes(shape))


def combine_accumulators(dev: int, options: KernelOptions, out_image, acc_a, acc_b, add: bool = True) -> None:
    """``out_image`` += (``add``) or = the two accumulators, in the image's layout."""
    nz, ny, nx = out_image.shape
    get_kernel(dev, options, "combine_back")(
        tile_grid(nz, ny, nx),
        (32, 8),
        (out_image, acc_a, acc_b, np.int32(nz), np.int32(ny), np.int32(nx), np.int32(bool(add))),
    )


def try_scratch(cp, make, options: KernelOptions):
    """Allocate the tiled path's scratch; in ``auto`` mode fall back to ``simple`` (None)
    when the device is out of memory."""
    try:
        return make()
    except cp.cuda.memory.OutOfMemoryError:
        if options.variant == "tiled":
            raise
        return None
