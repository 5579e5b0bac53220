"""Beyond one process: projections and OSEM shared by MPI ranks (through mpi4py).

Each rank of a communicator projects its share of every call's viewgrams (balanced by bins,
:mod:`.share`); back projections and log-likelihoods are summed over the ranks
(:class:`Communicator`: on the GPUs where the MPI is CUDA-aware, :mod:`.cuda_aware`, else
through bounded host staging); forward projections go into one file that the ranks write, each its
share (:func:`shared_output`), or are completed on every rank (:func:`complete_on_every_rank`).
mpi4py is imported only under an MPI launcher or when a communicator is passed.  See
docs/distributed.md.
"""

from __future__ import annotations

from .comm import STAGING_BYTES, Communicator, as_communicator, describe_failure, launched_by_mpi, world
from .cuda_aware import CUDA_AWARE_VARIABLE, is_cuda_aware
from .outputs import complete_on_every_rank, shared_output, written_by_ranks
from .share import share_bins, share_viewgrams

__all__ = [
    "Communicator",
    "world",
    "as_communicator",
    "launched_by_mpi",
    "describe_failure",
    "staging_bytes",
    "share_viewgrams",
    "share_bins",
    "shared_output",
    "complete_on_every_rank",
    "written_by_ranks",
    "STAGING_BYTES",
    "is_cuda_aware",
    "CUDA_AWARE_VARIABLE",
]


def staging_bytes(host_memory_budget: int | None) -> int:
    """The size of each of the two host staging buffers of a sum over the ranks: an eighth of
    the host memory budget, at most :data:`STAGING_BYTES` (that, without a budget)."""
    if host_memory_budget is None:
        return STAGING_BYTES
    return max(min(STAGING_BYTES, int(host_memory_budget) // 8), 1 << 16)
