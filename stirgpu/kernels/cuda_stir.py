"""CUDA kernels with STIR's numerics (``cuda/joseph_stir.cu``; the CPU reference is
:mod:`stirgpu.kernels.cpu_stir`).

The source is package data, compiled by :class:`cupy.RawModule` (NVRTC, ``--fmad=false``) on
first use and memoised per device; nothing happens at import.  Each chunk part's float32 tables
(:func:`stirgpu.kernels.stir_lors.stir_chunk_tables`, a few floats per view and tangential
position) are computed on the host, and a chunk's are copied to the device together, with a
directory of its parts (:func:`pack_parts`), on the current stream; the kernels then compute
every LOR's endpoints themselves.  A chunk is one launch, whatever its number of parts.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from .cuda_compile import compiled_module

__all__ = [
    "forward",
    "back",
    "endpoints",
    "fold",
    "transposed_accumulator",
    "PackedParts",
    "pack_parts",
    "upload_parts",
    "launch",
    "frame_args",
    "axial_major",
    "lor_order",
    "order_option",
    "compile_options",
    "l2_cache_bytes",
]

#: threads per block of the STIR-numerics kernels
THREADS = 256
#: int64 fields of a part's row in the parts' directory (``STIR_PART_FIELDS`` in ``joseph_stir.cu``)
PART_FIELDS = 8


def order_option(axial_major: bool) -> str:
    """The compile option of the kernels' LOR order (``STIR_AXIAL_MAJOR`` in ``joseph_stir.cu``)."""
    return f"-DSTIR_AXIAL_MAJOR={int(axial_major)}"


def compile_options(axial_major: bool) -> tuple[str, ...]:
    """NVRTC's options for the STIR-numerics modules (these and the TOF ones) in one LOR order:
    no contraction of multiply-adds, whatever the source's intrinsics leave open, and the launches'
    threads per block (the kernels' launch bounds)."""
    return ("--std=c++17", "--fmad=false", order_option(axial_major), f"-DSTIR_THREADS={THREADS}")


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


def _pack_part(tables: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """(T, H, nv, na, nt) of one part's host tables (``stir_lors.stir_chunk_tables``) in the
    layout of ``joseph_stir.cu``."""
    x1, y1, dx, dy, l1, l2, hit, m, mt = tables
    nv, nt = x1.shape
    host = np.concatenate([a.reshape(-1) for a in (x1, y1, dx, dy, l1, l2)] + [m, mt]).astype(np.float32)
    return host, hit.astype(np.uint8).reshape(-1), int(nv), len(m), int(nt)


class PackedParts(NamedTuple):
    """A chunk's parts as its kernels take them (host or device arrays): the parts' tables
    concatenated (``T`` float32, ``H`` uint8), their directory (``PART_FIELDS`` int64 per part:
    offsets into ``T`` and ``H``, nv, na, nt, first block, first LOR), the number of parts, the
    launch's blocks and the chunk's LORs."""

    T: Any
    H: Any
    directory: Any
    n_parts: np.int32
    blocks: int
    num_lors: int

    @property
    def args(self) -> tuple:
        """The kernels' first arguments (``STIR_PARTS_ARGS``)."""
        return self.T, self.H, self.directory, self.n_parts


def pack_parts(parts_tables) -> PackedParts:
    """The host :class:`PackedParts` of a chunk's parts' host tables (``stir_lors.stir_chunk_tables``
    of each part, in the order of the chunk's bins): each part takes whole blocks of one launch."""
    packed = [_pack_part(t) for t in parts_tables]
    directory = np.zeros((len(packed), PART_FIELDS), np.int64)
    t_offset = h_offset = block = lor = 0
    for row, (host, hit, nv, na, nt) in zip(directory, packed, strict=True):
        row[:7] = t_offset, h_offset, nv, na, nt, block, lor
        t_offset, h_offset = t_offset + host.size, h_offset + hit.size
        block += -(-nv * na * nt // THREADS)
        lor += nv * na * nt
    T = np.concatenate([p[0] for p in packed]) if packed else np.zeros(1, np.float32)
    H = np.concatenate([p[1] for p in packed]) if packed else np.zeros(1, np.uint8)
    return PackedParts(T, H, directory.reshape(-1), np.int32(len(packed)), block, lor)


def upload_parts(parts_tables) -> PackedParts:
    """:func:`pack_parts` of a chunk's parts' host tables, on the current device."""
    import cupy as cp

    host = pack_parts(parts_tables)
    return host._replace(T=cp.asarray(host.T), H=cp.asarray(host.H), directory=cp.asarray(host.directory))


def launch(kernel, parts: PackedParts, args) -> None:
    """Launch ``kernel`` over all LORs of ``parts`` (``args`` start with ``parts.args``)."""
    if parts.blocks:
        kernel((parts.blocks,), (THREADS,), args)


def frame_args(image, origin, voxel_size, rescale) -> tuple:
    return (
        *(np.int32(v) for v in image.shape),
        *(np.float32(v) for v in origin),
        *(np.float32(v) for v in voxel_size),
        np.float32(rescale),
    )


def forward(parts: PackedParts, image, origin, voxel_size, rescale, out) -> None:
    """``out`` (flat, the parts' bins one after the other) = STIR's forward projection of the
    device image ``image`` (float32, C order); ``parts``: :func:`upload_parts` of the chunk."""
    kernel = _kernel(image.device.id, "fwd_stir", lor_order("fwd", image))
    n0, n1, n2, *frame = frame_args(image, origin, voxel_size, rescale)
    launch(kernel, parts, (*parts.args, image, n0, n1, n2, *frame, out))


def back(parts: PackedParts, values, image, origin, voxel_size, rescale, along_x=None) -> None:
    """Add STIR's back projection of flat ``values`` into the device image ``image``.  Walks
    along x add into ``along_x`` (:func:`transposed_accumulator`), which the caller folds into
    the image after its last call (:func:`fold`); without one, this call makes and folds its own."""
    import cupy as cp

    kernel = _kernel(image.device.id, "back_stir", lor_order("back", image))
    n0, n1, n2, *frame = frame_args(image, origin, voxel_size, rescale)
    own = along_x is None
    if own:
        along_x = transposed_accumulator(cp, image)
    launch(kernel, parts, (*parts.args, values, image, along_x, n0, n1, n2, *frame))
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


def endpoints(parts: PackedParts, rescale, device_id: int):
    """STIR's endpoints of every LOR of the parts, times ``rescale``: ``(start, end)``, each an
    (n, 3) float32 (z, y, x) array on GPU ``device_id`` in the parts' bin order -- what STIR's
    Parallelproj projector hands libparallelproj (its baseline in ``benchmarks/tof.py``)."""
    import cupy as cp

    kernel = _kernel(device_id, "endpoints_stir")
    start, end = cp.empty((parts.num_lors, 3), np.float32), cp.empty((parts.num_lors, 3), np.float32)
    launch(kernel, parts, (*parts.args, np.float32(rescale), start, end))
    return start, end
