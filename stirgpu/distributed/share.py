"""Which viewgrams of a call each rank projects: shares balanced by bins, known to every rank.

A call projects the viewgrams ``segments x views`` (a subset's views).  Taken in file order
(segments ascending, then views ascending) and counted in bins (a viewgram of segment ``s``
holds ``timing positions x axial positions(s) x tangential positions`` bins: a viewgram of TOF
data is all its timing positions, as in a chunk), they are cut into ``size`` runs of
about ``total / size`` bins each: rank ``r`` takes the viewgrams whose *middle* bin lies in
``[r total / size, (r + 1) total / size)``.  No rank has more than half a viewgram beyond either
end of its even run (so at most one viewgram above its even share, and viewgrams of one size
are dealt out in counts that differ by at most one), every rank computes every share from the
geometry alone (no message), and a rank's share is a run of the call's viewgrams in file order
-- few, long reads and writes.
Each rank then cuts its share into chunks by its own node's memory budgets (its plan).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import StirGpuError

__all__ = ["share_viewgrams", "share_bins"]


def _viewgrams(proj_data_info, segments: Sequence[int], views) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
    """(the call's (segment, views) in file order, each viewgram's first bin)."""
    v = np.unique(np.asarray(list(views), dtype=np.int64))
    nt = proj_data_info.get_num_tangential_poss() * proj_data_info.get_num_tof_poss()
    order = sorted(int(s) for s in segments)
    sizes = np.concatenate(
        [np.full(len(v), proj_data_info.get_num_axial_poss(s) * nt, dtype=np.int64) for s in order]
        or [np.zeros(0, dtype=np.int64)]
    )
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes.size else sizes
    return [(s, v) for s in order], np.append(starts, int(sizes.sum()))


def _owners(starts_and_total: np.ndarray, size: int) -> np.ndarray:
    """Each viewgram's rank: where its middle lies (integers: twice the middle, times ``size``,
    over twice the total)."""
    starts, total = starts_and_total[:-1], int(starts_and_total[-1])
    if total == 0:
        return np.zeros(len(starts), dtype=np.int64)
    twice_middles = starts + starts_and_total[1:]
    return np.minimum((twice_middles * size) // (2 * total), size - 1)


def share_viewgrams(proj_data_info, segments: Sequence[int], views, rank: int, size: int) -> dict[int, np.ndarray]:
    """Rank ``rank``'s share (of ``size``) of the viewgrams ``segments x views``: its views per
    segment ({segment: ascending views}, segments with none left out).  The shares of all
    ranks are disjoint and together are every viewgram once."""
    rank, size = int(rank), int(size)
    if size < 1 or not 0 <= rank < size:
        raise StirGpuError(f"share_viewgrams: need 0 <= rank < size (got rank={rank}, size={size})")
    runs, starts = _viewgrams(proj_data_info, segments, views)
    owner = _owners(starts, size)
    share: dict[int, np.ndarray] = {}
    i = 0
    for s, v in runs:
        mine = v[owner[i : i + len(v)] == rank]
        if mine.size:
            share[s] = mine
        i += len(v)
    return share


def share_bins(proj_data_info, share: dict[int, np.ndarray]) -> int:
    """The bins of a share (all timing positions of TOF data)."""
    nt = proj_data_info.get_num_tangential_poss() * proj_data_info.get_num_tof_poss()
    return sum(len(v) * proj_data_info.get_num_axial_poss(s) * nt for s, v in share.items())
