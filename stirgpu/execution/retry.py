"""Out of memory during a call: smaller chunks for what did not complete, or a clear error.

A plan fits the memory budgets it was made for, but memory can still run out during the call:
another process took GPU memory after the plan was made, the host is short of pages, or the
device step's temporaries did not fit beside what cupy's pool holds.  The engine then runs the
call again (:meth:`stirgpu.execution.Engine.run`) over a plan of smaller chunks, each attempt's
buffers half the size of the last, down to one viewgram of the largest segment per buffer:

* a program that only writes outputs (a forward projection) retries the chunks whose outputs
  were not all written -- a chunk counts as done only once every output of it is (staged
  outputs: written by the writer; direct ones: its copy-out finished), so nothing is written
  twice and a chunk cut short is recomputed whole;
* a program that accumulates an image or sums (a back projection, OSEM's fused step) retries
  every chunk: its accumulators hold the failed attempt's partial sums, which are discarded
  (each attempt starts from zeroed accumulators and sums), never added twice.

If the attempt with the smallest chunks runs out of memory too, the call fails with
:class:`~stirgpu.errors.OutOfMemoryError` naming the memory, its budget, what is free and the
options to change.  :class:`ChunkProgress` keeps a progress display counting the original
plan's chunks across attempts.

Imports: the standard library, ``stirgpu.errors``, :mod:`.plan`, :mod:`.devices` (free GPU memory).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence

from ..errors import OutOfMemoryError
from . import devices as _devices
from .plan import Chunk, ChunkPart, Plan, format_bytes, host_available_bytes

__all__ = ["smaller_plan", "out_of_memory", "ChunkProgress", "exhausted_error"]


def _view_bytes(part: ChunkPart) -> int:
    _, na, nt = part.shape
    return 4 * na * nt


def smallest_buffer_bytes(chunks: Sequence[Chunk]) -> int:
    """One viewgram of the largest segment among ``chunks``: the smallest buffer they can use."""
    return max((_view_bytes(p) for c in chunks for p in c.parts), default=0)


def smaller_plan(plan: Plan, chunks: Sequence[Chunk]) -> tuple[Plan, list[int]] | None:
    """``chunks`` (of ``plan``) cut into chunks of at most half ``plan``'s buffer size, not
    below one viewgram of their largest segment, each new chunk within one old one (its parts
    in the same order); with the new chunks' buffers, numbered from 0.  Returns the plan and
    the index of the old chunk each new one was cut from, or None when ``plan``'s buffers are
    already that small."""
    smallest = smallest_buffer_bytes(chunks)
    if not chunks or plan.buffer_bytes <= smallest:
        return None
    cap = max(plan.buffer_bytes // 2, smallest)
    new: list[Chunk] = []
    origins: list[int] = []
    for old in chunks:
        parts: list[ChunkPart] = []
        used = 0
        for part in old.parts:
            vb = _view_bytes(part)
            nv, na, nt = part.shape
            i = 0
            while i < nv:
                room = (cap - used) // vb
                if room <= 0:
                    new.append(Chunk(len(new), tuple(parts)))
                    origins.append(old.index)
                    parts, used = [], 0
                    continue
                take = min(room, nv - i)
                offset = parts[-1].stop if parts else 0
                parts.append(ChunkPart(part.segment, part.views[i : i + take], (take, na, nt), offset))
                used += take * vb
                i += take
        if parts:
            new.append(Chunk(len(new), tuple(parts)))
            origins.append(old.index)
    smaller = dataclasses.replace(plan, chunks=tuple(new), buffer_bytes=max(c.nbytes for c in new))
    return smaller, origins


def out_of_memory(exc: BaseException, errors: Sequence[BaseException], lane) -> str | None:
    """Which memory ran out ("GPU" or "host") when a call failed with ``exc`` -- raised in the
    calling thread, or the call's ``PipelineError`` with the errors of its threads, ``errors``
    -- as ``lane`` (one of the call's lanes) tells its allocation failures; None when anything
    else failed too (only a call that failed for memory alone is retried)."""
    causes = list(errors) or [exc]
    kinds = [lane.out_of_memory(e) for e in causes]
    if not kinds or any(k is None for k in kinds):
        return None
    return "GPU" if "GPU" in kinds else "host"


def exhausted_error(operation: str, memory: str, plan: Plan, lanes: Sequence, retries: int) -> OutOfMemoryError:
    """The error of a call that ran out of ``memory`` with its smallest chunks (``plan``)."""
    if memory == "GPU":
        budget = plan.gpu_budget
        free = min(_devices.gpu_memory(lane.device_id)[0] for lane in lanes)
        option = "gpu_memory_budget"
        where = " per GPU"
    else:
        budget, free, option, where = plan.host_budget, host_available_bytes(), "host_memory_budget", ""
    said_budget = "none" if budget is None else f"{format_bytes(budget)} ({budget} bytes)"
    message = (
        f"{operation}: out of {memory} memory even with the smallest chunks (one viewgram of the "
        f"largest segment per buffer, {format_bytes(plan.buffer_bytes)}) after "
        f"{retries} {'retry' if retries == 1 else 'retries'} with smaller chunks; the {memory} budget "
        f"is {said_budget}{where}, {format_bytes(free)} ({free} bytes) is free now.  Free memory that "
        f"other processes hold, or give a budget that fits what is free ({option}= of the projectors "
        f"or stirgpu.config, --memory-budget on the command line), or fewer slots (num_slots=) or devices"
    )
    return OutOfMemoryError(message, memory=memory, budget=budget, free=free, option=option)


class ChunkProgress:
    """Reports ``progress(1)`` once per chunk of the call's first plan, across
    attempts: an original chunk counts when every piece of it is done in one attempt, and only
    once (a retried back projection recomputes chunks that were counted already)."""

    def __init__(self, progress: Callable[[int], None], chunks: Sequence[Chunk]):
        self._progress = progress
        self._lock = threading.Lock()
        self._counted: set[int] = set()
        self._origin = {c.index: c.index for c in chunks}  # the attempt's chunk -> the first plan's
        self._reset()

    def _reset(self) -> None:
        self._left: dict[int, int] = {}
        for o in self._origin.values():
            self._left[o] = self._left.get(o, 0) + 1
        self._seen: set[int] = set()

    def start_attempt(self, chunks: Sequence[Chunk], cut_from: Sequence[int]) -> None:
        """The next attempt runs ``chunks``; ``cut_from[i]``: the last attempt's chunk (index)
        that ``chunks[i]`` was cut from."""
        with self._lock:
            self._origin = {c.index: self._origin[old] for c, old in zip(chunks, cut_from, strict=True)}
            self._reset()

    def done_before_stop(self, chunks: Iterable[Chunk]) -> None:
        """The failed attempt's ``chunks`` whose outputs were all written, some of them uncounted
        (in flight when the call stopped): counted now, as they are not retried."""
        for c in chunks:
            self.done(c)

    def done(self, chunk: Chunk) -> None:
        """``chunk`` of the current attempt is done (a chunk said twice counts once)."""
        with self._lock:
            if chunk.index in self._seen:
                return
            self._seen.add(chunk.index)
            origin = self._origin[chunk.index]
            self._left[origin] -= 1
            report = self._left[origin] == 0 and origin not in self._counted
            if report:
                self._counted.add(origin)
        if report:
            self._progress(1)
