"""Whether this process's MPI takes CUDA device buffers (a CUDA-aware MPI), and how that is known.

mpi4py hands any buffer with ``__cuda_array_interface__`` (cupy arrays) to the MPI library as a
device pointer; only a CUDA-aware MPI can use it.  mpi4py itself does not say whether the MPI is
one, so the MPI library is asked, in this order:

1. ``STIRGPU_MPI_CUDA_AWARE=1`` or ``=0`` in the environment: the user's word, over anything the
   MPI says (Open MPI's own query, for one, may say 0 where UCX moves device buffers all the same);
2. MPI 4.1's memory allocation kinds: ``cuda:device`` among the communicator's
   ``mpi_memory_alloc_kinds`` info (Open MPI 6, recent MPICH);
3. ``MPIX_Query_cuda_support()``, the extension both Open MPI and MPICH export, looked up in the
   library mpi4py loaded (through its extension module: the MPI this process really uses).

Nothing is asked at import; :func:`is_cuda_aware` is called once per communicator, at its first sum
of a device image (:meth:`~.comm.Communicator.sum_image`).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

from ..errors import StirGpuError

__all__ = ["CUDA_AWARE_VARIABLE", "is_cuda_aware", "allocation_kinds", "mpix_query_cuda_support"]

#: the environment variable that says whether the MPI is CUDA-aware (1 or 0), over the MPI's word
CUDA_AWARE_VARIABLE = "STIRGPU_MPI_CUDA_AWARE"
#: MPI 4.1's info key listing the memory kinds the MPI supports, and CUDA device memory's kind
_ALLOC_KINDS_KEY, _CUDA_DEVICE_KIND = "mpi_memory_alloc_kinds", "cuda:device"


def is_cuda_aware(mpi_comm, environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """(whether the MPI of ``mpi_comm`` takes CUDA device buffers, how that was found, in words
    for the run's log).  ``STIRGPU_MPI_CUDA_AWARE`` other than 0 or 1: a StirGpuError naming it."""
    env = os.environ if environ is None else environ
    given = env.get(CUDA_AWARE_VARIABLE)
    if given is not None:
        if given.strip() not in ("0", "1"):
            raise StirGpuError(f"{CUDA_AWARE_VARIABLE}={given!r}: must be 1 (the MPI is CUDA-aware) or 0 (it is not)")
        return given.strip() == "1", f"{CUDA_AWARE_VARIABLE}={given.strip()}"
    kinds = allocation_kinds(mpi_comm)
    if kinds is not None and _CUDA_DEVICE_KIND in kinds:
        return True, f"{_ALLOC_KINDS_KEY} lists {_CUDA_DEVICE_KIND}"
    answer = mpix_query_cuda_support()
    if answer is not None:
        return answer == 1, f"MPIX_Query_cuda_support() = {answer}"
    listed = "" if kinds is None else f" ({_ALLOC_KINDS_KEY}: {','.join(kinds)})"
    return False, f"the MPI says nothing of CUDA{listed}; set {CUDA_AWARE_VARIABLE}=1 if it is CUDA-aware"


def allocation_kinds(mpi_comm) -> tuple[str, ...] | None:
    """The memory kinds of MPI 4.1's ``mpi_memory_alloc_kinds`` info of ``mpi_comm`` (None where
    the MPI or the communicator does not give that key)."""
    try:
        info = mpi_comm.Get_info()
    except (AttributeError, NotImplementedError, RuntimeError):
        return None
    try:
        value = info.Get(_ALLOC_KINDS_KEY)
    finally:
        free = getattr(info, "Free", None)
        if free is not None:
            free()
    if not value:
        return None
    return tuple(kind.strip() for kind in str(value).split(",") if kind.strip())


def mpix_query_cuda_support() -> int | None:
    """``MPIX_Query_cuda_support()`` of the MPI library mpi4py loaded (1: CUDA-aware, 0: not);
    None where that library has no such function.  MPI must be initialised (mpi4py is imported)."""
    from mpi4py import MPI

    path = getattr(MPI, "__file__", None)
    if path is None:
        return None
    try:  # (a symbol of a library the extension module links against is found through it)
        query = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support")  # noqa: B009
    except (OSError, AttributeError):
        return None
    query.restype, query.argtypes = ctypes.c_int, []
    return int(query())
