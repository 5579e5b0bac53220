"""Element-wise steps of OSEM on one chunk, with STIR's rules; numpy or cupy (``xp``).

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
are 0.  All arithmetic on bins is float32, as in STIR.
"""

from __future__ import annotations

import numpy as np

from ..errors import renamed_arguments

__all__ = ["SMALL_FRACTION", "MAX_QUOTIENT", "poisson_quotient", "inverse_factors"]

#: STIR's ``SMALL_NUM`` in ``recon_array_functions.cxx``
SMALL_FRACTION = np.float32(1e-6)
#: STIR's ``max_quotient`` in ``divide_and_truncate``
MAX_QUOTIENT = np.float32(10000.0)

#: what a call with the old name of ``background`` is told
BACKGROUND_RENAMED = (
    "the term in measured units, added after the factors (ybar = A x / f + b), is "
    "'background' now; STIR's additive sinogram a (ybar = (A x + a) / f) is background = a / f"
)

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


def inverse_factors(xp, f, out):
    """``out = 1 / f`` where f != 0, else 0 (float32)."""
    ok = f != _F0
    out[...] = xp.where(ok, xp.reciprocal(xp.where(ok, f, _F1)), _F0)
    return out


def _above_small(xp, y, parts):
    """``y > small`` with STIR's per-viewgram ``small`` (see the module docstring)."""
    if parts is None:
        nv = y.shape[0]
        small = xp.maximum(y.reshape(nv, -1).max(axis=1) * SMALL_FRACTION, _F0).reshape((nv,) + (1,) * (y.ndim - 1))
        return y > small
    keep = xp.empty(y.shape, dtype=bool)
    for p in parts:
        nv = p.shape[0]
        yp = y[p.offset : p.stop].reshape(nv, -1)
        small = xp.maximum(yp.max(axis=1) * SMALL_FRACTION, _F0).reshape(nv, 1)
        keep[p.offset : p.stop].reshape(nv, -1)[...] = yp > small
    return keep


@renamed_arguments(additive=BACKGROUND_RENAMED)
def poisson_quotient(xp, fwd, y, background=None, multiplicative=None, out=None, loglik=None, parts=None):
    """STIR's OSEM quotient for one chunk: ``out = divide_and_truncate(y, ybar) / f``.

    ``fwd`` is the forward projection (A x), ``y`` the measured data, ``background`` (b,
    measured units) and ``multiplicative`` (f) optional; all float32 of one shape on one device: (nv, na, nt)
    (one segment), or flat with ``parts`` (the chunk's parts, :class:`stirgpu.execution.plan.ChunkPart`:
    ``offset``, ``stop``, ``shape``) saying where each segment's viewgrams are.  ``out`` may
    be ``fwd`` (it is written last).  With ``loglik`` (a float64 device array) the chunk's
    log-likelihood is added to ``loglik[0]``.
    """
    ok = None
    ybar = fwd
    if multiplicative is not None:
        ok = multiplicative != _F0
        ybar = fwd / xp.where(ok, multiplicative, _F1)
    if background is not None:
        ybar = ybar + background
    keep = _above_small(xp, y, parts)
    big = y > ybar * MAX_QUOTIENT  # array first: cupy arrays never meet numpy scalars' operators
    divide = keep & ~big  # here ybar >= y / 10000 > 0
    q = xp.where(divide, y / xp.where(divide, ybar, _F1), _F0)
    q = xp.where(keep & big, MAX_QUOTIENT, q)
    if ok is not None:
        q = xp.where(ok, q / xp.where(ok, multiplicative, _F1), _F0)
    if loglik is not None:
        est = xp.maximum(ybar, y / MAX_QUOTIENT)
        logs = xp.log(xp.where(keep, est, _F1).astype(xp.float64))
        term = xp.where(keep, y.astype(xp.float64) * logs, 0.0) - est.astype(xp.float64)
        if ok is not None:
            term = xp.where(ok, term, 0.0)
        loglik[0] += term.sum()
    if out is None:
        return q
    out[...] = q
    return out
