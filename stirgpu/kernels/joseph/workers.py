"""How the CPU kernels share their LORs out among threads (numba), for the Joseph kernels
(:mod:`.cpu`) and the TOF ones (:mod:`stirgpu.kernels.tof.cpu`).

A forward projection is one parallel loop over LORs, each writing its own value.  A back
projection is race-free by giving each of K workers its own float32 image: worker 0 adds into
the output itself, workers 1..K-1 into zeroed extra images (LORs are dealt out round-robin, so
neighbouring LORs -- similar lengths -- go to different workers and the load stays balanced); the
extra images are then added to the output in a parallel loop over voxels (:func:`reduce_slabs`).
This costs K-1 extra images of memory (:func:`extra_slabs` caps K by a byte budget) but needs no
atomics, which numba does not have for floats on the CPU.  A pipeline call keeps one set of
worker images over all its chunks (:class:`WorkerImages`) and adds them in once.

The parallel kernels release the GIL (``nogil``): the caller's other threads -- a pipeline's
readers and writers, the main thread handling Ctrl-C -- run meanwhile.  The kernels take a bin
range ``[lo, hi)``, so that a caller can split a long call into pieces and look at a
cancellation flag between them (:func:`lor_ranges`; a flag read inside a numba loop is hoisted
out of it by the compiler, and a running kernel cannot be stopped from outside).  The pieces of
a back projection are multiples of its worker count, so every worker gets the very LORs, in the
very order, of one call over the whole range: the result does not depend on the split.
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, prange

from ...errors import Cancelled, GeometryError
from ..jit import cached_njit

__all__ = [
    "chunk_bin",
    "reduce_slabs",
    "extra_slabs",
    "back_project",
    "WorkerImages",
    "lor_ranges",
    "CANCEL_CHECK_LORS",
]


@cached_njit(fastmath=False)
def chunk_bin(idx, na, nt):
    """(view, axial, tangential) index of flat bin ``idx`` of a chunk ([view][axial][tangential])."""
    rest = idx // nt
    return rest // na, rest % na, idx % nt


@cached_njit(parallel=True, nogil=True, fastmath=False)
def reduce_slabs(extra, out):
    """``out += sum_k extra[k]`` (the sum formed in float64, added once per voxel)."""
    nk = extra.shape[0]
    nvox = out.shape[0]
    for j in prange(nvox):
        acc = 0.0
        for k in range(nk):
            acc += extra[k, j]
        out[j] = np.float32(out[j] + acc)


# --------------------------------------------------------------------------------------
# host-side helpers (plain Python)
# --------------------------------------------------------------------------------------
#: default byte budget for the extra per-worker images of a back projection
DEFAULT_SLAB_BYTES = 1 << 30


def extra_slabs(nvox: int, num_lors: int, max_slab_bytes: int = DEFAULT_SLAB_BYTES) -> np.ndarray:
    """Zeroed (K-1, nvox) float32 images for the workers k >= 1 of a back projection
    (worker 0 writes into the output itself).

    K = min(numba threads, LORs, 1 + images that fit in ``max_slab_bytes``), at least 1;
    with K == 1 the result has no rows and nothing needs reducing.
    """
    k = min(get_num_threads(), max(int(num_lors), 1), 1 + int(max_slab_bytes) // max(4 * int(nvox), 1))
    return np.zeros((max(k, 1) - 1, int(nvox)), dtype=np.float32)


class WorkerImages:
    """The extra per-worker images of back projections into one flat ``target``, kept over
    several calls (a pipeline call's chunks and their parts) and added into it once by
    :meth:`reduce`, instead of being made, zeroed and added for every part (each an
    image-sized write and read).  Made with the calling thread's numba thread count."""

    def __init__(self, target: np.ndarray, max_slab_bytes: int = DEFAULT_SLAB_BYTES):
        self.target = target
        self.extra = extra_slabs(target.shape[0], target.shape[0], max_slab_bytes)

    def adds_into(self, flat: np.ndarray) -> bool:
        """``flat`` is (a view of) the very memory of the target."""
        return flat.shape == self.target.shape and flat.ctypes.data == self.target.ctypes.data

    def reduce(self) -> None:
        """Add the extra images into the target and zero them (ready for more calls)."""
        if self.extra.shape[0]:
            reduce_slabs(self.extra, self.target)
            self.extra.fill(0)


def back_project(
    kernel,
    args_before,
    out_flat: np.ndarray,
    num_lors: int,
    args_after,
    max_slab_bytes: int = DEFAULT_SLAB_BYTES,
    cancel=None,
    workers: WorkerImages | None = None,
) -> None:
    """Run a back-projection kernel (:func:`stirgpu.kernels.joseph.cpu.back_lors`,
    :func:`~stirgpu.kernels.joseph.cpu.back_tables` or :func:`stirgpu.kernels.tof.cpu.back_tof`)
    race-free:
    ``kernel(*args_before, out_flat, extra, *args_after, lo, hi)`` over the LOR ranges of
    :func:`lor_ranges` (one without ``cancel``), then add the extra images -- or, with
    ``workers`` (whose target must be ``out_flat``), into its images, which its owner reduces."""
    if workers is not None and not workers.adds_into(out_flat):
        raise GeometryError("workers: the worker images belong to another target image")
    extra = extra_slabs(out_flat.shape[0], num_lors, max_slab_bytes) if workers is None else workers.extra
    for lo, hi in lor_ranges(num_lors, cancel, multiple=extra.shape[0] + 1):
        kernel(*args_before, out_flat, extra, *args_after, lo, hi)
    if workers is None and extra.shape[0]:
        reduce_slabs(extra, out_flat)


#: LORs a kernel call projects between two looks at its cancellation flag (about 0.1 s of a
#: forward projection on two cores; a launch of the parallel loop costs tens of microseconds)
CANCEL_CHECK_LORS = 1 << 16


def lor_ranges(num_lors: int, cancel=None, multiple: int = 1):
    """``[lo, hi)`` ranges covering ``range(num_lors)``: the whole range without ``cancel``;
    with it (anything with ``is_set()``, e.g. a :class:`threading.Event`), pieces of about
    :data:`CANCEL_CHECK_LORS` LORs (multiples of ``multiple``: a back projection's worker
    count), raising :class:`~stirgpu.errors.Cancelled` before the next piece once it is set."""
    n = int(num_lors)
    if cancel is None:
        if n > 0:
            yield 0, n
        return
    step = max(CANCEL_CHECK_LORS // int(multiple), 1) * int(multiple)
    for lo in range(0, n, step):
        if cancel.is_set():
            raise Cancelled(f"cancelled after {lo} of {n} LORs")
        yield lo, min(lo + step, n)
