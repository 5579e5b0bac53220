"""WHEN and on WHICH DEVICE: chunk plans, lanes, the streaming pipeline, statistics.

* :mod:`.plan` -- chunks of (segment, views) sized from GPU and host memory budgets (the views
  the same for every segment, or per segment: an MPI rank's share, see stirgpu.distributed);
* :mod:`.devices` -- backends ("cpu", "cuda") and lanes (one per GPU or CPU worker);
* :mod:`.program` -- chunk programs: what is read, computed and written per chunk;
* :mod:`.engine` -- :class:`Engine`, a façade over its parts: :mod:`.planning` (plans, budgets),
  :mod:`.direct_io` and :mod:`.pinning` (stores used in place), :mod:`.residency` (images on
  the devices), :mod:`.slots` and :mod:`.chunk_tables` (kept buffers and tables), :mod:`.call`
  and :mod:`.strategies` (one call: reader -> pinned slot -> H2D -> compute -> D2H -> writer
  threads, or one thread per GPU), :mod:`.stopping` (cancellation), :mod:`.identity` (the
  cache of answers kept per object); see README.md;
* :mod:`.stats` -- :class:`RunStats` (``projector.last_stats``) and per-stage events.

Importing this package does no work (no GPU probing, no compiling).
"""

from .devices import cuda_device_count, resolve_backend, resolve_devices
from .engine import Engine, KeptWorkspaces, RunResult
from .plan import Chunk, Plan, default_gpu_budget, default_host_budget, format_bytes, make_plan, parse_bytes
from .program import ChunkData, ChunkProgram
from .stats import STAGES, RunStats, StageEvent

__all__ = [
    "Chunk",
    "Plan",
    "make_plan",
    "parse_bytes",
    "format_bytes",
    "default_host_budget",
    "default_gpu_budget",
    "resolve_backend",
    "resolve_devices",
    "cuda_device_count",
    "Engine",
    "RunResult",
    "KeptWorkspaces",
    "ChunkProgram",
    "ChunkData",
    "RunStats",
    "StageEvent",
    "STAGES",
]
