"""What a call did and how long each part took: :class:`RunStats` (``projector.last_stats``).

Stages of a chunk on one lane: ``read`` (projection-data inputs into host buffers),
``h2d`` (host -> GPU), ``compute`` (kernels and element-wise work), ``d2h`` (GPU ->
host), ``write`` (outputs into the output store).  CPU lanes have no h2d/d2h.  GPU
stage times come from CUDA events, host stage times from ``time.perf_counter``; both
are on one clock (seconds since the call started) in :attr:`RunStats.events`.

Figures (docs/execution.md defines them with examples):

* ``busy[lane][stage]``: seconds the stage worked on that lane (the union of its chunks'
  intervals: on a GPU two chunks may compute at once);
* ``overlap_efficiency``: mean over lanes of (busiest stage's busy time / wall time).
  1.0 means every other stage was hidden behind the bottleneck stage; 0.5 means the
  call took twice as long as its slowest stage alone would have.  CPU lanes share one
  compute resource (the numba kernels use every core), so there compute counts once,
  summed over lanes;
* ``compute_utilisation``: mean over lanes of (compute busy / wall) (CPU: summed
  compute / wall) -- 1.0 means transfers and file I/O were completely hidden behind
  the kernels;
* ``concurrency``: sum of all stage busy times / (wall x lanes): above 1/num_stages the
  stages ran at the same time.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import threading
from collections.abc import Iterable

from .plan import plural

__all__ = ["StageEvent", "RunStats", "StatsRecorder", "STAGES", "peak_rss_bytes"]

STAGES = ("read", "h2d", "compute", "d2h", "write")


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (``getrusage``; KiB on Linux, bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r) if sys.platform == "darwin" else int(r) * 1024


@dataclasses.dataclass(frozen=True)
class StageEvent:
    """One stage of one chunk on one lane; ``start``/``end`` in seconds since the call began."""

    lane: str
    stage: str
    chunk: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


@dataclasses.dataclass
class RunStats:
    """Statistics of one projector call."""

    operation: str = ""
    #: the call's subset: ``subset_num`` of ``num_subsets`` (STIR's views v with
    #: v % num_subsets == subset_num; 0 of 1 is all views)
    subset_num: int = 0
    num_subsets: int = 1
    backend: str = ""
    lanes: tuple[str, ...] = ()
    chunks: int = 0
    chunks_per_lane: dict = dataclasses.field(default_factory=dict)
    bins: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_uploaded: int = 0
    bytes_downloaded: int = 0
    wall_seconds: float = 0.0
    setup_seconds: float = 0.0
    busy: dict = dataclasses.field(default_factory=dict)  # lane -> stage -> seconds
    events: list = dataclasses.field(default_factory=list)  # StageEvent
    host_bytes_allocated: int = 0
    device_bytes_allocated: int = 0
    peak_rss_bytes: int = 0
    plan: str = ""
    #: True when the lanes share one compute resource (the CPU backend)
    shared_compute: bool = False
    #: the call's stores that GPUs copied straight to and from (page-locked host memory: no
    #: read/write stage, their bytes move in h2d/d2h)
    direct: tuple = ()
    #: attempts of the call that ran out of memory and were retried with smaller chunks (the
    #: chunks, bytes, busy times and events above are the last attempt's; wall and set-up
    #: seconds count from the call's start; docs/execution.md)
    memory_retries: int = 0
    #: MPI ranks that took part (each did its share of the bins; see stirgpu.distributed), this
    #: process's rank among them, and the collective steps' bytes (this rank's contribution)
    #: and seconds (waiting for the other ranks included)
    ranks: int = 1
    rank: int = 0
    exchanged_bytes: int = 0
    exchange_seconds: float = 0.0
    #: how the call's image was summed over the ranks, in words ("on the GPUs (CUDA-aware MPI:
    #: ...)", "through host staging (...)", "in host memory"; "" without an image or MPI)
    image_sum: str = ""

    # -- derived figures -------------------------------------------------------------
    @property
    def what(self) -> str:
        """The operation and its subset in words, e.g. ``"back projection, subset 3 of 21"``."""
        name = self.operation or "projector call"
        return name if self.num_subsets == 1 else f"{name}, subset {self.subset_num} of {self.num_subsets}"

    def stage_seconds(self, stage: str) -> float:
        """Busy seconds of one stage summed over lanes."""
        return sum(b.get(stage, 0.0) for b in self.busy.values())

    @property
    def overlap_efficiency(self) -> float:
        if not self.busy or self.wall_seconds <= 0:
            return 0.0
        skip = ("compute",) if self.shared_compute else ()
        vals = [
            max((v for k, v in b.items() if k not in skip), default=0.0) / self.wall_seconds for b in self.busy.values()
        ]
        lanes = sum(vals) / len(vals)
        return max(lanes, self.compute_utilisation) if self.shared_compute else lanes

    @property
    def compute_utilisation(self) -> float:
        if not self.busy or self.wall_seconds <= 0:
            return 0.0
        vals = [b.get("compute", 0.0) / self.wall_seconds for b in self.busy.values()]
        return sum(vals) if self.shared_compute else sum(vals) / len(vals)

    @property
    def concurrency(self) -> float:
        if not self.busy or self.wall_seconds <= 0:
            return 0.0
        total = sum(sum(b.values()) for b in self.busy.values())
        return total / (self.wall_seconds * len(self.busy))

    def as_dict(self) -> dict:
        """Plain numbers (JSON-ready); events are left out."""
        return {
            "operation": self.operation,
            "subset_num": self.subset_num,
            "num_subsets": self.num_subsets,
            "backend": self.backend,
            "lanes": list(self.lanes),
            "chunks": self.chunks,
            "chunks_per_lane": dict(self.chunks_per_lane),
            "bins": self.bins,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "bytes_uploaded": self.bytes_uploaded,
            "bytes_downloaded": self.bytes_downloaded,
            "wall_seconds": self.wall_seconds,
            "setup_seconds": self.setup_seconds,
            "busy_seconds": {k: dict(v) for k, v in self.busy.items()},
            "overlap_efficiency": self.overlap_efficiency,
            "compute_utilisation": self.compute_utilisation,
            "concurrency": self.concurrency,
            "host_bytes_allocated": self.host_bytes_allocated,
            "device_bytes_allocated": self.device_bytes_allocated,
            "peak_rss_bytes": self.peak_rss_bytes,
            "direct": list(self.direct),
            "memory_retries": self.memory_retries,
            "ranks": self.ranks,
            "rank": self.rank,
            "exchanged_bytes": self.exchanged_bytes,
            "exchange_seconds": self.exchange_seconds,
            "image_sum": self.image_sum,
        }

    def summary(self) -> str:
        """A few readable lines."""
        gb = 1e9
        lines = [
            f"{self.what} on {self.backend} ({', '.join(self.lanes)}): {plural(self.chunks, 'chunk')}, "
            f"{plural(self.bins, 'bin')}"
            + (f" (rank {self.rank}'s share, on {self.ranks} MPI ranks)" if self.ranks > 1 else "")
            + f", wall {self.wall_seconds:.3f} s (set-up {self.setup_seconds:.3f} s)",
            f"  read {self.bytes_read / gb:.3f} GB, written {self.bytes_written / gb:.3f} GB, "
            f"uploaded {self.bytes_uploaded / gb:.3f} GB, downloaded {self.bytes_downloaded / gb:.3f} GB"
            + (f" (straight to/from {', '.join(self.direct)})" if self.direct else ""),
        ]
        if self.ranks > 1:
            lines.append(
                f"  MPI: {self.exchanged_bytes / gb:.3f} GB reduced or exchanged with the other ranks in "
                f"{self.exchange_seconds:.3f} s (waiting for them included)"
                + (f"; the image summed {self.image_sum}" if self.image_sum else "")
            )
        for lane, b in self.busy.items():
            parts = ", ".join(f"{s} {b[s]:.3f}" for s in STAGES if s in b)
            lines.append(
                f"  {lane}: {plural(self.chunks_per_lane.get(lane, 0), 'chunk')}; "
                + (f"busy s: {parts}" if parts else "idle")
            )
        lines.append(
            f"  overlap efficiency {self.overlap_efficiency:.2f}, compute utilisation "
            f"{self.compute_utilisation:.2f}, concurrency {self.concurrency:.2f}"
        )
        gpu = f", GPU {self.device_bytes_allocated / 1e6:.1f} MB per device" if self.backend == "cuda" else ""
        lines.append(
            f"  allocated: host {self.host_bytes_allocated / 1e6:.1f} MB{gpu}; peak RSS "
            f"{self.peak_rss_bytes / 1e6:.1f} MB"
        )
        if self.memory_retries:
            lines.append(
                f"  out of memory {plural(self.memory_retries, 'time')}: retried with smaller chunks "
                f"(the chunks and bytes are the last attempt's)"
            )
        return "\n".join(lines)


class StatsRecorder:
    """Thread-safe collector used by the pipeline while a call runs."""

    def __init__(self, lanes: Iterable[str], t0: float):
        self._lock = threading.Lock()
        self.t0 = t0
        self.lanes = tuple(lanes)
        self.busy: dict[str, dict[str, float]] = {lane: {} for lane in self.lanes}
        self.events: list[StageEvent] = []
        self._ends: dict = {}  # (lane, stage) -> latest end recorded
        self.chunks_per_lane = {lane: 0 for lane in self.lanes}
        self.counters = {
            "bytes_read": 0,
            "bytes_written": 0,
            "bytes_uploaded": 0,
            "bytes_downloaded": 0,
            "chunks": 0,
            "bins": 0,
        }

    def stage(self, lane: str, stage: str, chunk: int, start: float, end: float) -> None:
        """Record a stage with absolute perf_counter times."""
        ev = StageEvent(lane, stage, chunk, start - self.t0, end - self.t0)
        with self._lock:
            self.events.append(ev)
            # busy time is the union of the stage's intervals: a GPU's chunks overlap on its
            # compute streams (each lane records its stages in chunk order, so an interval
            # can only overlap the ones before it, which end by ``last``)
            b = self.busy[lane]
            key = (lane, stage)
            last = self._ends.get(key, ev.start)
            b[stage] = b.get(stage, 0.0) + max(ev.end - max(ev.start, last), 0.0)
            self._ends[key] = max(last, ev.end)

    def add(self, **counts) -> None:
        with self._lock:
            for k, v in counts.items():
                self.counters[k] += int(v)

    def chunk_done(self, lane: str, bins: int) -> None:
        with self._lock:
            self.chunks_per_lane[lane] += 1
            self.counters["chunks"] += 1
            self.counters["bins"] += int(bins)

    def finish(self, **fields) -> RunStats:
        with self._lock:
            return RunStats(
                lanes=self.lanes,
                busy={k: dict(v) for k, v in self.busy.items()},
                events=sorted(self.events, key=lambda e: (e.start, e.lane)),
                chunks_per_lane=dict(self.chunks_per_lane),
                peak_rss_bytes=peak_rss_bytes(),
                bytes_read=self.counters["bytes_read"],
                bytes_written=self.counters["bytes_written"],
                bytes_uploaded=self.counters["bytes_uploaded"],
                bytes_downloaded=self.counters["bytes_downloaded"],
                chunks=self.counters["chunks"],
                bins=self.counters["bins"],
                **fields,
            )
