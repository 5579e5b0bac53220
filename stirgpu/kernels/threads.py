"""The number of threads of the CPU backend's numba kernels.

numba runs a parallel kernel on the threads its calling thread allows (``numba.set_num_threads``,
a per-thread setting that new threads do not inherit), at most ``numba.config.NUMBA_NUM_THREADS``
(the ``NUMBA_NUM_THREADS`` environment variable, else every core), fixed when numba starts.
:func:`numba_threads` applies ``stirgpu.config``'s ``cpu_threads`` in the thread that launches
the kernels, for one call, and restores the thread's own setting after.  With ``cpu_threads``
None it does not call numba at all: with numba's OpenMP threading layer, asking numba for its
threads (which starts that layer in the calling thread) or setting them changes OpenMP's thread
count of the calling thread, which inside STIR (the plugin projects on STIR's thread) would
replace the ``OMP_NUM_THREADS`` STIR's own loops run with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..errors import StirGpuError

__all__ = ["default_cpu_threads", "numba_threads"]


def default_cpu_threads() -> int:
    """numba's maximum (and default) number of threads: ``NUMBA_NUM_THREADS``, else the cores."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]  # (set at numba's start)


@contextlib.contextmanager
def numba_threads(num_threads: int | None) -> Iterator[int | None]:
    """numba's kernels launched from this thread inside the block use ``num_threads`` threads
    (None: numba is not touched, see the module docstring); yields ``num_threads``."""
    if num_threads is None:
        yield None
        return
    import numba

    n = int(num_threads)
    if not 1 <= n <= default_cpu_threads():
        raise StirGpuError(
            f"cpu_threads {num_threads}: must be from 1 to {default_cpu_threads()} (numba's NUMBA_NUM_THREADS; "
            "set that environment variable before starting Python for more)"
        )
    before = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        yield n
    finally:
        numba.set_num_threads(before)
