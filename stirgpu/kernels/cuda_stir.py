"""CUDA kernels with STIR's numerics (``cuda/joseph_stir.cu``; the CPU reference is
:mod:`stirgpu.kernels.cpu_stir`).

The source is package data, compiled by :class:`cupy.RawModule` (NVRTC, ``--fmad=false``) on
first use and memoised per device; nothing happens at import.  Each chunk part's float32 tables
(:func:`stirgpu.kernels.stir_lors.stir_chunk_tables`, a few floats per view and tangential
position) are computed on the host and copied to the device on the current stream; the
kernels then compute every LOR's endpoints themselves.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from .cuda_compile import compiled_module

if TYPE_CHECKING:
    from .stir_api import DevicePart

__all__ = [
    "forward",
    "back",
    "endpoints",
    "fold",
    "transposed_accumulator",
    "pack_part",
    "upload_part",
    "launch",
    "part_bins",
    "frame_args",
    "axial_major",
    "lor_order",
    "order_option",
    "compile_options",
    "l2_cache_bytes",
]

#: threads per block of the STIR-numerics kernels
THREADS = 256


def order_option(axial_major: bool) -> str:
    """The compile option of the kernels' LOR order (``STIR_AXIAL_MAJOR`` in ``joseph_stir.cu``)."""
    return f"-DSTIR_AXIAL_MAJOR={int(axial_major)}"


def compile_options(axial_major: bool) -> tuple[str, ...]:
    """NVRTC's options for the STIR-numerics modules (these and the TOF ones) in one LOR order:
    no contraction of multiply-adds, whatever the source's intrinsics leave open."""
    return ("--std=c++17", "--fmad=false", order_option(axial_major))


@functools.lru_cache(maxsize=16)
def _kernel(device_id: int, name: str, axial_major: bool = False):
    return compiled_module(device_id, ("joseph_stir.cu",), compile_options(axial_major)).get_function(name)


@functools.lru_cache(maxsize=16)
def l2_cache_bytes(device_id: int) -> int:
    """The L2 cache size of GPU ``device_id``, in bytes."""
    import cupy as cp

    return int(cp.cuda.Device(device_id).attributes["L2CacheSize"])


def axial_major(kind: str, image_bytes: int, l2_bytes: int, tof: bool = False) -> bool:
    """Whether the kernels of ``kind`` (``"fwd"`` or ``"back"``) take a part's LORs axial
    position first (``joseph_stir.cu``): always for the non-TOF forward projection, else where
    the image (``image_bytes``) is larger than the GPU's L2 cache (``l2_bytes``).  Measured in
    docs/kernel-tuning.md: axial-major makes every non-TOF forward projection faster, and the
    back projections of an image larger than the L2 (the Quadra's); it makes those of an image
    that fits 2-5 % slower (the view-major lanes in flight share voxels), and the TOF forward of
    one 2 % slower."""
    if kind == "fwd" and not tof:
        return True
    return image_bytes > l2_bytes


def lor_order(kind: str, image, tof: bool = False) -> bool:
    """:func:`axial_major` for projections (TOF ones with ``tof``) of the device image ``image``
    on its GPU: the order the forward and back functions here and in ``cuda_stir_tof`` launch."""
    return axial_major(kind, int(image.nbytes), l2_cache_bytes(image.device.id), tof)


def pack_part(tables: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.int32, np.int32, np.int32]:
    """(T, H, nv, na, nt) of one part's host tables (``stir_lors.stir_chunk_tables``) in the
    layout of ``joseph_stir.cu``, on the host."""
    x1, y1, dx, dy, l1, l2, hit, m, mt = tables
    nv, nt = x1.shape
    host = np.concatenate([a.reshape(-1) for a in (x1, y1, dx, dy, l1, l2)] + [m, mt]).astype(np.float32)
    return host, np.ascontiguousarray(hit.astype(np.uint8).reshape(-1)), np.int32(nv), np.int32(len(m)), np.int32(nt)


def upload_part(tables: tuple[np.ndarray, ...]) -> DevicePart:
    """:func:`pack_part` of one part's host tables, on the current device."""
    import cupy as cp

    host, hit, nv, na, nt = pack_part(tables)
    return cp.asarray(host), cp.asarray(hit), nv, na, nt


def launch(kernel, n: int, args) -> None:
    if n:
        kernel(((n + THREADS - 1) // THREADS,), (THREADS,), args)


def part_bins(parts):
    """(tables, first bin, number of bins) of each part, bins one part after the other."""
    o = 0
    for tables in parts:
        k = int(tables[2]) * int(tables[3]) * int(tables[4])
        yield tables, o, k
        o += k


def frame_args(image, origin, voxel_size, rescale) -> tuple:
    return (
        *(np.int32(v) for v in image.shape),
        *(np.float32(v) for v in origin),
        *(np.float32(v) for v in voxel_size),
        np.float32(rescale),
    )


def forward(parts, image, origin, voxel_size, rescale, out) -> None:
    """``out`` (flat, the parts' bins one after the other) = STIR's forward projection of the
    device image ``image`` (float32, C order); ``parts``: :func:`upload_part` of each part."""
    kernel = _kernel(image.device.id, "fwd_stir", lor_order("fwd", image))
    n0, n1, n2, *frame = frame_args(image, origin, voxel_size, rescale)
    for tables, o, k in part_bins(parts):
        launch(kernel, k, (*tables, image, n0, n1, n2, *frame, out[o : o + k]))


def back(parts, values, image, origin, voxel_size, rescale, along_x=None) -> None:
    """Add STIR's back projection of flat ``values`` into the device image ``image``.  Walks
    along x add into ``along_x`` (:func:`transposed_accumulator`), which the caller folds into
    the image after its last call (:func:`fold`); without one, this call makes and folds its own."""
    import cupy as cp

    kernel = _kernel(image.device.id, "back_stir", lor_order("back", image))
    n0, n1, n2, *frame = frame_args(image, origin, voxel_size, rescale)
    own = along_x is None
    if own:
        along_x = transposed_accumulator(cp, image)
    for tables, o, k in part_bins(parts):
        launch(kernel, k, (*tables, values[o : o + k], image, along_x, n0, n1, n2, *frame))
    if own:
        fold(image, along_x)


def transposed_accumulator(xp, image):
    """The back projections' zeroed (z, x, y) accumulator of ``image``: walks along x add there
    (``stir_back_target`` in ``joseph_stir.cu``), and :func:`fold` adds it into the image."""
    nz, ny, nx = image.shape
    return xp.zeros((nz, nx, ny), np.float32)


def fold(image, accumulator) -> None:
    """Add the (z, x, y) ``accumulator`` into the (z, y, x) ``image``."""
    image += accumulator.transpose(0, 2, 1)


def endpoints(parts, rescale, device_id: int):
    """STIR's endpoints of every LOR of the parts, times ``rescale``: ``(start, end)``, each an
    (n, 3) float32 (z, y, x) array on GPU ``device_id`` in the parts' bin order -- what STIR's
    Parallelproj projector hands libparallelproj (its baseline in ``benchmarks/tof.py``)."""
    import cupy as cp

    kernel = _kernel(device_id, "endpoints_stir")
    n = sum(int(t[2]) * int(t[3]) * int(t[4]) for t in parts)
    start, end = cp.empty((n, 3), np.float32), cp.empty((n, 3), np.float32)
    for tables, o, k in part_bins(parts):
        launch(kernel, k, (*tables, np.float32(rescale), start[o : o + k], end[o : o + k]))
    return start, end
