"""The Joseph projector on the GPU (``cuda/joseph.cu``; the CPU reference is :mod:`.cpu`, whose
numbers it computes: forward projections bit for bit, back projections up to the order of float32
additions).

The source is package data, compiled by :class:`cupy.RawModule` (NVRTC, ``--fmad=false``) on
first use and memoised per device; nothing happens at import.  The chunk kernels compute every
LOR's endpoints themselves from small float32 tables (:mod:`.lors`): the geometry's transaxial
tables (a few floats per view and tangential position, which every segment shares), packed once
per device (:func:`transaxial_on_device`), and per chunk part its axial tables and views, with a
directory of the parts (:func:`pack_parts`), copied on the current stream.  A chunk is one
launch, whatever its number of parts.  The explicit-endpoint kernels (:func:`joseph_forward`,
:func:`joseph_back`) read (N, 3) float32 arrays, one thread per LOR.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np

from ...arrays import import_cupy
from ...errors import GeometryError
from ..cuda.arrays import as_cupy, check_array, like_input, one_device
from ..cuda.compile import compiled_module
from ..cuda.images import framed_copies_fit, image_arg
from .lors import TransaxialTables, axial_tables, stir_part_geometry
from .slabs import slab_planes

__all__ = [
    "forward",
    "back",
    "back_slab_planes",
    "endpoints",
    "fold",
    "transposed_accumulator",
    "PackedParts",
    "PartTables",
    "TransaxialPacking",
    "part_tables",
    "pack_transaxial",
    "host_transaxial",
    "transaxial_on_device",
    "pack_parts",
    "upload_parts",
    "launch",
    "frame_args",
    "joseph_forward",
    "joseph_back",
    "axial_major",
    "lor_order",
    "order_option",
    "compile_options",
    "l2_cache_bytes",
]

#: threads per block of the Joseph kernels
THREADS = 256
#: int64 fields of a part's row in the parts' directory (``STIR_PART_FIELDS`` in ``joseph.cu``)
PART_FIELDS = 12


def order_option(axial_major: bool) -> str:
    """The compile option of the kernels' LOR order (``STIR_AXIAL_MAJOR`` in ``joseph.cu``)."""
    return f"-DSTIR_AXIAL_MAJOR={int(axial_major)}"


def compile_options(axial_major: bool) -> tuple[str, ...]:
    """NVRTC's options for the Joseph modules (these and the TOF ones) in one LOR order:
    no contraction of multiply-adds, whatever the source's intrinsics leave open, and the launches'
    threads per block (the kernels' launch bounds)."""
    return ("--std=c++17", "--fmad=false", order_option(axial_major), f"-DSTIR_THREADS={THREADS}")


@functools.lru_cache(maxsize=16)
def _kernel(device_id: int, name: str, axial_major: bool = False):
    return compiled_module(device_id, ("joseph.cu",), compile_options(axial_major)).get_function(name)


@functools.lru_cache(maxsize=16)
def l2_cache_bytes(device_id: int) -> int:
    """The L2 cache size of GPU ``device_id``, in bytes."""
    cp = import_cupy()

    return int(cp.cuda.Device(device_id).attributes["L2CacheSize"])


def axial_major(kind: str, image_bytes: int, l2_bytes: int, tof: bool = False) -> bool:
    """Whether the kernels of ``kind`` (``"fwd"`` or ``"back"``) take a part's LORs axial
    position first (``joseph.cu``): always for non-TOF projections, and for TOF ones where
    the image (``image_bytes``) is larger than the GPU's L2 cache (``l2_bytes``).  Measured in
    docs/kernel-tuning.md: axial-major makes every non-TOF projection as fast or faster (the
    back projection's warp sums made view-major no longer the better order for an image that
    fits the L2), and the TOF projections of an image larger than the L2; the TOF forward of
    one that fits it is 2 % slower."""
    if not tof:
        return True
    return image_bytes > l2_bytes


def lor_order(kind: str, image, tof: bool = False) -> bool:
    """:func:`axial_major` for projections (TOF ones with ``tof``) of the device image ``image``
    on its GPU: the order the forward and back functions here and in :mod:`stirgpu.kernels.tof.cuda`
    launch."""
    return axial_major(kind, int(image.nbytes), l2_cache_bytes(image.device.id), tof)


class PartTables(NamedTuple):
    """A chunk part as the kernels index it: its STIR geometry
    (:func:`~stirgpu.kernels.joseph.lors.stir_part_geometry`, which names its transaxial set), its
    views (rows of that set, int64) and its axial tables ``m`` and ``mt``
    (:func:`~stirgpu.kernels.joseph.lors.axial_tables`)."""

    geometry: Any
    views: np.ndarray
    m: np.ndarray
    mt: np.ndarray


def part_tables(proj_data_info, chunk_tables) -> PartTables:
    """The :class:`PartTables` of one :class:`~stirgpu.geometry.ChunkTables` part."""
    g = stir_part_geometry(proj_data_info, chunk_tables)
    return PartTables(g, np.asarray(chunk_tables.views, np.int64), *axial_tables(g))


class TransaxialPacking(NamedTuple):
    """Transaxial sets as the kernels take them (host or device arrays): ``X`` (float32, six
    ``[view][tangential]`` tables per set), ``H`` (uint8, ``[view][tangential]`` per set) and, by
    set key (``TransaxialTables.key``), the set's offsets into them and its number of views."""

    X: Any
    H: Any
    place: dict[tuple, tuple[int, int, int]]


def pack_transaxial(sets: dict) -> TransaxialPacking:
    """The host :class:`TransaxialPacking` of complete transaxial sets
    (``TransaxialTables.complete_sets``), one after the other."""
    place: dict[tuple, tuple[int, int, int]] = {}
    xs: list[np.ndarray] = []
    hs: list[np.ndarray] = []
    x_offset = h_offset = 0
    for key, (x1, y1, dx, dy, l1, l2, hit) in sets.items():
        xs += [a.reshape(-1) for a in (x1, y1, dx, dy, l1, l2)]
        hs.append(hit.reshape(-1).astype(np.uint8))
        place[key] = (x_offset, h_offset, int(hit.shape[0]))
        x_offset, h_offset = x_offset + 6 * hit.size, h_offset + hit.size
    X = np.concatenate(xs).astype(np.float32, copy=False) if xs else np.zeros(1, np.float32)
    H = np.concatenate(hs) if hs else np.zeros(1, np.uint8)
    return TransaxialPacking(X, H, place)


def host_transaxial(transaxial: TransaxialTables, parts) -> TransaxialPacking:
    """The host packing of every complete set of ``transaxial``, those of ``parts``
    (:class:`PartTables`) completed first."""
    for p in parts:
        transaxial.complete(p.geometry)
    return pack_transaxial(transaxial.complete_sets())


def transaxial_on_device(transaxial: TransaxialTables, parts, device_id: int) -> TransaxialPacking:
    """The transaxial sets of ``parts`` on GPU ``device_id`` (the current device), packed and
    copied once and kept in ``transaxial.device_packings``; packed again, with every set made so
    far, when a part needs a set the kept packing lacks.  The copy is complete on return, so the
    kernels of any stream may read it."""
    cp = import_cupy()

    with transaxial.lock:
        got = transaxial.device_packings.get(device_id)
        if not isinstance(got, TransaxialPacking) or any(transaxial.key(p.geometry) not in got.place for p in parts):
            host = host_transaxial(transaxial, parts)
            got = host._replace(X=cp.asarray(host.X), H=cp.asarray(host.H))
            cp.cuda.get_current_stream().synchronize()
            transaxial.device_packings[device_id] = got
        return got


class PackedParts(NamedTuple):
    """A chunk's parts as its kernels take them (host or device arrays): the transaxial sets
    (``X``, ``H``: :class:`TransaxialPacking`), the parts' axial tables concatenated (``A``
    float32), their directory (``PART_FIELDS`` int64 per part: offsets into ``X``, ``H``, ``A``
    and the directory, sizes, first block, first LOR; then each part's views), the number of
    parts, the launch's blocks and the chunk's LORs."""

    X: Any
    H: Any
    A: Any
    directory: Any
    n_parts: np.int32
    blocks: int
    num_lors: int
    #: the directory on the host (where ``directory`` is a device copy of it)
    host_directory: Any = None

    @property
    def args(self) -> tuple:
        """The kernels' first arguments (``STIR_PARTS_ARGS``)."""
        return self.X, self.H, self.A, self.directory, self.n_parts


def pack_parts(parts, packing: TransaxialPacking) -> PackedParts:
    """The :class:`PackedParts` of a chunk's parts (:class:`PartTables`, in the order of the
    chunk's bins) with their sets in ``packing`` (its arrays are taken as they are; ``A`` and the
    directory are host arrays): each part takes whole blocks of one launch."""
    rows = np.zeros((len(parts), PART_FIELDS), np.int64)
    view_offset = rows.size
    a_offset = block = lor = 0
    for row, p in zip(rows, parts, strict=True):
        x_offset, h_offset, n_views = packing.place[TransaxialTables.key(p.geometry)]
        nv, na, nt = len(p.views), len(p.m), len(p.mt)
        # (the launch runs all the part's threads: the last two fields)
        row[:] = x_offset, h_offset, nv, na, nt, block, lor, a_offset, view_offset, n_views, 0, nv * na * nt
        a_offset, view_offset = a_offset + na + nt, view_offset + nv
        block += -(-nv * na * nt // THREADS)
        lor += nv * na * nt
    A = np.concatenate([np.zeros(0, np.float32)] + [a for p in parts for a in (p.m, p.mt)]).astype(np.float32)
    A = A if A.size else np.zeros(1, np.float32)
    directory = np.concatenate([rows.reshape(-1)] + [p.views for p in parts])
    return PackedParts(packing.X, packing.H, A, directory, np.int32(len(parts)), block, lor, directory)


def upload_parts(parts, transaxial: TransaxialTables) -> PackedParts:
    """:func:`pack_parts` on the current device: the sets there (:func:`transaxial_on_device`),
    the axial tables and the directory copied on the current stream."""
    cp = import_cupy()

    host = pack_parts(parts, transaxial_on_device(transaxial, parts, cp.cuda.Device().id))
    return host._replace(A=cp.asarray(host.A), directory=cp.asarray(host.directory))


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


def forward(parts: PackedParts, image, origin, voxel_size, rescale, out, framed=None) -> None:
    """``out`` (flat, the parts' bins one after the other) = the forward projection of the device
    image ``image`` (float32, C order); ``parts``: :func:`upload_parts` of the chunk.  ``framed``:
    the image's zero-framed copies ``(A, B)`` (:func:`stirgpu.kernels.cuda.images.prepare_image`),
    which the kernel reads where a walk stays inside them -- the same numbers, read in fewer and
    unchecked loads (docs/kernel-tuning.md, "The framed forward walk"); without them every walk
    reads ``image`` with bounds checks."""
    kernel = _kernel(image.device.id, "fwd_stir", lor_order("fwd", image))
    n0, n1, n2, *frame = frame_args(image, origin, voxel_size, rescale)
    a, b = _framed_args(framed, image.shape)
    launch(kernel, parts, (*parts.args, image, a, b, n0, n1, n2, *frame, out))


def _framed_args(framed, shape) -> tuple:
    """The kernels' framed-copy arguments: the copies, or two null pointers."""
    null = np.uint64(0)
    return framed if framed is not None and framed_copies_fit(shape) else (null, null)


def back_slab_planes(image, spread_views: bool) -> int | None:
    """Planes per slab launch of a back projection into the device image ``image``
    (:func:`stirgpu.kernels.joseph.slabs.slab_planes` on its GPU's L2 cache) of a chunk whose
    parts' views are ``spread_views`` (a subset's: not runs of neighbouring views), or None for
    one launch over the whole image.  Slabs only for spread views: on a Quadra (``benchmarks/
    back_slabs.py``, H200) they make a subset's back projection 1.39x faster, and a chunk of
    runs of 100 views 0.91x, whose one launch keeps 92 % of its atomics in the L2 already and
    then pays the slabs' repeated walk set-ups.  (Slabs take the LORs of an axial range as a
    range of threads: the axial-major order, which every non-TOF projection takes.)"""
    if not spread_views or not axial_major("back", int(image.nbytes), l2_cache_bytes(image.device.id)):
        return None
    return slab_planes(image.shape, l2_cache_bytes(image.device.id))


def back(parts: PackedParts, values, image, origin, voxel_size, rescale, along_x=None, slabs=None) -> None:
    """Add the back projection of flat ``values`` into the device image ``image``.  Walks
    along x add into ``along_x`` (:func:`transposed_accumulator`), which the caller folds into
    the image after its last call (:func:`fold`); without one, this call makes and folds its own.
    ``slabs``: ``(directories, launches)`` of the chunk's slab launches
    (:meth:`~stirgpu.kernels.joseph.chunk.JosephChunk.slab_launches`, for the planes of
    :func:`back_slab_planes`); without them, one launch adds into every plane."""
    cp = import_cupy()

    # (the wide kernel's offsets are 64-bit: images of 2^31 voxels or more)
    name = "back_stir" if image.size < 2**31 else "back_stir_wide"
    kernel = _kernel(image.device.id, name, lor_order("back", image))
    n0, n1, n2, *frame = frame_args(image, origin, voxel_size, rescale)
    own = along_x is None
    if own:
        along_x = transposed_accumulator(cp, image)
    tail = (values, image, along_x, n0, n1, n2, *frame)
    if slabs is None:
        launch(kernel, parts, (*parts.args, *tail, np.int32(0), n0))
    else:
        directories, launches = slabs
        size = len(directories) // max(len(launches), 1)
        for s in launches:
            if s.blocks:
                slab_parts = (parts.X, parts.H, parts.A, directories[s.offset : s.offset + size], parts.n_parts)
                kernel((s.blocks,), (THREADS,), (*slab_parts, *tail, np.int32(s.z_lo), np.int32(s.z_hi)))
    if own:
        fold(image, along_x)


def transposed_accumulator(xp, image):
    """The back projections' zeroed (z, x, y) accumulator of ``image``: walks along x add there
    (``stir_back_target`` in ``joseph.cu``), and :func:`fold` adds it into the image."""
    nz, ny, nx = image.shape
    return xp.zeros((nz, nx, ny), np.float32)


def fold(image, accumulator) -> None:
    """Add the (z, x, y) ``accumulator`` into the (z, y, x) ``image``."""
    image += accumulator.transpose(0, 2, 1)


def endpoints(parts: PackedParts, rescale, device_id: int):
    """STIR's endpoints of every LOR of the parts, times ``rescale``: ``(start, end)``, each an
    (n, 3) float32 (z, y, x) array on GPU ``device_id`` in the parts' bin order -- what STIR's
    Parallelproj projector hands libparallelproj (the baseline of ``benchmarks/kernels.py``)."""
    cp = import_cupy()

    kernel = _kernel(device_id, "endpoints_stir")
    start, end = cp.empty((parts.num_lors, 3), np.float32), cp.empty((parts.num_lors, 3), np.float32)
    launch(kernel, parts, (*parts.args, np.float32(rescale), start, end))
    return start, end


def _endpoint_arrays(cp, xstart, xend):
    """The explicit endpoints viewed as (N, 3) cupy arrays, checked (float32 or float64:
    :func:`_float32` rounds the latter, on their device)."""
    named = {}
    for name, a in (("xstart", xstart), ("xend", xend)):
        x = as_cupy(cp, name, a)
        check_array(name, x, dtypes=(np.float32, np.float64))
        if x.ndim != 2 or x.shape[1] != 3:
            raise GeometryError(f"{name}: expected shape (N, 3) with (z, y, x) columns, got {x.shape}")
        named[name] = x
    xs, xe = named["xstart"], named["xend"]
    if xs.shape != xe.shape:
        raise GeometryError(f"xstart {xs.shape} and xend {xe.shape} must have the same shape")
    return xs, xe


def _float32(*endpoints) -> tuple:
    """The endpoint arrays as float32 (libparallelproj's type; a rounded copy of float64 ones),
    made on the current device: call under the arrays' own."""
    return tuple(x.astype(np.float32, copy=False) for x in endpoints)


def _lors_args(image, origin, voxel_size) -> tuple:
    """The explicit kernels' frame arguments: :func:`frame_args` without a rescale (the endpoints
    are taken as given)."""
    return frame_args(image, origin, voxel_size, 1)[:-1]


def _lors_blocks(n: int) -> int:
    return -(-int(n) // THREADS)


def joseph_forward(xstart, xend, image, origin, voxel_size, out=None):
    """:func:`stirgpu.kernels.joseph_forward` on the GPU: CUDA arrays (cupy, torch, anything with
    ``__cuda_array_interface__`` or CUDA DLPack) used in place; the result on their device, of
    the kind ``image`` is (torch in, torch out).  A prepared image's framed copies are read."""
    cp = import_cupy()
    xs, xe = _endpoint_arrays(cp, xstart, xend)
    img, framed, source = image_arg(cp, image)
    check_array("image", img, ndim=3)
    n = xs.shape[0]
    named = {"xstart": xs, "xend": xe, "image": img}
    if out is not None:
        res = as_cupy(cp, "out", out)
        check_array("out", res, shape=(n,))
        named["out"] = res
    dev = one_device(named)
    with cp.cuda.Device(dev):
        if out is None:
            res = cp.empty(n, dtype=cp.float32)
        if n:
            xs, xe = _float32(xs, xe)
            kernel = _kernel(dev, "fwd_lors", lor_order("fwd", img))
            a, b = _framed_args(framed, img.shape)
            args = (xs, xe, np.int64(n), img, a, b, *_lors_args(img, origin, voxel_size), res)
            kernel((_lors_blocks(n),), (THREADS,), args)
    return out if out is not None else like_input(res, source)


def joseph_back(xstart, xend, values, out_image, origin, voxel_size):
    """:func:`stirgpu.kernels.joseph_back` on the GPU (CUDA arrays used in place); returns
    ``out_image``."""
    cp = import_cupy()
    xs, xe = _endpoint_arrays(cp, xstart, xend)
    n = xs.shape[0]
    vals = as_cupy(cp, "values", values)
    check_array("values", vals, shape=(n,))
    img = as_cupy(cp, "out_image", out_image)
    check_array("out_image", img, ndim=3)
    dev = one_device({"xstart": xs, "xend": xe, "values": vals, "out_image": img})
    if n == 0:
        return out_image
    with cp.cuda.Device(dev):
        xs, xe = _float32(xs, xe)
        # (the wide kernel's offsets are 64-bit: images of 2^31 voxels or more)
        name = "back_lors" if img.size < 2**31 else "back_lors_wide"
        kernel = _kernel(dev, name, lor_order("back", img))
        along_x = transposed_accumulator(cp, img)
        args = (xs, xe, np.int64(n), vals, img, along_x, *_lors_args(img, origin, voxel_size))
        kernel((_lors_blocks(n),), (THREADS,), args)
        fold(img, along_x)
    return out_image
