"""The OSEM quotient of :mod:`.poisson` on a GPU: one ``cupy.ElementwiseKernel`` per chunk (and,
for the log-likelihood, one ``cupy.ReductionKernel`` over the same bins, run first), no
chunk-sized temporaries.

The bins are seen as rows of ``nt`` tangential positions (every part of a chunk has the same
``nt``, and a row lies in one viewgram); each row's ``small`` (STIR's per-viewgram threshold,
computed per part with the same cupy reductions as before) is a broadcast input of the kernel:
the only temporaries are these thresholds, one float32 per row (1/nt of a chunk).  Each bin's
float32 operations are explicitly rounded (``__fdiv_rn``, ``__fadd_rn``, ``__fmul_rn``: no fused
multiply-add), as are the log-likelihood's float64 ones, so the quotients are those of the array
formulation to the bit.  The kernels are made on first use (cupy compiles them then).
"""

from __future__ import annotations

import functools
import math

from ...arrays import import_cupy
from .api import SMALL_FRACTION

__all__ = ["quotient_cuda", "QUOTIENT_SOURCE"]

#: the rule of one bin, shared by both kernels (CUDA C; ``SG_WITH_BG`` / ``SG_WITH_FAC`` select
#: the optional terms); ``bg`` and ``fac`` are 0 and 1 without them
QUOTIENT_SOURCE = r"""
#define SG_MAXQ 10000.0f
struct SgBin { float ybar; bool ok; bool keep; bool big; };

__device__ __forceinline__ SgBin sg_bin(float fwd, float y, float y_small, float bg, float fac,
                                         bool with_bg, bool with_fac)
{
    SgBin r;
    r.ybar = fwd;
    r.ok = true;
    if (with_fac) {
        r.ok = fac != 0.0f;
        if (r.ok) r.ybar = __fdiv_rn(r.ybar, fac);
    }
    if (with_bg) r.ybar = __fadd_rn(r.ybar, bg);
    r.keep = y > y_small;
    r.big = y > __fmul_rn(r.ybar, SG_MAXQ);
    return r;
}

__device__ __forceinline__ float sg_quotient(float fwd, float y, float y_small, float bg, float fac,
                                             bool with_bg, bool with_fac)
{
    const SgBin r = sg_bin(fwd, y, y_small, bg, fac, with_bg, with_fac);
    float q = 0.0f;
    if (r.keep) q = r.big ? SG_MAXQ : __fdiv_rn(y, r.ybar);
    if (with_fac) q = r.ok ? __fdiv_rn(q, fac) : 0.0f;
    return q;
}

__device__ __forceinline__ double sg_loglik_term(float fwd, float y, float y_small, float bg, float fac,
                                                 bool with_bg, bool with_fac)
{
    const SgBin r = sg_bin(fwd, y, y_small, bg, fac, with_bg, with_fac);
    if (!r.ok) return 0.0;
    const float m = __fdiv_rn(y, SG_MAXQ);
    const float est = (r.ybar >= m || r.ybar != r.ybar) ? r.ybar : m;  /* numpy's maximum */
    const double e = (double)est;
    return r.keep ? __dsub_rn(__dmul_rn((double)y, log(e)), e) : __dsub_rn(0.0, e);
}
"""


def _params(with_bg: bool, with_fac: bool) -> tuple[str, str, str]:
    """(extra input parameters, the bin's bg argument, its fac argument)."""
    extra = (", float32 bg" if with_bg else "") + (", float32 fac" if with_fac else "")
    return extra, ("bg" if with_bg else "0.0f"), ("fac" if with_fac else "1.0f")


@functools.lru_cache(maxsize=4)
def _quotient_kernel(with_bg: bool, with_fac: bool):
    """``q = quotient(q, y, y_small, ...)`` in place: ``q`` holds the forward projection on entry."""
    cp = import_cupy()
    extra, bg, fac = _params(with_bg, with_fac)
    flags = f"{str(with_bg).lower()}, {str(with_fac).lower()}"
    return cp.ElementwiseKernel(
        "float32 y, float32 y_small" + extra,
        "float32 q",
        f"q = sg_quotient(q, y, y_small, {bg}, {fac}, {flags})",
        f"stirgpu_poisson_quotient_{int(with_bg)}{int(with_fac)}",
        preamble=QUOTIENT_SOURCE,
    )


@functools.lru_cache(maxsize=4)
def _loglik_kernel(with_bg: bool, with_fac: bool):
    """The sum over the bins of the log-likelihood terms (float64)."""
    cp = import_cupy()
    extra, bg, fac = _params(with_bg, with_fac)
    flags = f"{str(with_bg).lower()}, {str(with_fac).lower()}"
    return cp.ReductionKernel(
        "float32 fwd, float32 y, float32 y_small" + extra,
        "float64 total",
        f"sg_loglik_term(fwd, y, y_small, {bg}, {fac}, {flags})",
        "a + b",
        "total = a",
        "0.0",
        f"stirgpu_poisson_loglik_{int(with_bg)}{int(with_fac)}",
        reduce_type="double",
        preamble=QUOTIENT_SOURCE,
    )


def row_thresholds(cp, y, rows, nt: int):
    """STIR's ``small`` of each row of ``nt`` bins (its viewgram's), shaped (rows, 1)."""
    flat = y.reshape(-1)
    small = cp.empty((flat.size // nt, 1), dtype=cp.float32)
    for off, nv, per in rows:
        yp = flat[off : off + nv * per].reshape(nv, per)
        s = cp.maximum(yp.max(axis=1) * SMALL_FRACTION, cp.float32(0.0))
        small[off // nt : (off + nv * per) // nt].reshape(nv, per // nt)[...] = s.reshape(nv, 1)
    return small


def quotient_cuda(fwd, y, background, multiplicative, out, loglik, rows):
    """:func:`.poisson.poisson_quotient` on cupy arrays; ``rows``: its ``viewgram_rows``."""
    cp = import_cupy()
    n = int(fwd.size)
    nt = _row_length(rows, n)
    with cp.cuda.Device(fwd.device.id):
        small = row_thresholds(cp, y, rows, nt)
        shaped = [a.reshape(-1, nt) for a in (fwd, y)]
        terms = [a.reshape(-1, nt) for a in (background, multiplicative) if a is not None]
        with_bg, with_fac = background is not None, multiplicative is not None
        if loglik is not None:
            total = _loglik_kernel(with_bg, with_fac)(shaped[0], shaped[1], small, *terms)
            loglik[0] += total
        given = out
        if out is None or not out.flags.c_contiguous:
            out = fwd.copy()  # C-contiguous: its (rows, nt) view is the array itself
        elif out is not fwd:
            out[...] = fwd
        _quotient_kernel(with_bg, with_fac)(shaped[1], small, *terms, out.reshape(-1, nt))
        if given is not None and given is not out:
            given[...] = out
            out = given
    return out


def _row_length(rows, n: int) -> int:
    """The rows' length: the greatest common divisor of every part's first bin and viewgram
    length (a multiple of ``nt`` for a chunk's parts), so that each row lies in one viewgram."""
    length = 0
    for off, _, per in rows:
        length = math.gcd(length, math.gcd(per, off))
    return length or max(n, 1)
