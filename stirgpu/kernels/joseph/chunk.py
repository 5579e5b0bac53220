"""A chunk as the Joseph kernels take it: :class:`JosephChunk`, the float32 tables from which the
kernels compute every LOR's endpoints as STIR does (:mod:`.lors`), made once on the host and
copied once per device.

A chunk (``stirgpu.execution.plan``) has one or more *parts*, each a
:class:`stirgpu.geometry.ChunkTables` (one segment, some views, ranges of axial and tangential
positions; duck-typed here), all with the same tangential positions.  A part's bins are
[view][axial][tangential]; the parts' bins follow one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import GeometryError

if TYPE_CHECKING:
    from .cuda import PackedParts, PartTables
    from .lors import TransaxialTables

__all__ = ["JosephChunk", "as_chunk", "chunk_parts", "parts_shapes"]

#: what the tables are made from, besides the shape (``stir_part_geometry``)
_PART_FIELDS = ("segment", "views", "axial_poss", "tangential_poss", "radius")


def chunk_parts(tables) -> tuple[tuple, bool]:
    """(parts, single) of a chunk argument: a ChunkTables (``single``: results shaped
    (nv, na, nt)) or a sequence of them (the parts of a multi-segment chunk: flat results)."""
    if isinstance(tables, (list, tuple)):
        return tuple(tables), False
    return (tables,), True


def parts_shapes(parts: Sequence[Any]) -> tuple[tuple[int, int, int], ...]:
    """(nv, na, nt) of each part, checking that the parts fit together."""
    shapes = []
    for k, t in enumerate(parts):
        try:
            shape = tuple(int(n) for n in t.shape)
            for field in _PART_FIELDS:
                getattr(t, field)
        except AttributeError as e:
            raise GeometryError(f"tables[{k}]: expected stirgpu.geometry.ChunkTables ({e})") from None
        if len(shape) != 3:
            raise GeometryError(f"tables[{k}]: expected a (views, axial, tangential) shape, got {shape}")
        shapes.append(shape)
    if not shapes:
        raise GeometryError("tables: a chunk needs at least one part")
    if len({s[2] for s in shapes}) != 1:
        raise GeometryError(
            f"tables: the parts of one chunk must share the tangential positions (got {sorted({s[2] for s in shapes})})"
        )
    return tuple(shapes)


class JosephChunk:
    """A chunk's float32 tables, made once on the host and copied once per device, so that a
    chunk projected forward and then back (OSEM's fused step), or again in later calls where the
    chunk is kept (the engine's lanes keep one per chunk, ``backends.CudaKept``), pays for them
    once.  ``transaxial`` (:class:`~stirgpu.kernels.joseph.lors.TransaxialTables` of
    ``proj_data_info``; default: the chunk's own) holds the views' tables, which every segment
    shares: the CPU kernels take each part's rows of them (:attr:`host`), the GPU kernels index
    the whole sets, packed once per device, by view (:meth:`device`).  Accepted wherever the
    chunk functions take tables."""

    def __init__(self, tables, proj_data_info, transaxial: TransaxialTables | None = None):
        from .lors import TransaxialTables

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
        self._slabs: dict[tuple, tuple[Any, list]] = {}

    @property
    def spread_views(self) -> bool:
        """Whether some part's views are not a run of neighbouring views (a subset's)."""
        return any(len(v) > 1 and np.any(np.diff(np.asarray(v)) != 1) for v in (t.views for t in self._chunk_tables))

    @property
    def host(self) -> list[tuple[np.ndarray, ...]]:
        """Per part, its float32 host tables ``(x1, y1, dx, dy, l1, l2, hit, m, max_a tan)``
        (:func:`~stirgpu.kernels.joseph.lors.stir_chunk_tables`): the CPU kernels'."""
        if self._host is None:
            from .lors import stir_chunk_tables

            pdi, ta = self.proj_data_info, self.transaxial
            self._host = [stir_chunk_tables(pdi, p, ta) for p in self._chunk_tables]
        return self._host

    @property
    def parts(self) -> list[PartTables]:
        """Per part, what the GPU kernels index (:class:`~stirgpu.kernels.joseph.cuda.PartTables`)."""
        if self._parts is None:
            from .cuda import part_tables

            self._parts = [part_tables(self.proj_data_info, p) for p in self._chunk_tables]
        return self._parts

    def packed(self) -> PackedParts:
        """The parts and their transaxial sets packed on the host (layout: ``cuda/joseph.cu``)."""
        from .cuda import host_transaxial, pack_parts

        return pack_parts(self.parts, host_transaxial(self.transaxial, self.parts))

    def device(self, device_id: int) -> PackedParts:
        """The parts' tables and directory on GPU ``device_id``, the current device
        (:func:`stirgpu.kernels.joseph.cuda.upload_parts`; layout: ``cuda/joseph.cu``)."""
        got = self._device.get(device_id)
        if got is None:
            from .cuda import upload_parts

            got = self._device[device_id] = upload_parts(self.parts, self.transaxial)
        return got

    def slab_launches(self, device_id: int, planes: int, n0: int, z_origin, z_voxel, rescale) -> tuple[Any, list]:
        """:meth:`host_slabs` of this chunk's directory on GPU ``device_id`` (the current device),
        the directories copied there; made once per device and image frame."""
        key = (device_id, int(planes), int(n0), float(z_origin), float(z_voxel), float(rescale))
        got = self._slabs.get(key)
        if got is None:
            from ...arrays import import_cupy

            directory = self.device(device_id).host_directory
            host, launches = self.host_slabs(directory, planes, n0, z_origin, z_voxel, rescale)
            got = self._slabs[key] = (import_cupy().asarray(host), launches)
        return got

    def host_slabs(self, directory, planes: int, n0: int, z_origin, z_voxel, rescale) -> tuple[np.ndarray, list]:
        """The slab launches of this chunk's back projection (``directory``: its parts' directory,
        :func:`~stirgpu.kernels.joseph.cuda.pack_parts`) into an image of ``n0`` planes,
        ``planes`` each, its first plane centre ``z_origin`` and spacing ``z_voxel`` with ``rescale``
        as the kernels take them: their directories, one after the other, and their
        :class:`~stirgpu.kernels.joseph.slabs.SlabLaunch` es (:mod:`~stirgpu.kernels.joseph.slabs`)."""
        from .cuda import PART_FIELDS, THREADS
        from .slabs import axial_plane_ranges, slab_directories

        directory = np.asarray(directory, np.int64)
        n_rows = len(self.parts) * PART_FIELDS
        ranges = []
        for p in self.parts:
            l1, l2, hit = (t[p.views] for t in self.transaxial.complete(p.geometry)[4:7])
            ranges.append(axial_plane_ranges(p.m, p.mt, l1, l2, hit, z_origin, z_voxel, rescale))
        rows = directory[:n_rows].reshape(-1, PART_FIELDS)
        return slab_directories(rows, directory[n_rows:], self.shapes, ranges, n0, planes, THREADS)


def as_chunk(tables, proj_data_info) -> JosephChunk:
    """``tables`` (a ChunkTables, a sequence of them, or a :class:`JosephChunk`) as a
    :class:`JosephChunk`."""
    return tables if isinstance(tables, JosephChunk) else JosephChunk(tables, proj_data_info)
