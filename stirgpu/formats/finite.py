"""Refusing inputs that hold NaN or ±Inf: images up front, projection data read once.

A NaN or an infinity in an input spreads to every bin (forward projection) or voxel (back
projection, every OSEM update) whose sum it enters, and the result is written without a word.
The projectors and reconstructions refuse such inputs with a
:class:`~stirgpu.errors.NonFiniteError` naming the input (its file, else the argument) and
the count:

* an image (an input image, an initial estimate) is small: :func:`check_finite_image` counts it
  before the call;
* projection data are streamed: the execution engine counts each chunk as it reads it (the
  projectors' calls), and :func:`check_finite_store` reads a store once, chunk by chunk, where
  the answer is needed before the first call that reads it (OSEM, before its first
  subiteration: docs/execution.md, "Non-finite inputs").

Both count with :func:`stirgpu.arrays.count_non_finite` (one sum per array when there are none).
"""

from __future__ import annotations

import concurrent.futures
import os

from ..arrays import count_non_finite
from ..errors import NonFiniteError
from .projdata import ProjData

__all__ = ["check_finite_image", "check_finite_store", "count_non_finite_store", "input_label"]


def input_label(store: ProjData, argument: str) -> str:
    """What a message calls an input: its file, else the argument it was given as."""
    return store.source_file or argument


def check_finite_image(array, what: str, path=None) -> None:
    """Raise :class:`~stirgpu.errors.NonFiniteError` naming ``what`` (a file, an argument) when
    ``array`` (numpy or cupy) holds NaN or ±Inf."""
    n = count_non_finite(array)
    if n:
        raise NonFiniteError(what, n, path)


def count_non_finite_store(store: ProjData, segments=None, threads: int | None = None) -> int:
    """How many bins of ``store`` (of ``segments``; default all) are NaN or ±Inf: every timing
    position and view read once, in pieces of at most 32 MB, each counted as soon as it is read
    (memory-bounded: one piece per thread).  A store whose abilities say it can be read by
    several threads at once is read by ``threads`` (default: half the cores, at most 8), so the
    pass runs at the speed of the file or the page cache, not of one thread's copies."""
    segments = store.get_proj_data_info().segment_nums if segments is None else segments
    pieces = [
        (s, views, t)
        for t in range(store.get_min_tof_pos_num(), store.get_max_tof_pos_num() + 1)
        for s in segments
        for views in store.view_chunks(s)
    ]

    def count(piece) -> int:
        s, views, t = piece
        return count_non_finite(store.read_views(s, views, timing_pos=t))

    if threads is None:
        threads = min(8, max((os.cpu_count() or 2) // 2, 1))
    if threads <= 1 or len(pieces) < 2 or not store.abilities.parallel_reads:
        return sum(map(count, pieces))
    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="stirgpu-count") as pool:
        return sum(pool.map(count, pieces))


def check_finite_store(store: ProjData, argument: str, segments=None) -> None:
    """Raise :class:`~stirgpu.errors.NonFiniteError` naming ``store``'s file (else ``argument``)
    when its bins (of ``segments``) hold NaN or ±Inf (:func:`count_non_finite_store`)."""
    n = count_non_finite_store(store, segments)
    if n:
        raise NonFiniteError(input_label(store, argument), n, store.source_file)
