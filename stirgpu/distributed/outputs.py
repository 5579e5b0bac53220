"""Projection-data outputs under MPI: each rank writes its own share.

Two kinds of output:

* **One new file for all ranks** (:func:`shared_output`): rank 0 creates it (its data under a
  temporary name), every other rank opens that temporary data file and writes its share of
  each forward projection into it -- disjoint bins, positioned writes, no locking.  When the
  block ends the ranks agree; if every rank got through, the others flush and close their part
  and rank 0 commits: data renamed into place, then the header.  If any rank failed, rank 0
  removes the temporary file and no header appears.  The file must be on a file system every
  rank sees.
* **Anything else** (in memory, STIR's objects, a file each rank opened itself):
  :func:`complete_on_every_rank` sends each rank's share to every other rank after the
  projection (all timing positions of TOF data), in pieces of at most the staging size, so that
  every rank's output holds the whole projection -- as it would without MPI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import numpy as np

from .comm import Communicator
from .share import share_viewgrams

__all__ = ["shared_output", "complete_on_every_rank", "written_by_ranks"]


def written_by_ranks(store) -> bool:
    """Whether ``store`` is one file whose parts the ranks write (:func:`shared_output`)."""
    return bool(getattr(store, "written_by_ranks", False))


@contextlib.contextmanager
def shared_output(comm: Communicator, path, proj_data_info, *, overwrite: bool = False) -> Iterator:
    """A new Interfile projection-data file ``path`` that every rank of ``comm`` writes its
    share of (see the module docstring); yields this rank's store.  With one rank: a plain new
    store, committed at the end of the block (aborted on an exception)."""
    from ..formats import ProjDataOnDisk
    from ..formats.projdata_disk import ProjDataFromFile

    if not comm.parallel:
        with ProjDataOnDisk.create(path, proj_data_info, overwrite=overwrite) as store:
            yield store
        return
    store = None
    with comm.together("creating the output"):
        if comm.is_root:
            store = ProjDataOnDisk.create(path, proj_data_info, overwrite=overwrite)
    shared = comm.broadcast(store.share_for_writing() if store is not None else None)
    try:
        with comm.together("opening the output"):
            if not comm.is_root:
                store = ProjDataFromFile.open_part(shared)
        assert store is not None
        with comm.together("writing the output"):
            yield store
        with comm.together("closing the output's parts"):
            if not comm.is_root:
                store.close()  # (flushed to disk before rank 0 renames the file)
        with comm.together("committing the output"):
            if comm.is_root:
                store.close()
    except BaseException:
        if store is not None and comm.is_root and store.abilities.abortable:
            store.abort()
        elif store is not None:
            store.close()
        raise


def complete_on_every_rank(comm: Communicator, store, proj_data_info, segments: Sequence[int], views) -> int:
    """After every rank wrote its share (:func:`~.share.share_viewgrams`) of ``segments x views``
    into its own ``store``, give every rank's store the other ranks' shares: each rank in turn
    broadcasts its viewgrams -- all their timing positions for TOF data -- in pieces of at most
    ``comm.staging_bytes``.  Returns the bytes this rank sent."""
    if not comm.parallel:
        return 0
    nt = proj_data_info.get_num_tangential_poss()
    timing = _timing_positions(proj_data_info)
    sent = 0
    for owner in range(comm.size):
        share = share_viewgrams(proj_data_info, segments, views, owner, comm.size)
        for seg, seg_views in share.items():
            na = proj_data_info.get_num_axial_poss(seg)
            for times, piece in _pieces(timing, seg_views, 4 * na * nt, comm.staging_bytes):
                if comm.rank == owner:
                    buffer = np.stack([store.read_views(seg, piece, **_at(t)) for t in times]).astype(np.float32)
                    sent += buffer.nbytes * (comm.size - 1)
                else:
                    buffer = np.empty((len(times), len(piece), na, nt), dtype=np.float32)
                comm.broadcast(buffer, root=owner)
                if comm.rank != owner:
                    for t, values in zip(times, buffer, strict=True):
                        store.write_views(values, seg, piece, **_at(t))
    return sent


def _timing_positions(proj_data_info) -> tuple[int | None, ...]:
    """The timing positions of the data's viewgrams, lowest first; ``(None,)`` for non-TOF data
    (whose stores are called without ``timing_pos``, as the engine's chunk I/O calls them)."""
    if proj_data_info.get_num_tof_poss() == 1:
        return (None,)
    lo = proj_data_info.get_min_tof_pos_num()
    return tuple(range(lo, lo + proj_data_info.get_num_tof_poss()))


def _pieces(timing: tuple, views: np.ndarray, view_bytes: int, limit: int) -> Iterator[tuple[tuple, np.ndarray]]:
    """(timing positions, views) pieces of one segment's share of at most ``limit`` bytes (or one
    viewgram of one timing position): runs of views with all timing positions where one such
    viewgram fits, else each timing position alone."""
    groups = [timing] if len(timing) * view_bytes <= limit else [(t,) for t in timing]
    for times in groups:
        step = max(limit // (len(times) * view_bytes), 1)
        for i in range(0, len(views), step):
            yield times, views[i : i + step]


def _at(timing_pos: int | None) -> dict:
    return {} if timing_pos is None else {"timing_pos": timing_pos}
