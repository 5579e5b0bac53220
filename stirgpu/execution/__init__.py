"""WHEN and on WHICH DEVICE: chunk plans, lanes, the streaming pipeline, statistics.

* :mod:`.plan` -- chunks of (segment, views) sized from GPU and host memory budgets;
  :func:`partition` is the seam for splitting chunks over processes (docs/execution.md);
* :mod:`.devices` -- backends ("cpu", "cuda") and lanes (one per GPU or CPU worker);
* :mod:`.program` -- chunk programs: what is read, computed and written per chunk;
* :mod:`.pipeline` -- :class:`Engine`: reader -> pinned slot -> H2D -> compute -> D2H -> writer;
* :mod:`.stats` -- :class:`RunStats` (``projector.last_stats``) and per-stage events.

Importing this package does no work (no GPU probing, no compiling).
"""

from .devices import cuda_device_count, resolve_backend, resolve_devices
from .pipeline import Engine, RunResult
from .plan import Chunk, Plan, default_gpu_budget, default_host_budget, format_bytes, make_plan, parse_bytes, partition
from .program import ChunkData, ChunkProgram
from .stats import STAGES, RunStats, StageEvent

__all__ = [
    "Chunk",
    "Plan",
    "make_plan",
    "partition",
    "parse_bytes",
    "format_bytes",
    "default_host_budget",
    "default_gpu_budget",
    "resolve_backend",
    "resolve_devices",
    "cuda_device_count",
    "Engine",
    "RunResult",
    "ChunkProgram",
    "ChunkData",
    "RunStats",
    "StageEvent",
    "STAGES",
]
