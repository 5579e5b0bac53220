"""The geometry tables of chunk parts, made once per engine and kept: on the host, and packed on
each GPU.

OSEM revisits the same subsets every iteration, and building a part's tables
(:meth:`stirgpu.geometry.ProjDataInfo.chunk_tables`) is Python work in the pipeline's threads;
uploading a chunk's packed tables is a copy before its kernels.  Both are kept by the geometry
*object* (held strongly, so its id is not reused meanwhile), not by equality: ProjDataInfo
equality tolerates header rounding, and tables must come from the very geometry of the call.

Imports: numpy, :mod:`.identity`, ``stirgpu.kernels.tables`` (and, on GPUs,
``stirgpu.kernels.cuda_backend.DeviceTables``).
"""

from __future__ import annotations

import numpy as np

from ..kernels.tables import pack_tables
from .identity import STRONG, IdentityCache

__all__ = ["ChunkTableKeeper"]

#: geometry tables kept at most (a few KiB each)
TABLES_KEPT = 4096
#: chunk tables kept on each device at most (a few KiB each)
DEVICE_TABLES_KEPT = 4096


class ChunkTableKeeper:
    """Tables of chunk parts for an engine of ``lanes`` lanes (thread-safe: the pipeline's
    readers and workers share it)."""

    def __init__(self, lanes: int):
        # by (geometry, (segment, views))
        self._host = IdentityCache((STRONG,), max_entries=TABLES_KEPT)
        # by (geometry, (lane, the chunk's parts))
        self._device = IdentityCache((STRONG,), max_entries=DEVICE_TABLES_KEPT * max(int(lanes), 1))

    def clear(self) -> None:
        self._host.clear()
        self._device.clear()

    def host(self, pdi, part):
        """The (read-only, so shareable) ChunkTables of ``part``."""
        key = (part.segment, part.views)
        tables = self._host.get((pdi,), key)
        if tables is None:
            tables = pdi.chunk_tables(part.segment, part.views)
            self._host.put((pdi,), tables, key)
        return tables

    def on_device(self, k: int, lane, pdi, chunk, slot):
        """The chunk's packed tables on lane ``k``'s GPU, uploaded (on the copy-in stream, from
        the slot's pinned table buffer) the first time these parts are seen, then kept."""
        from ..kernels.cuda_backend import DeviceTables

        key = (k, chunk.parts)
        dt = self._device.get((pdi,), key)
        if dt is not None:
            return dt
        tables = [self.host(pdi, p) for p in chunk.parts]
        packed = pack_tables(tables, slot.tab_host)
        dev = lane.alloc_device(len(packed), np.float64)
        lane.to_device(dev, packed, packed.nbytes)  # ordered before the chunk's kernels (s_in)
        dt = DeviceTables(tables, dev, lane.device_id)
        self._device.put((pdi,), dt, key)
        return dt
