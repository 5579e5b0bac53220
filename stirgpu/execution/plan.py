"""The chunk plan: which (segment, views) blocks a call processes, and how big its buffers are.

A *chunk* is the unit the pipeline moves: one read, one upload, one kernel launch, one
download and one write-back per chunk.  It is a run of consecutive *viewgrams* in file
order (segments ascending, then the call's sorted view list -- a subset's views), cut
into *parts*, one per segment it touches; a part is one segment x a run of views x all
axial and tangential positions, laid out [view][axial][tangential], and the chunk's
buffers hold its parts one after the other.  Large calls get chunks of one part each;
a subset of a many-segment scanner (mMR span 11: 12 views of 11 segments) gets a few
chunks of several parts instead of one small chunk per segment, because each chunk
costs a fixed amount of thread hand-offs, CUDA events and a kernel launch tail.

Sizing.  Every lane (one GPU, or one CPU worker) holds ``depth`` *slots*; a slot is a
set of equally sized chunk buffers: on the host one per projection-data input and
output of the program (pinned on GPUs), on the GPU one per input, output and scratch
array.  One buffer's capacity ``buffer_bytes`` is the largest that fits both budgets::

    host:  host_fixed + lanes * depth * host_buffers   * buffer_bytes <= host_budget
    gpu:   gpu_fixed  +         depth * device_buffers * buffer_bytes <= gpu_budget  (per GPU)

where the *fixed* parts are the images each lane keeps.  It is then capped at a
target chunk size so that a call has several chunks per lane (overlap and load
balance) but no chunk is so small that per-chunk overhead dominates.  If not even one
viewgram of the largest segment fits, :class:`~stirgpu.errors.PlanError` says by how much.

Defaults: the GPU budget is the device's free memory (cupy ``Device.mem_info``) less a
reserve; the host budget a fraction of ``MemAvailable`` from ``/proc/meminfo``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import PlanError

__all__ = [
    "Chunk",
    "ChunkPart",
    "Plan",
    "make_plan",
    "host_available_bytes",
    "default_host_budget",
    "default_gpu_budget",
    "views_by_segment",
    "format_bytes",
    "parse_bytes",
    "plural",
]

#: never plan chunks larger than this (bigger ones do not run faster, they only delay overlap)
MAX_CHUNK_BYTES = 64 * 1024 * 1024
#: do not split work below this size just to get more chunks per lane (non-TOF: 1 Mi LORs, a few
#: waves of a GPU's threads; TOF data hold this many bytes per timing position, see make_plan)
MIN_CHUNK_BYTES = 4 * 1024 * 1024
#: aim for this many chunks per lane (pipeline fill/drain and load balance)
CHUNKS_PER_LANE = 12
#: fraction of MemAvailable a call may use for staging by default
HOST_FRACTION = 0.25
#: GPU memory left free by default: the larger of this and 10 % of the device
GPU_RESERVE_BYTES = 1 << 30


@dataclasses.dataclass(frozen=True)
class ChunkPart:
    """The part of a chunk in one segment: ``views`` (ascending) x all axial and tangential
    positions, ``shape`` (nv, na, nt), starting at bin ``offset`` of the chunk's buffers; for TOF
    data all ``timing_poss`` of those views, laid out ``[timing position][view][axial][tangential]``
    (TOF outermost, STIR's order; ``(0,)`` for non-TOF data)."""

    segment: int
    views: tuple[int, ...]
    shape: tuple[int, int, int]
    offset: int
    timing_poss: tuple[int, ...] = (0,)

    @property
    def num_tof_poss(self) -> int:
        return len(self.timing_poss)

    @property
    def num_bins(self) -> int:
        nv, na, nt = self.shape
        return self.num_tof_poss * nv * na * nt

    @property
    def stop(self) -> int:
        """One past the part's last bin in the chunk's buffers."""
        return self.offset + self.num_bins


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One unit of work: ``parts`` (one per segment, in file order), their bins one after the
    other in the chunk's buffers."""

    index: int
    parts: tuple[ChunkPart, ...]

    @property
    def num_bins(self) -> int:
        return self.parts[-1].stop if self.parts else 0

    @property
    def nbytes(self) -> int:
        """Bytes of one float32 buffer of this chunk."""
        return 4 * self.num_bins

    @property
    def num_viewgrams(self) -> int:
        return sum(len(p.views) for p in self.parts)

    def viewgrams(self) -> list[tuple[int, int]]:
        """(segment, view) of every viewgram of the chunk, in buffer order."""
        return [(p.segment, v) for p in self.parts for v in p.views]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A call's chunks and buffers; ``str(plan)`` is a readable table."""

    chunks: tuple[Chunk, ...]
    lanes: int
    depth: int
    #: capacity of one chunk buffer (bytes)
    buffer_bytes: int
    host_buffers_per_slot: int
    device_buffers_per_slot: int
    host_fixed_bytes: int
    device_fixed_bytes: int
    host_budget: int
    gpu_budget: int | None
    #: chunks a GPU may compute at once (its compute streams; the device buffers were sized
    #: for that many chunks' temporaries); 1 on the CPU
    concurrency: int = 1

    @property
    def host_bytes(self) -> int:
        """Host memory the call allocates (staging buffers + fixed images)."""
        return self.host_fixed_bytes + self.lanes * self.depth * self.host_buffers_per_slot * self.buffer_bytes

    @property
    def device_bytes_per_lane(self) -> int:
        """GPU memory per device (0 for the CPU backend)."""
        if self.gpu_budget is None:
            return 0
        return self.device_fixed_bytes + self.depth * self.device_buffers_per_slot * self.buffer_bytes

    @property
    def num_bins(self) -> int:
        return sum(c.num_bins for c in self.chunks)

    @property
    def data_bytes(self) -> int:
        """Bytes of one float32 copy of the planned projection data."""
        return 4 * self.num_bins

    def __str__(self) -> str:
        return self.table

    def __repr__(self) -> str:
        # the generated dataclass repr would list every chunk's every view
        most = max((len(c.parts) for c in self.chunks), default=0)
        return (
            f"<Plan: {plural(len(self.chunks), 'chunk')} (at most {plural(most, 'segment')} each), "
            f"{self.num_bins} bins, {plural(self.lanes, 'lane')} x {plural(self.depth, 'slot')}, "
            f"buffers of {format_bytes(self.buffer_bytes)}, host {format_bytes(self.host_bytes)} of "
            f"{format_bytes(self.host_budget)}"
            + (
                ""
                if self.gpu_budget is None
                else f", GPU {format_bytes(self.device_bytes_per_lane)} of {format_bytes(self.gpu_budget)}"
            )
            + ">"
        )

    #: the table's column headings (``stirgpu plan`` explains them in its legend)
    COLUMNS = ("segment", "axial positions", "views", "chunks", "views per chunk (max)")

    @functools.cached_property
    def table(self) -> str:
        """The readable table (made once: statistics quote it after every call): per segment its
        axial positions, the call's views in it (a subset's), how many chunks hold some of them,
        and the most views of it in one chunk; then the chunk sizes and the memory."""
        rows = [self.COLUMNS]
        by_seg: dict[int, list[ChunkPart]] = {}
        for c in self.chunks:
            for p in c.parts:
                by_seg.setdefault(p.segment, []).append(p)
        for seg, ps in by_seg.items():
            rows.append(
                (
                    str(seg),
                    str(ps[0].shape[1]),
                    str(sum(len(p.views) for p in ps)),
                    str(len(ps)),
                    str(max(len(p.views) for p in ps)),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        most = max((len(c.parts) for c in self.chunks), default=0)
        lines.append(
            f"{plural(len(self.chunks), 'chunk')} of at most "
            f"{format_bytes(max((c.nbytes for c in self.chunks), default=0))} (viewgrams of at most "
            f"{plural(most, 'segment')} in one chunk); {format_bytes(self.data_bytes)} of "
            f"projection data in all"
        )
        timing = {p.timing_poss for c in self.chunks for p in c.parts}
        if any(len(t) > 1 for t in timing):
            lines.append(
                "TOF: "
                + "; ".join(f"{plural(len(t), 'timing position')} ({t[0]}..{t[-1]})" for t in sorted(timing))
                + " in every viewgram of every chunk"
            )
        lanes = plural(self.lanes, "CPU worker") if self.gpu_budget is None else plural(self.lanes, "GPU")
        lines.append(
            f"host memory {format_bytes(self.host_bytes)} (budget {format_bytes(self.host_budget)}): "
            f"{lanes} x {plural(self.depth, 'slot')} x {plural(self.host_buffers_per_slot, 'buffer')} "
            f"of {format_bytes(self.buffer_bytes)}"
            + (f" + {format_bytes(self.host_fixed_bytes)} of images" if self.host_fixed_bytes else "")
        )
        if self.gpu_budget is not None:
            lines.append(
                f"GPU memory {format_bytes(self.device_bytes_per_lane)} per GPU (budget "
                f"{format_bytes(self.gpu_budget)}): {plural(self.depth, 'slot')} x "
                f"{plural(self.device_buffers_per_slot, 'buffer')} of {format_bytes(self.buffer_bytes)} + "
                f"{format_bytes(self.device_fixed_bytes)} of images"
                + (f"; {self.concurrency} chunks computing at once" if self.concurrency > 1 else "")
            )
        return "\n".join(lines)


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``"1 chunk"``, ``"2 chunks"`` (``nouns``: the plural when it is not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


# --------------------------------------------------------------------------------------
# memory figures
# --------------------------------------------------------------------------------------
def host_available_bytes() -> int:
    """``MemAvailable`` from /proc/meminfo (Linux); elsewhere physical pages x page size."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def default_host_budget() -> int:
    """A quarter of the available host memory."""
    return max(int(host_available_bytes() * HOST_FRACTION), 64 << 20)


def default_gpu_budget(free_bytes: int, total_bytes: int) -> int:
    """Free GPU memory less a reserve (the larger of 1 GiB and 10 % of the device)."""
    reserve = max(GPU_RESERVE_BYTES, total_bytes // 10)
    return max(int(free_bytes) - reserve, 0)


_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "KB": 1 << 10,
    "KIB": 1 << 10,
    "M": 1 << 20,
    "MB": 1 << 20,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GB": 1 << 30,
    "GIB": 1 << 30,
    "T": 1 << 40,
    "TB": 1 << 40,
    "TIB": 1 << 40,
}


def parse_bytes(text: str | int) -> int:
    """``"512M"``, ``"2G"``, ``"1.5GiB"``, ``"1048576"`` -> bytes (binary units)."""
    if isinstance(text, (int, np.integer)):
        value = int(text)
    else:
        s = str(text).strip().upper().replace(" ", "")
        num = s.rstrip("KMGTIB")
        unit = s[len(num) :]
        if unit not in _UNITS or not num:
            raise PlanError(f"cannot read a memory size from {text!r} (examples: 512M, 2G, 1048576)")
        try:
            value = int(float(num) * _UNITS[unit])
        except ValueError:
            raise PlanError(f"cannot read a memory size from {text!r} (examples: 512M, 2G, 1048576)") from None
    if value <= 0:
        raise PlanError(f"a memory size must be positive, not {text!r}")
    return value


def format_bytes(n: int | float) -> str:
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


# --------------------------------------------------------------------------------------
# planning
# --------------------------------------------------------------------------------------
def make_plan(
    proj_data_info,
    segments: Sequence[int],
    views: Sequence[int],
    *,
    lanes: int,
    host_buffers_per_slot: int,
    device_buffers_per_slot: int | None,
    host_budget: int,
    gpu_budget: int | None,
    host_fixed_bytes: int = 0,
    device_fixed_bytes: int = 0,
    depth: int = 2,
    max_views_per_chunk: int | None = None,
    target_chunk_bytes: int | None = None,
    ramp_up: bool = False,
    taper: bool = True,
    min_head_bytes: int = MIN_CHUNK_BYTES,
) -> Plan:
    """Split ``views`` of each of ``segments`` into chunks that fit the budgets.

    ``views``: one sequence for every segment, or a mapping segment -> views (a process's
    share of a call under MPI: :func:`stirgpu.distributed.share_viewgrams`); a segment
    whose views are empty gets no part.

    ``device_buffers_per_slot`` / ``gpu_budget`` are ``None`` for the CPU backend (its
    buffers are the host buffers).  ``target_chunk_bytes`` overrides the automatic target
    (a few chunks per lane, between 4 MiB per timing position and 64 MiB) and turns off the
    size shaping:
    ``ramp_up`` makes each lane's first chunks small (1/8, 1/4, 1/2 of the target, not
    below ``min_head_bytes``, default 4 MiB: the device starts computing after a short read
    and upload), ``taper``
    the last ones (the drain after the last kernel -- its download and write -- stays
    short).
    """
    lanes, depth = int(lanes), int(depth)
    if lanes < 1 or depth < 1:
        raise PlanError(f"need at least one lane and one slot (got lanes={lanes}, depth={depth})")
    segments = sorted(int(s) for s in segments)
    by_segment = views_by_segment(segments, views)
    segments = [s for s in segments if len(by_segment[s])]
    nt = proj_data_info.get_num_tangential_poss()
    # a viewgram of TOF data is all its timing positions: memory per chunk stays bounded by the
    # budgets whatever the number of TOF bins
    ntof = proj_data_info.get_num_tof_poss()
    view_bytes = {s: 4 * ntof * proj_data_info.get_num_axial_poss(s) * nt for s in segments}
    if not segments:
        return Plan(
            (),
            lanes,
            depth,
            0,
            host_buffers_per_slot,
            device_buffers_per_slot or 0,
            host_fixed_bytes,
            device_fixed_bytes,
            int(host_budget),
            gpu_budget,
        )
    largest = max(view_bytes.values())

    fit = _bytes_per_buffer(
        lanes,
        depth,
        largest,
        host_buffers_per_slot,
        device_buffers_per_slot,
        host_budget,
        gpu_budget,
        host_fixed_bytes,
        device_fixed_bytes,
    )

    total = sum(len(by_segment[s]) * view_bytes[s] for s in segments)
    cap, floor, head = _chunk_bytes(
        total, largest, fit, lanes, ntof, target_chunk_bytes, ramp_up, taper, min_head_bytes
    )
    chunks = _cut(by_segment, segments, view_bytes, nt, proj_data_info, cap, floor, head, lanes, max_views_per_chunk)
    buffer_bytes = max(c.nbytes for c in chunks)
    return Plan(
        tuple(chunks),
        lanes,
        depth,
        buffer_bytes,
        host_buffers_per_slot,
        int(device_buffers_per_slot or 0),
        int(host_fixed_bytes),
        int(device_fixed_bytes),
        int(host_budget),
        None if gpu_budget is None else int(gpu_budget),
    )


def _chunk_bytes(
    total: int,
    largest: int,
    fit: int | None,
    lanes: int,
    ntof: int,
    target_chunk_bytes: int | None,
    ramp_up: bool,
    taper: bool,
    min_head_bytes: int,
) -> tuple[int, int, int]:
    """(cap, floor, head): the largest chunk, the size the last chunks shrink to and the size of
    each lane's first chunks, for ``total`` bytes of data whose ``largest`` viewgram is that big
    and whose buffers may hold ``fit`` bytes (None: no limit); see :func:`make_plan`."""
    # the smallest chunk worth making holds as many LORs for TOF data as for non-TOF ones: a
    # chunk is one kernel launch of one thread per LOR, and a launch of a wave or two of the
    # GPU's threads pays its tail (its last blocks on a part of the GPU) as a large share
    smallest = min(MIN_CHUNK_BYTES * ntof, MAX_CHUNK_BYTES)
    if target_chunk_bytes is None:
        target = min(max(math.ceil(total / (CHUNKS_PER_LANE * lanes)), smallest), MAX_CHUNK_BYTES)
    else:
        target = int(target_chunk_bytes)
    cap = max(target, largest) if fit is None else min(fit, max(target, largest))

    # taper: the last chunks shrink (down to ``floor``) so that the pipeline's drain -- the
    # last chunk's download and write, or the first one's read and upload -- is short
    shaped = target_chunk_bytes is None
    floor = min(cap, max(smallest, cap // 8, largest)) if shaped and taper else cap
    # (calls whose chunks are at the minimum size anyway -- a subset -- are not shaped: more
    # chunks would cost more in per-chunk overhead than a shorter fill or drain saves)
    head = min(cap, max(int(min_head_bytes), largest)) if shaped and ramp_up else cap
    return cap, floor, head


def _bytes_per_buffer(
    lanes: int,
    depth: int,
    largest: int,
    host_buffers_per_slot: int,
    device_buffers_per_slot: int | None,
    host_budget: int,
    gpu_budget: int | None,
    host_fixed_bytes: int,
    device_fixed_bytes: int,
) -> int | None:
    """The bytes one buffer may take under the host and GPU budgets, less their images, shared by
    every slot's buffers (None: no limit); a clear error where not even the ``largest`` viewgram
    fits, naming the budget that refuses it."""
    limits = []  # (name, bytes per buffer allowed, explanation)
    if host_buffers_per_slot > 0:
        free = int(host_budget) - int(host_fixed_bytes)
        n = lanes * depth * host_buffers_per_slot
        limits.append(
            (
                "host",
                free // n if free > 0 else 0,
                f"host budget {format_bytes(host_budget)} less {format_bytes(host_fixed_bytes)} "
                f"of images, shared by {n} buffers ({plural(lanes, 'lane')} x {depth} slots x "
                f"{host_buffers_per_slot})",
            )
        )
    elif host_fixed_bytes > host_budget:
        raise PlanError(
            f"the images alone need {format_bytes(host_fixed_bytes)} of host memory, more "
            f"than the host budget {format_bytes(host_budget)}"
        )
    if gpu_budget is not None:
        free = int(gpu_budget) - int(device_fixed_bytes)
        n = depth * max(int(device_buffers_per_slot or 0), 1)
        limits.append(
            (
                "GPU",
                free // n if free > 0 else 0,
                f"GPU budget {format_bytes(gpu_budget)} per device less "
                f"{format_bytes(device_fixed_bytes)} of images, shared by {n} buffers "
                f"({depth} slots x {device_buffers_per_slot})",
            )
        )
    fit = min((lim for _, lim, _ in limits), default=None)
    if fit is not None and fit < largest:
        name, lim, why = min(limits, key=lambda t: t[1])
        raise PlanError(
            f"not even one viewgram fits the {name} memory budget: one view of the largest "
            f"segment is {format_bytes(largest)} ({largest} bytes) per buffer, but the "
            f"{why} leaves {format_bytes(max(lim, 0))} ({max(lim, 0)} bytes) per buffer; "
            f"raise the budget{' or lower the number of lanes' if lanes > 1 else ''}"
        )
    return fit


def views_by_segment(segments: Sequence[int], views) -> dict[int, np.ndarray]:
    """``views`` (one sequence for all ``segments``, or a mapping segment -> views) as sorted,
    distinct views per segment (a segment the mapping leaves out has none)."""
    if isinstance(views, Mapping):
        return {int(s): np.unique(np.asarray(list(views.get(s, ())), dtype=np.int64)) for s in segments}
    common = np.unique(np.asarray(list(views), dtype=np.int64))
    return {int(s): common for s in segments}


def _cut(
    views: dict[int, np.ndarray],
    segments: list[int],
    view_bytes: dict,
    nt: int,
    proj_data_info,
    cap: int,
    floor: int,
    head: int,
    lanes: int,
    max_views: int | None,
) -> list[Chunk]:
    """Cut the viewgrams (segments in order, then ``views``) into chunks of at most ``cap``
    bytes (and ``max_views`` viewgrams); a chunk gets one part per segment it touches.
    Each lane's first three chunks hold at most 1/8, 1/4, 1/2 of ``cap`` (not less than
    ``head``; ``head == cap``: no ramp).  Near the end a chunk takes at most half of what is
    left per lane, but never less than ``floor`` (guided scheduling: the tail shrinks
    geometrically; ``floor == cap``: no taper)."""
    chunks: list[Chunk] = []
    parts: list[ChunkPart] = []
    used = 0  # bytes of the open chunk
    count = 0  # viewgrams of the open chunk
    left = sum(view_bytes[s] * len(views[s]) for s in segments)  # bytes not yet in a chunk
    limit = sum(len(views[s]) for s in segments) if max_views is None else max(int(max_views), 1)

    def capacity() -> int:
        """Bytes the next chunk may hold."""
        size = cap
        round_ = len(chunks) // lanes
        if round_ < 3:
            size = max(head, cap >> (3 - round_))
        return min(size, max(floor, -(-left // (2 * lanes))))

    size = capacity()  # the open chunk's

    def close():
        nonlocal parts, used, count, size
        if parts:
            chunks.append(Chunk(len(chunks), tuple(parts)))
        parts, used, count = [], 0, 0
        size = capacity()

    lo = proj_data_info.get_min_tof_pos_num() if proj_data_info.is_tof_data() else 0
    timing_poss = tuple(range(lo, lo + proj_data_info.get_num_tof_poss()))
    for s in segments:
        vb = view_bytes[s]
        na = proj_data_info.get_num_axial_poss(s)
        mine = views[s]
        i = 0
        while i < len(mine):
            room = min((size - used) // vb, limit - count)
            if room <= 0:
                close()
                continue
            take = min(room, len(mine) - i)
            vs = tuple(int(v) for v in mine[i : i + take])
            offset = parts[-1].stop if parts else 0
            parts.append(ChunkPart(s, vs, (take, na, nt), offset, timing_poss))
            used += take * vb
            left -= take * vb
            count += take
            i += take
    close()
    return chunks
