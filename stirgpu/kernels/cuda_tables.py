"""A chunk's geometry tables on a CUDA device: :class:`DeviceTables` (the parts' tables packed by
:mod:`stirgpu.kernels.tables` and uploaded once, reusable by many launches) and the shapes and
grid of a launch over all parts.
"""

from __future__ import annotations

import types

import numpy as np

from ..arrays import import_cupy
from ..errors import GeometryError
from . import tables as packing

__all__ = ["DeviceTables", "upload_tables", "parts_grid", "chunk_shape"]


class DeviceTables:
    """The tables of a chunk's parts (:class:`~stirgpu.geometry.ChunkTables`, one per
    segment) packed (:mod:`stirgpu.kernels.tables`) and uploaded to one device, reusable for
    many kernel calls.  ``parts`` are the host tables, ``shapes`` their (nv, na, nt),
    ``data`` the packed float64 device array.  With one part, ``shape`` and every
    attribute of that ChunkTables stay readable, so it can be passed wherever ChunkTables
    are accepted."""

    def __init__(self, parts, data, device_id: int):
        #: made from one ChunkTables (results shaped (nv, na, nt)) rather than a sequence
        self.single = not isinstance(parts, (list, tuple))
        self.parts = (parts,) if self.single else tuple(parts)
        self.shapes = packing.parts_shapes(self.parts)
        self.data = data
        self.device_id = int(device_id)
        #: some part's views are not one run of consecutive views (a subset's): see
        #: KernelOptions.block_order
        self.spread = packing.views_spread(self.parts)
        self.num_lors = sum(nv * na * nt for nv, na, nt in self.shapes)
        self._blocks: dict[int, int] = {}

    def blocks(self, warps: int) -> int:
        """Blocks of a tiled launch over all parts with ``warps`` warps per block (see
        ``parts_grid``), counted once per size."""
        n = self._blocks.get(warps)
        if n is None:
            n = self._blocks[warps] = parts_grid(self.shapes, warps)[0][0]
        return n

    def __getattr__(self, name):
        if name in (
            "parts",
            "shapes",
            "single",
            "spread",
            "num_lors",
            "_blocks",
        ):  # not yet set (unpickling): avoid recursion
            raise AttributeError(name)
        if len(self.parts) != 1:
            raise AttributeError(f"DeviceTables of {len(self.parts)} parts has no single {name!r}")
        return getattr(self.parts[0], name)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(nv, na, nt) of a one-part chunk."""
        if len(self.shapes) != 1:
            raise GeometryError(f"DeviceTables of {len(self.shapes)} parts has no single shape")
        return self.shapes[0]


def upload_tables(tables, device: int | None = None) -> DeviceTables:
    """Pack and copy the tables of one chunk -- a ChunkTables, or a sequence of them (the
    parts of a multi-segment chunk) -- to a CUDA device (default: the current one).  A
    :class:`DeviceTables` is returned unchanged if it is already on that device."""
    cp = import_cupy()
    dev = int(cp.cuda.Device().id if device is None else device)
    if isinstance(tables, DeviceTables) and tables.device_id == dev:
        return tables
    parts, single = packing.chunk_parts(tables)  # from another device: its host parts again
    host = packing.pack_tables([_host_tables(t) for t in parts])
    with cp.cuda.Device(dev):
        data = cp.asarray(host)
    return DeviceTables(parts[0] if single else parts, data, dev)


def _host_tables(t):
    """``t`` with its arrays on the host (tables built from cupy arrays are accepted)."""
    if all(isinstance(getattr(t, n, None), np.ndarray) for n in packing.FIELDS):
        return t
    try:
        return types.SimpleNamespace(**{n: import_cupy().asnumpy(getattr(t, n)) for n in packing.FIELDS})
    except AttributeError as e:
        raise GeometryError(f"tables: expected stirgpu.geometry.ChunkTables ({e})") from None


def parts_grid(shapes, w: int):
    """Grid and block of a tiled chunk launch over all parts (see ``part_of_block``)."""
    blocks = sum(nv * ((na + w - 1) // w) * ((nt + 31) // 32) for nv, na, nt in shapes)
    return (blocks,), (32, w)


def chunk_shape(tables):
    """Shapes of the parts, and the shape of a one-part result (None for several parts)."""
    if isinstance(tables, DeviceTables):  # shapes checked when it was made
        return tables.shapes, (tables.shapes[0] if tables.single else None)
    parts, single = packing.chunk_parts(tables)
    shapes = packing.parts_shapes(parts)
    return shapes, (shapes[0] if single else None)
