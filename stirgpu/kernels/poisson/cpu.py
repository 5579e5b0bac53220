"""The OSEM quotient of :mod:`.poisson` on the CPU: one numba pass per chunk, parallel over
viewgrams, no chunk-sized temporaries.

Each bin takes the float32 operations of the rule one by one, in the order of the array
formulation it replaces (``ybar = fwd / f + b``; ``y > ybar * 10000``; ``y / ybar``; ``q / f``),
so the quotients are the same to the bit.  The log-likelihood is summed per viewgram in float64
and the viewgrams' sums are added in order: the same total for any thread count.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..jit import cached_njit
from .api import MAX_QUOTIENT, SMALL_FRACTION

__all__ = ["quotient_cpu"]

_F0 = np.float32(0.0)
_MAXQ = MAX_QUOTIENT
_SMALL = SMALL_FRACTION


# error_model="numpy": IEEE division, as the array formulation (no bin of the rule divides by
# zero, but a NaN or inf in the data must give what numpy gives, never an exception)
@cached_njit(parallel=True, nogil=True, fastmath=False, error_model="numpy")
def _quotient_kernel(fwd, y, bg, fac, out, starts, lengths, with_bg, with_fac, terms):  # pragma: no cover
    """Per viewgram v (bins ``starts[v]`` .. ``+ lengths[v]``): STIR's ``small``, then each bin's
    quotient into ``out`` (may be ``fwd``), and with ``terms`` (one float64 per viewgram, or
    empty) the viewgram's log-likelihood."""
    with_ll = terms.shape[0] > 0
    for v in prange(starts.shape[0]):
        lo = starts[v]
        hi = lo + lengths[v]
        top = np.float32(-np.inf)
        for i in range(lo, hi):  # numpy's max: a NaN wins
            yi = y[i]
            if yi > top or yi != yi:
                top = yi
                if yi != yi:
                    break
        s = top * _SMALL
        small = s if (s >= _F0 or s != s) else _F0  # numpy's maximum(s, 0)
        total = 0.0
        for i in range(lo, hi):
            yi = y[i]
            ybar = fwd[i]
            ok = True
            if with_fac:
                f = fac[i]
                ok = f != _F0
                if ok:
                    ybar = ybar / f
            if with_bg:
                ybar = ybar + bg[i]
            keep = yi > small
            big = yi > ybar * _MAXQ
            q = _F0
            if keep:
                q = _MAXQ if big else yi / ybar
            if with_fac:
                q = q / fac[i] if ok else _F0
            if with_ll and ok:
                m = yi / _MAXQ
                est = ybar if (ybar >= m or ybar != ybar) else m  # numpy's maximum(ybar, m)
                e64 = np.float64(est)
                if keep:
                    total += np.float64(yi) * np.log(e64) - e64
                else:
                    total += 0.0 - e64
            out[i] = q
        if with_ll:
            terms[v] = total


_NONE = np.zeros(0, np.float32)
_NO_TERMS = np.zeros(0, np.float64)


def quotient_cpu(fwd, y, background, multiplicative, out, loglik, rows):
    """:func:`.poisson.poisson_quotient` on numpy arrays; ``rows``: its ``viewgram_rows``."""
    target = out if out is not None and out.flags.c_contiguous else np.empty(fwd.shape, np.float32)
    starts = np.concatenate([off + per * np.arange(nv, dtype=np.int64) for off, nv, per in rows])
    lengths = np.concatenate([np.full(nv, per, dtype=np.int64) for _, nv, per in rows])
    terms = np.zeros(starts.shape[0], np.float64) if loglik is not None else _NO_TERMS
    _quotient_kernel(
        _flat(fwd),
        _flat(y),
        _NONE if background is None else _flat(background),
        _NONE if multiplicative is None else _flat(multiplicative),
        target.reshape(-1),  # a view: target is C-contiguous
        starts,
        lengths,
        background is not None,
        multiplicative is not None,
        terms,
    )
    if loglik is not None:
        loglik[0] += float(terms.sum())
    if out is None:
        return target
    if target is not out:
        out[...] = target
    return out


def _flat(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
