"""STIR's OSEM quotient and log-likelihood on one chunk, as one kernel per chunk.

Model of one chunk::

    ybar = (A x) / f + b            f: multiplicative correction factors (STIR's
                                       ``Bin Normalisation From ProjData``: its undo divides),
                                    b: the background, in *measured* units

STIR's ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData`` has the mean
``(A x + a) / f`` with its ``additive sinogram`` ``a`` in *normalised* units, so ``b = a / f``
gives STIR's mean (for log-likelihoods), and ``b = a`` without factors gives the quotient
``y / (A x + a)`` that STIR's gradient back projects (:mod:`stirgpu.recon.objective` makes
both calls).

Quotient (STIR's ``divide_and_truncate(Viewgram&, const Viewgram&, ...)`` in
``recon_array_functions.cxx``), per *viewgram* (one segment, one view):
``small = max(max(y over the viewgram) * 1e-6, 0)``; then per bin

* ``y <= small``            -> 0   (includes 0/0 and negative data)
* ``y > 10000 * ybar``      -> 10000  (STIR's ``max_quotient``: cancels singularities,
  including ybar <= 0)
* otherwise                 -> ``y / ybar``

and the back-projected value is ``quotient / f`` (normalisation undone again).

Log-likelihood (STIR's ``accumulate_loglikelihood``), summed in float64:
``e = max(ybar, y / 10000)``; ``-e`` where ``y <= small``, else ``y log(e) - e``.

Where f == 0 (a bin with no correction factor; STIR would divide by zero and propagate
inf/NaN) the bin is left out: its quotient, back-projected value and log-likelihood term
are 0.  All arithmetic on bins is float32, as in STIR, each operation rounded on its own (no
fused multiply-add).

Each bin's rule is one pass over the chunk with no chunk-sized temporaries: numpy arrays go to
a numba kernel (:mod:`.cpu`), cupy arrays to one ``cupy.ElementwiseKernel`` (and, for
the log-likelihood, one ``cupy.ReductionKernel`` over the same bins) in :mod:`.cuda`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...arrays import array_kind
from ...errors import StirGpuError

__all__ = ["SMALL_FRACTION", "MAX_QUOTIENT", "poisson_quotient", "viewgram_rows"]

#: STIR's ``SMALL_NUM`` in ``recon_array_functions.cxx``
SMALL_FRACTION = np.float32(1e-6)
#: STIR's ``max_quotient`` in ``divide_and_truncate``
MAX_QUOTIENT = np.float32(10000.0)


def viewgram_rows(shape: tuple[int, ...], parts: Sequence[Any] | None) -> list[tuple[int, int, int]]:
    """``(first bin, viewgrams, bins per viewgram)`` of each part: the chunk's parts
    (``offset``, ``shape`` (nv, na, nt), ``num_tof_poss``), or without them one array whose first axis is the
    viewgrams (nv, ...)."""
    if parts is None:
        nv = int(shape[0]) if len(shape) else 1
        per = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        return [(0, nv, per)]
    # a part of TOF data is [timing position][view][...]: STIR's viewgrams are its rows
    return [
        (int(p.offset), int(getattr(p, "num_tof_poss", 1)) * int(p.shape[0]), int(p.shape[1]) * int(p.shape[2]))
        for p in parts
    ]


def poisson_quotient(fwd, y, background=None, multiplicative=None, out=None, loglik=None, parts=None):
    """STIR's OSEM quotient for one chunk: ``out = divide_and_truncate(y, ybar) / f``.

    ``fwd`` is the forward projection (A x), ``y`` the measured data, ``background`` (b,
    measured units) and ``multiplicative`` (f) optional; all float32 of one shape, numpy or
    cupy on one device: (nv, na, nt) (one segment), or flat with ``parts`` (the chunk's parts,
    :class:`stirgpu.execution.plan.ChunkPart`: ``offset``, ``stop``, ``shape``) saying where each
    segment's viewgrams are.  ``out`` may be ``fwd`` (each bin is read before it is written);
    without it a new array is returned.  With ``loglik`` (a float64 array of the arrays'
    kind) the chunk's log-likelihood is added to ``loglik[0]``.
    """
    kind = array_kind(fwd)
    if kind not in ("numpy", "cupy"):
        raise StirGpuError(f"poisson_quotient: expected numpy or cupy arrays, not {type(fwd).__name__}")
    named = {"y": y, "background": background, "multiplicative": multiplicative, "out": out}
    for name, a in named.items():
        if a is not None and array_kind(a) != kind:
            raise StirGpuError(f"poisson_quotient: {name} is a {array_kind(a)} array, fwd a {kind} array")
        if a is not None and a.dtype != np.float32:
            raise StirGpuError(f"poisson_quotient: {name} is {a.dtype}, expected float32")
        if a is not None and tuple(a.shape) != tuple(fwd.shape):
            raise StirGpuError(f"poisson_quotient: {name} has shape {tuple(a.shape)}, fwd {tuple(fwd.shape)}")
    if fwd.dtype != np.float32:
        raise StirGpuError(f"poisson_quotient: fwd is {fwd.dtype}, expected float32")
    rows = viewgram_rows(tuple(fwd.shape), parts)
    if kind == "numpy":
        from .cpu import quotient_cpu

        return quotient_cpu(fwd, y, background, multiplicative, out, loglik, rows)
    from .cuda import quotient_cuda

    return quotient_cuda(fwd, y, background, multiplicative, out, loglik, rows)
