"""Chunk tables packed for the CUDA chunk kernels: one float64 array per chunk.

A chunk (see :mod:`stirgpu.execution.plan`) has one or more *parts*, each described by
a :class:`stirgpu.geometry.ChunkTables` (one segment, some views); all parts share the
tangential positions.  The kernels read one packed array::

    header   4 doubles per part: [offset of the part's tables, offset of its first bin,
             nv, na]   (offsets are exact in float64 up to 2^53)
    tables   per part: [cos_phi nv][sin_phi nv][s nt][half_chord nt][tantheta nt][m na]

and the bins of part k are [view][axial][tangential] from its bin offset on.  One
launch then covers every part of a chunk (no per-segment launch tails).  Pure numpy:
the pipeline packs into pinned host memory, :func:`stirgpu.kernels.cuda_backend.upload_tables`
into a fresh array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..errors import GeometryError

__all__ = [
    "FIELDS",
    "HEADER",
    "TablesLike",
    "table_length",
    "packed_length",
    "pack_tables",
    "parts_shapes",
    "chunk_parts",
    "views_spread",
]

#: the ChunkTables arrays in packed order
FIELDS = ("cos_phi", "sin_phi", "s", "half_chord", "tantheta", "m")


class TablesLike(Protocol):
    """What the kernels read of a :class:`stirgpu.geometry.ChunkTables` (duck-typed: the
    kernels and the engine do not import the geometry package): float64 host arrays."""

    @property
    def cos_phi(self) -> np.ndarray: ...

    @property
    def sin_phi(self) -> np.ndarray: ...

    @property
    def s(self) -> np.ndarray: ...

    @property
    def half_chord(self) -> np.ndarray: ...

    @property
    def tantheta(self) -> np.ndarray: ...

    @property
    def m(self) -> np.ndarray: ...


#: header doubles per part
HEADER = 4


def table_length(shape: tuple[int, int, int]) -> int:
    """Doubles of one part's tables, for a part of shape (nv, na, nt)."""
    nv, na, nt = shape
    return 2 * nv + 3 * nt + na


def packed_length(shapes: Sequence[tuple[int, int, int]]) -> int:
    """Doubles of the packed tables of parts with these shapes."""
    return HEADER * len(shapes) + sum(table_length(s) for s in shapes)


def parts_shapes(parts: Sequence) -> tuple[tuple[int, int, int], ...]:
    """(nv, na, nt) of each ChunkTables, checking that the parts fit together."""
    shapes = []
    for k, t in enumerate(parts):
        try:
            arrays = [getattr(t, n) for n in FIELDS]
        except AttributeError as e:
            raise GeometryError(f"tables[{k}]: expected stirgpu.geometry.ChunkTables ({e})") from None
        nv, nt, na = len(arrays[0]), len(arrays[2]), len(arrays[5])
        lengths = dict(zip(FIELDS, (len(a) for a in arrays), strict=True))
        if lengths["sin_phi"] != nv or lengths["half_chord"] != nt or lengths["tantheta"] != nt:
            raise GeometryError(f"tables[{k}]: inconsistent lengths {lengths}")
        shapes.append((nv, na, nt))
    if not shapes:
        raise GeometryError("tables: a chunk needs at least one part")
    if len({s[2] for s in shapes}) != 1:
        raise GeometryError(
            f"tables: the parts of one chunk must share the tangential positions (got {sorted({s[2] for s in shapes})})"
        )
    return tuple(shapes)


def views_spread(parts: Sequence) -> bool:
    """Whether some part's views (``ChunkTables.views``) are not one run of consecutive views,
    as a subset's are (tables without views count as consecutive)."""
    for t in parts:
        v = getattr(t, "views", None)
        if v is not None and len(v) > 1 and np.any(np.diff(np.asarray(v)) != 1):
            return True
    return False


def chunk_parts(tables) -> tuple[tuple, bool]:
    """(parts, single) of a chunk argument: a ChunkTables (``single``: results shaped
    (nv, na, nt)), a sequence of them (the parts of a multi-segment chunk: flat results), or
    uploaded tables carrying ``parts`` and ``single`` (the CUDA backend's DeviceTables)."""
    if getattr(tables, "parts", None) is not None and hasattr(tables, "single"):
        return tuple(tables.parts), bool(tables.single)
    if isinstance(tables, (list, tuple)):
        return tuple(tables), False
    return (tables,), True


def pack_tables(parts: Sequence, out: np.ndarray | None = None) -> np.ndarray:
    """Pack the ChunkTables ``parts`` (host arrays) into ``out`` (float64, at least
    :func:`packed_length` long; a new array when None).  Returns the packed prefix of ``out``."""
    shapes = parts_shapes(parts)
    n = packed_length(shapes)
    if out is None:
        out = np.empty(n, dtype=np.float64)
    elif out.dtype != np.float64 or out.ndim != 1 or len(out) < n:
        raise GeometryError(f"pack_tables: out must be a 1-D float64 array of at least {n} elements")
    packed = out[:n]
    o = HEADER * len(shapes)
    b = 0
    for k, (t, shape) in enumerate(zip(parts, shapes, strict=True)):
        packed[HEADER * k : HEADER * (k + 1)] = (o, b, shape[0], shape[1])
        for name in FIELDS:
            a = np.asarray(getattr(t, name), dtype=np.float64).reshape(-1)
            packed[o : o + len(a)] = a
            o += len(a)
        b += shape[0] * shape[1] * shape[2]
    if not np.all(np.isfinite(packed)):
        raise GeometryError("tables: must be finite")
    return packed
