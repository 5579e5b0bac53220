"""SIRF's OpenMP thread functions, on the threads of stirgpu's CPU backend.

STIR runs its loops on OpenMP threads; stirgpu's CPU backend runs its numba kernels (projections,
priors) on numba's threads (:mod:`stirgpu.kernels.threads`).  These functions set and read that
number through ``stirgpu.config``'s ``cpu_threads``, for the rest of the current context (thread),
as STIR's ``set_num_threads`` sets OpenMP's for the calling thread:

* ``set_max_omp_threads(n)`` -- ``n`` threads (0: unchanged, or the default if never set, as
  STIR's ``set_num_threads(0)``); at most numba's ``NUMBA_NUM_THREADS``, fixed when numba starts;
* ``get_max_omp_threads()`` -- the number in force;
* ``set_default_num_omp_threads()`` / ``get_default_num_omp_threads()`` -- numba's default,
  ``NUMBA_NUM_THREADS`` (the environment variable, else every core), where STIR's is 90 % of the
  cores or ``OMP_NUM_THREADS``.

The GPU backend has no threads to set: these change nothing there.
"""

from __future__ import annotations

from numbers import Integral

from ..config import get_config, update_config
from ..kernels.threads import default_cpu_threads
from .errors import InputError, InputTypeError

__all__ = ["set_max_omp_threads", "get_max_omp_threads", "set_default_num_omp_threads", "get_default_num_omp_threads"]


def set_max_omp_threads(threads) -> None:
    """SIRF's ``set_max_omp_threads``: the CPU backend's kernels use ``threads`` threads."""
    if isinstance(threads, bool) or not isinstance(threads, Integral):
        raise InputTypeError(f"set_max_omp_threads: threads must be an integer, not {type(threads).__name__}")
    n = int(threads)
    if n == 0:
        return
    if not 1 <= n <= default_cpu_threads():
        raise InputError(
            f"set_max_omp_threads: {n} threads; stirgpu's CPU kernels run on 1 to {default_cpu_threads()} "
            "(numba's NUMBA_NUM_THREADS: set that environment variable before starting Python for more)"
        )
    update_config(cpu_threads=n)


def get_max_omp_threads() -> int:
    """SIRF's ``get_max_omp_threads``: the threads the CPU backend's kernels use now."""
    n = get_config().cpu_threads
    return default_cpu_threads() if n is None else int(n)


def set_default_num_omp_threads() -> None:
    """SIRF's ``set_default_num_omp_threads``: back to :func:`get_default_num_omp_threads`."""
    update_config(cpu_threads=None)


def get_default_num_omp_threads() -> int:
    """SIRF's ``get_default_num_omp_threads``: numba's ``NUMBA_NUM_THREADS``."""
    return default_cpu_threads()
