"""The geometry tables of chunk parts, made once per engine and kept, and per lane the object a
chunk's tables are known by.

OSEM revisits the same subsets every iteration, and building a part's tables
(:meth:`stirgpu.geometry.ProjDataInfo.chunk_tables`) is Python work in the pipeline's threads.
They are kept by the geometry *object* (held strongly, so its id is not reused meanwhile), not by
equality: ProjDataInfo equality tolerates header rounding, and tables must come from the very
geometry of the call.  A GPU lane's kernels keep each chunk's own float32 tables on the device
(``stirgpu.kernels.backends.CudaKept``), held weakly by the :class:`ChunkParts` kept here: they
go when the keeper lets go of it.

Imports: :mod:`.identity`.
"""

from __future__ import annotations

from .identity import STRONG, IdentityCache

__all__ = ["ChunkTableKeeper", "ChunkParts"]

#: geometry tables kept at most (a few KiB each)
TABLES_KEPT = 4096
#: chunks known per lane at most (their kernels' own tables are a few KiB each on a device)
CHUNKS_KEPT_PER_LANE = 4096


class ChunkParts(list):
    """The ChunkTables of one chunk's parts, kept per lane: a list the kernels take as a chunk,
    and (unlike a tuple) one they can key their own tables by, weakly: hashed and compared by
    identity, the very object the keeper holds (a list's own equality would compare tables)."""

    __slots__ = ("__weakref__",)

    def __hash__(self) -> int:  # type: ignore[override]  # (a list is unhashable: this one is keyed by identity)
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


class ChunkTableKeeper:
    """Tables of chunk parts for an engine of ``lanes`` lanes (thread-safe: the pipeline's
    readers and workers share it)."""

    def __init__(self, lanes: int):
        # by (geometry, (segment, views))
        self._host = IdentityCache((STRONG,), max_entries=TABLES_KEPT)
        # by (geometry, (lane, the chunk's parts))
        self._lanes = IdentityCache((STRONG,), max_entries=CHUNKS_KEPT_PER_LANE * max(int(lanes), 1))

    def clear(self) -> None:
        self._host.clear()
        self._lanes.clear()

    def host(self, pdi, part):
        """The (read-only, so shareable) ChunkTables of ``part``."""
        key = (part.segment, part.views)
        tables = self._host.get((pdi,), key)
        if tables is None:
            tables = pdi.chunk_tables(part.segment, part.views)
            self._host.put((pdi,), tables, key)
        return tables

    def for_lane(self, k: int, pdi, chunk) -> ChunkParts:
        """The chunk's tables for lane ``k``: its parts' kept :meth:`host` tables as one kept
        :class:`ChunkParts`, the same object every time these parts come to this lane (the lane's
        kernels keep their device tables of the chunk by it)."""
        key = (k, chunk.parts)
        parts = self._lanes.get((pdi,), key)
        if parts is None:
            parts = ChunkParts(self.host(pdi, p) for p in chunk.parts)
            self._lanes.put((pdi,), parts, key)
        return parts
