"""Chunk projections with STIR's numerics (``numerics="stir"``; docs/joseph.md, "Precision").

:func:`forward_chunk_stir` and :func:`back_chunk_stir` take what :func:`stirgpu.kernels.forward_chunk`
takes -- the :class:`stirgpu.geometry.ChunkTables` of a chunk's parts -- plus the
projection-data geometry they came from and the image's STIR frame
(:func:`stirgpu.kernels.stir_lors.stir_image_frame`).  Each part's LOR endpoints are computed
inside the kernel from small float32 tables (:func:`stir_lors.stir_chunk_tables`: per view and
tangential position, per axial position, per tangential position), exactly as STIR rounds
them, and projected with libparallelproj 2.0.3's float32 arithmetic: CPU through
:mod:`stirgpu.kernels.cpu_stir`, CUDA arrays through :mod:`stirgpu.kernels.cuda_stir`.
Results are in STIR's units (x voxels), like STIR's Parallelproj projector's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..arrays import import_cupy as _cupy
from ..arrays import on_cuda
from ..errors import GeometryError
from .tables import chunk_parts, parts_shapes

if TYPE_CHECKING:
    from .cuda_stir import PackedParts, PartTables
    from .stir_lors import TransaxialTables

__all__ = ["forward_chunk_stir", "back_chunk_stir", "StirChunk"]


class StirChunk:
    """A chunk's STIR float32 tables, made once on the host and copied once per device, so that
    a chunk projected forward and then back (OSEM's fused step), or again in later calls where
    the chunk is kept (the engine's lanes keep one per chunk, ``backends.CudaLaneKernels``),
    pays for them once.  ``transaxial`` (:class:`~stirgpu.kernels.stir_lors.TransaxialTables` of
    ``proj_data_info``; default: the chunk's own) holds the views' tables, which every segment
    shares: the CPU kernels take each part's rows of them (:attr:`host`), the GPU kernels index
    the whole sets, packed once per device, by view (:meth:`device`).  Accepted wherever
    :func:`forward_chunk_stir` / :func:`back_chunk_stir` take tables."""

    def __init__(self, tables, proj_data_info, transaxial: TransaxialTables | None = None):
        from .stir_lors import TransaxialTables

        parts, single = chunk_parts(tables)
        self.shapes: tuple[tuple[int, int, int], ...] = parts_shapes(parts)
        #: result shape of a single part, or None (the parts' bins one after the other, flat)
        self.single_shape = self.shapes[0] if single else None
        self.num_lors = sum(nv * na * nt for nv, na, nt in self.shapes)
        self.proj_data_info = proj_data_info
        self.transaxial = TransaxialTables(proj_data_info) if transaxial is None else transaxial
        self._chunk_tables = parts
        self._host: list[tuple[np.ndarray, ...]] | None = None
        self._parts: list[PartTables] | None = None
        self._device: dict[int, PackedParts] = {}

    @property
    def host(self) -> list[tuple[np.ndarray, ...]]:
        """Per part, its float32 host tables ``(x1, y1, dx, dy, l1, l2, hit, m, max_a tan)``
        (:func:`~stirgpu.kernels.stir_lors.stir_chunk_tables`): the CPU kernels'."""
        if self._host is None:
            from .stir_lors import stir_chunk_tables

            pdi, ta = self.proj_data_info, self.transaxial
            self._host = [stir_chunk_tables(pdi, p, ta) for p in self._chunk_tables]
        return self._host

    @property
    def parts(self) -> list[PartTables]:
        """Per part, what the GPU kernels index (:class:`~stirgpu.kernels.cuda_stir.PartTables`)."""
        if self._parts is None:
            from .cuda_stir import part_tables

            self._parts = [part_tables(self.proj_data_info, p) for p in self._chunk_tables]
        return self._parts

    def packed(self) -> PackedParts:
        """The parts and their transaxial sets packed on the host (layout: ``cuda/joseph_stir.cu``)."""
        from .cuda_stir import host_transaxial, pack_parts

        return pack_parts(self.parts, host_transaxial(self.transaxial, self.parts))

    def device(self, device_id: int) -> PackedParts:
        """The parts' tables and directory on GPU ``device_id``, the current device
        (:func:`stirgpu.kernels.cuda_stir.upload_parts`; layout: ``cuda/joseph_stir.cu``)."""
        got = self._device.get(device_id)
        if got is None:
            from .cuda_stir import upload_parts

            got = self._device[device_id] = upload_parts(self.parts, self.transaxial)
        return got


def _image(name: str, a, writable: bool = False):
    # engine images on a GPU may be wrappers carrying __cuda_array_interface__, shape and dtype
    shape = tuple(getattr(a, "shape", ()))
    if len(shape) != 3 or np.dtype(getattr(a, "dtype", None)) != np.float32:
        raise GeometryError(
            f"{name}: expected a (nz, ny, nx) float32 array, got shape {shape} {getattr(a, 'dtype', type(a).__name__)}"
        )
    flags = getattr(a, "flags", None)
    if flags is not None and (not flags.c_contiguous or (writable and not getattr(flags, "writeable", True))):
        raise GeometryError(f"{name}: must be C-contiguous{' and writable' if writable else ''}")
    return a


def _framed_copies(image):
    """The zero-framed copies ``(A, B)`` of a prepared device image
    (:func:`stirgpu.kernels.cuda_workspaces.prepare_image`, which the engine makes once per
    image), else None."""
    a, b = getattr(image, "a", None), getattr(image, "b", None)
    return (a, b) if a is not None and b is not None else None


def _chunk(tables, proj_data_info) -> StirChunk:
    """``tables`` as a :class:`StirChunk` (ChunkTables, a sequence of them, or tables uploaded
    for the exact kernels, ``cuda_backend.DeviceTables``, whose host parts are used)."""
    return tables if isinstance(tables, StirChunk) else StirChunk(tables, proj_data_info)


def _frame(frame):
    try:
        origin, voxel_size, rescale = frame
    except (TypeError, ValueError):
        raise GeometryError("frame: expected (origin, voxel_size, rescale) from stir_image_frame") from None
    return (np.ascontiguousarray(origin, np.float32), np.ascontiguousarray(voxel_size, np.float32), np.float32(rescale))


def forward_chunk_stir(tables, proj_data_info, image, frame, out=None, cancel=None):
    """STIR's forward projection of ``image`` over the chunk's LORs; the (nv, na, nt) float32
    result for one ChunkTables, the parts' results one after the other (flat) for several.
    ``cancel``: as for :func:`stirgpu.kernels.forward_chunk` (CPU only)."""
    chunk = _chunk(tables, proj_data_info)
    _image("image", image)
    n = chunk.num_lors
    shape = chunk.single_shape if chunk.single_shape is not None else (n,)
    cuda = on_cuda(image)
    if out is None:
        out = _cupy().empty(shape, np.float32) if cuda else np.empty(shape, np.float32)
    elif (
        int(np.prod(out.shape)) != n
        or str(out.dtype) != "float32"
        or on_cuda(out) != cuda
        or not out.flags.c_contiguous
    ):
        raise GeometryError(f"out: expected a C-contiguous float32 array of {n} elements ({shape}) beside the image")
    org, vs, rescale = _frame(frame)
    if cuda:
        from . import cuda_stir

        cp = _cupy()
        framed = _framed_copies(image)
        image = cp.asarray(image)
        cuda_stir.forward(
            chunk.device(image.device.id), image, org, vs, rescale, cp.asarray(out).reshape(-1), framed=framed
        )
        return out
    from . import cpu, cpu_stir

    flat, o = out.reshape(-1), 0
    dims = np.array(image.shape, np.int64)
    for t, (nv, na, nt) in zip(chunk.host, chunk.shapes, strict=True):
        k = nv * na * nt
        for lo, hi in cpu.lor_ranges(k, cancel):
            cpu_stir.forward_stir(t, image.reshape(-1), dims, org, vs, rescale, flat[o : o + k], lo, hi)
        o += k
    return out


def back_chunk_stir(tables, proj_data_info, values, out_image, frame, cancel=None, along_x=None, workers=None):
    """Add STIR's back projection of ``values`` (shaped like :func:`forward_chunk_stir`'s
    result) into ``out_image``; returns ``out_image``.  ``cancel`` and ``workers`` (CPU only):
    as for :func:`stirgpu.kernels.back_chunk`.  ``along_x`` (GPU only): a zeroed
    :func:`stirgpu.kernels.cuda_stir.transposed_accumulator` of ``out_image`` kept over several
    calls, which the caller folds into it after the last (:func:`~stirgpu.kernels.cuda_stir.fold`);
    default: each call makes and folds its own."""
    chunk = _chunk(tables, proj_data_info)
    _image("out_image", out_image, writable=True)
    n = chunk.num_lors
    if int(np.prod(values.shape)) != n or str(values.dtype) != "float32":
        raise GeometryError(f"values: expected {n} float32 values, got shape {values.shape} {values.dtype}")
    if on_cuda(values) != on_cuda(out_image):
        raise GeometryError("values and out_image must both be on the host or both on one GPU")
    org, vs, rescale = _frame(frame)
    if on_cuda(out_image):
        from . import cuda_stir

        cp = _cupy()
        image = cp.asarray(out_image)
        flat = cp.asarray(values).reshape(-1)
        cuda_stir.back(chunk.device(image.device.id), flat, image, org, vs, rescale, along_x=along_x)
        return out_image
    from . import cpu, cpu_stir

    flat, o = values.reshape(-1), 0
    dims = np.array(out_image.shape, np.int64)
    target = out_image.reshape(-1)
    if workers is not None and not workers.adds_into(target):
        raise GeometryError("workers: the worker images belong to another target image")
    for t, (nv, na, nt) in zip(chunk.host, chunk.shapes, strict=True):
        k = nv * na * nt
        if k:
            extra = cpu.extra_slabs(target.shape[0], k) if workers is None else workers.extra
            for lo, hi in cpu.lor_ranges(k, cancel, multiple=extra.shape[0] + 1):
                cpu_stir.back_stir(t, flat[o : o + k], target, extra, dims, org, vs, rescale, lo, hi)
            if workers is None and extra.shape[0]:
                cpu.reduce_slabs(extra, target)
        o += k
    return out_image
