"""The LORs of bins, from their coordinates: the azimuthal angle phi, the signed distance s from
the axis, the axial position m of the LOR's centre and tan(theta), clipped to a cylinder.

:class:`ProjDataInfo` computes the coordinates of its bins (``get_phi``, ``get_s``, ``get_m``,
``get_tantheta``); this module turns them into endpoints (``ProjDataInfo.lor_endpoints``) or into
the small per-chunk tables a geometry-aware kernel walks (``ProjDataInfo.chunk_tables``).  One set
of formulas for both, written out in :class:`ChunkTables`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ChunkTables", "lor_endpoints_from", "half_chords", "read_only"]


@dataclasses.dataclass(frozen=True, eq=False)
class ChunkTables:
    """The small per-chunk tables from which a kernel computes every LOR of a chunk.

    A chunk is one segment, a list of views, and ranges of axial and tangential
    positions; its bins are ordered [view][axial][tangential].  For view ``i``,
    axial position ``k`` and tangential position ``j`` the LOR, clipped to the
    cylinder of radius ``radius``, runs from ``a = -half_chord[j]`` (start) to
    ``a = +half_chord[j]`` (end) where, in the gantry frame (mm)::

        x = s[j] * cos_phi[i] + a * sin_phi[i]
        y = s[j] * sin_phi[i] - a * cos_phi[i]
        z = m[k] - a * tantheta[j]

    ``half_chord[j] == 0`` marks a LOR that misses the cylinder (|s| >= radius):
    its line integral is 0.  All arrays are float64 and read-only.
    """

    segment: int
    views: np.ndarray
    axial_poss: np.ndarray
    tangential_poss: np.ndarray
    cos_phi: np.ndarray
    sin_phi: np.ndarray
    s: np.ndarray
    half_chord: np.ndarray
    tantheta: np.ndarray
    m: np.ndarray
    radius: float

    @property
    def shape(self) -> tuple[int, int, int]:
        """(num views, num axial positions, num tangential positions)."""
        return (len(self.views), len(self.m), len(self.s))

    @property
    def num_lors(self) -> int:
        nv, na, nt = self.shape
        return nv * na * nt


def read_only(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only in place (tables and selections are values: no caller edits them)."""
    a.setflags(write=False)
    return a


def half_chords(s: np.ndarray, radius: float) -> np.ndarray:
    """Half the length of each LOR inside the cylinder of ``radius`` (0 where ``|s| >= radius``)."""
    return np.sqrt(np.maximum(radius * radius - s * s, 0.0))


def lor_endpoints_from(
    phi: np.ndarray, s: np.ndarray, m: np.ndarray, tantheta: np.ndarray, radius: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` of the LORs of these coordinates (arrays of one shape), float64 arrays of
    shape ``phi.shape + (3,)`` in the axis order (z, y, x), mm, gantry frame: the formulas of
    :class:`ChunkTables` at ``a = -half_chord`` and ``a = +half_chord``."""
    h = half_chords(s, radius)
    c, sn = np.cos(phi), np.sin(phi)
    ends = []
    for sign in (-1.0, 1.0):
        a = sign * h
        ends.append(np.stack([m - a * tantheta, s * sn - a * c, s * c + a * sn], axis=-1))
    return ends[0], ends[1]
