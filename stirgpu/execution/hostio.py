"""Host-side parallelism: a small pool of daemon threads, and chunk I/O split over it.

Copies between host buffers and in-memory stores, and positioned reads/writes of disk
stores, release the GIL; one thread copies at a few GB/s, so a chunk's reads and writes
are split by views over a few threads to keep up with a GPU.  Only stores the caller
declares safe for concurrent access to *disjoint* views are split (the projectors pass the
stores' ``abilities.parallel_reads`` / ``parallel_writes``: stirgpu's memory and disk stores
have them; a STIR ProjData adapter serialises its calls anyway).

The pool's threads are daemons: a store call that never returns cannot keep the
interpreter from exiting.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import queue
import threading
import weakref
from collections.abc import Callable

import numpy as np

from ..arrays import count_non_finite

__all__ = [
    "DaemonPool",
    "split_ranges",
    "run_pieces",
    "parallel_copy",
    "parallel_count_non_finite",
    "chunk_pieces",
    "announce_chunk",
    "read_chunk",
    "count_non_finite_in",
    "write_chunk",
    "MIN_PIECE_BYTES",
]

#: below this a piece is not worth a thread hand-off
MIN_PIECE_BYTES = 1024 * 1024

_STOP = object()


def _work(q: queue.SimpleQueue) -> None:
    while True:
        item = q.get()
        if item is _STOP:
            return
        fn, args, fut = item
        if not fut.set_running_or_notify_cancel():
            continue
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            fut.set_exception(exc)


class DaemonPool:
    """A fixed set of daemon threads running submitted callables (futures)."""

    def __init__(self, threads: int, name: str):
        self.size = max(int(threads), 1)
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=_work, args=(self._q,), name=f"{name}-{i}", daemon=True) for i in range(self.size)
        ]
        for t in self._threads:
            t.start()
        self._finalizer = weakref.finalize(self, DaemonPool._stop, self._q, self.size)

    @staticmethod
    def _stop(q: queue.SimpleQueue, n: int) -> None:
        for _ in range(n):
            q.put(_STOP)

    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._q.put((fn, args, fut))
        return fut

    def shutdown(self) -> None:
        self._finalizer()


def split_ranges(n: int, item_bytes: int, max_pieces: int) -> list[tuple[int, int]]:
    """[start, stop) ranges covering ``range(n)``: at most ``max_pieces``, none smaller than
    :data:`MIN_PIECE_BYTES` (unless there is only one)."""
    pieces = max(1, min(int(max_pieces), n, (n * int(item_bytes)) // MIN_PIECE_BYTES))
    edges = np.linspace(0, n, pieces + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def run_pieces(pool: DaemonPool | None, fn: Callable[[int, int], None], ranges: list[tuple[int, int]]) -> None:
    """``fn(a, b)`` for every range; on the pool when there is more than one.  Waits for all of
    them before raising the first error, so no piece is still running afterwards."""
    if pool is None or len(ranges) == 1:
        for a, b in ranges:
            fn(a, b)
        return
    futs = [pool.submit(fn, a, b) for a, b in ranges[1:]]
    first_error = None
    try:
        fn(*ranges[0])  # the calling thread does its share
    except BaseException as exc:  # noqa: BLE001
        first_error = exc
    concurrent.futures.wait(futs)
    for f in futs:
        if first_error is None and f.exception() is not None:
            first_error = f.exception()
    if first_error is not None:
        raise first_error


def parallel_copy(pool: DaemonPool | None, dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` split along the first axis over the pool."""
    n = dst.shape[0]
    item = dst[0].nbytes if n else 0

    def piece(a: int, b: int) -> None:
        np.copyto(dst[a:b], src[a:b], casting="unsafe")

    run_pieces(pool, piece, split_ranges(n, item, pool.size + 1 if pool else 1))


def parallel_count_non_finite(pool: DaemonPool | None, a) -> int:
    """:func:`~stirgpu.arrays.count_non_finite` of a numpy array split along its first axis over
    the pool (numpy's sums release the GIL: an image is counted at the threads' combined memory
    bandwidth); a cupy array is counted on its GPU."""
    if not isinstance(a, np.ndarray) or a.ndim == 0 or pool is None:
        return count_non_finite(a)
    counts = []  # (list.append is atomic)
    ranges = split_ranges(a.shape[0], a[0].nbytes, pool.size + 1)
    run_pieces(pool, lambda i, j: counts.append(count_non_finite(a[i:j])), ranges)
    return sum(counts)


def chunk_pieces(chunk, flat: np.ndarray, pieces_per_part: int) -> list[tuple]:
    """(segment, views, buffer, timing position) pieces of a chunk's I/O in its flat buffer
    ``flat``: each part (shaped (ntof, nv, na, nt) at its offset) split by timing position, then
    by views into at most ``pieces_per_part`` pieces of at least :data:`MIN_PIECE_BYTES`; the
    timing position is None for non-TOF data (stores are then called as before TOF: without it)."""
    pieces = []
    for part in chunk.parts:
        bufs = flat[part.offset : part.stop].reshape((part.num_tof_poss, *part.shape))
        timing: tuple[int | None, ...] = part.timing_poss if part.num_tof_poss > 1 else (None,)
        for t, buf in zip(timing, bufs, strict=True):
            for a, b in split_ranges(len(part.views), buf[0].nbytes, pieces_per_part):
                pieces.append((part.segment, part.views[a:b], buf[a:b], t))
    return pieces


def announce_chunk(store, chunk) -> None:
    """Tell ``store`` (its ``prefetch_views``, where it has one) every view of ``chunk`` it will
    be asked for: a file store then has the system fetch exactly those bytes, queued at once,
    while the reader is still busy with the chunk before (see ``ProjData.prefetch_views``)."""
    prefetch = getattr(store, "prefetch_views", None)
    if prefetch is None:
        return
    for part in chunk.parts:
        for t in part.timing_poss if part.num_tof_poss > 1 else (None,):
            prefetch(part.segment, part.views, **({} if t is None else {"timing_pos": t}))


def read_chunk(
    store, chunk, flat: np.ndarray, pool: DaemonPool | None, pieces_per_part: int, count: bool = False
) -> int:
    """Read ``chunk`` from ``store`` (``read_views(segment, views, out=...)``) into ``flat``; the
    pieces of all its parts run together on ``pool`` (a subset's chunk has several small parts).
    With ``count``, each piece's thread also counts its NaN and ±Inf values as soon as it has
    read them (:func:`~stirgpu.arrays.count_non_finite`: one sum of a piece still in the cache
    when there are none); returns their number (0 without ``count``)."""
    found = []  # (list.append is atomic: the pieces' threads add to it)

    def piece(seg, views, buf, timing_pos):
        tof = {} if timing_pos is None else {"timing_pos": timing_pos}
        got = store.read_views(seg, views, out=buf, **tof)
        if got is not buf and got is not None:  # a store that ignores ``out``
            np.copyto(buf, got)
        if count:
            found.append(count_non_finite(buf))

    _run_chunk_pieces(chunk, flat, pool, pieces_per_part, piece)
    return sum(found)


def count_non_finite_in(store, chunks, pool: DaemonPool | None, pieces_per_part: int) -> int:
    """How many NaN and ±Inf values ``store`` holds in ``chunks`` (all read again, into one
    chunk-sized buffer): the exact count a failed call reports, read only after one of its chunks
    was found to hold some."""
    chunks = list(chunks)
    if not chunks:
        return 0
    buffer = np.empty(max(c.num_bins for c in chunks), dtype=np.float32)
    return sum(read_chunk(store, c, buffer[: c.num_bins], pool, pieces_per_part, count=True) for c in chunks)


def write_chunk(store, chunk, flat: np.ndarray, pool: DaemonPool | None, pieces_per_part: int) -> None:
    """Write ``chunk`` from ``flat`` into ``store`` (``write_views(array, segment, views)``), in
    pieces as :func:`read_chunk`."""

    def piece(seg, views, buf, timing_pos):
        tof = {} if timing_pos is None else {"timing_pos": timing_pos}
        store.write_views(buf, seg, views, **tof)

    _run_chunk_pieces(chunk, flat, pool, pieces_per_part, piece)


def _run_chunk_pieces(chunk, flat, pool, pieces_per_part, fn: Callable) -> None:
    pieces = chunk_pieces(chunk, flat, pieces_per_part)
    run_pieces(pool, lambda i, j: fn(*pieces[i]), [(i, i + 1) for i in range(len(pieces))])
