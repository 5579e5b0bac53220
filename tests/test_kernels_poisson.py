"""The OSEM quotient kernels (stirgpu.kernels.poisson): the numba kernel gives the bits of the
array formulation it replaced, for any chunk of parts, optional terms and special values; the
CUDA kernel's rule (its C source, compiled here for the CPU with the same rounding) gives the
numba kernel's bits; and the GPU's per-row thresholds are STIR's per-viewgram ``small``.
STIR's own rule is checked in tests/test_projectors_fused.py."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import types

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.kernels.poisson import MAX_QUOTIENT, SMALL_FRACTION, poisson_quotient, viewgram_rows
from stirgpu.kernels.poisson import cuda as poisson_cuda

_F0, _F1 = np.float32(0), np.float32(1)


def array_quotient(fwd, y, b, f, parts):
    """The array formulation the kernels replaced (numpy, chunk-sized temporaries), with its
    log-likelihood summed per viewgram."""
    with np.errstate(all="ignore"):
        ok = None
        ybar = fwd
        if f is not None:
            ok = f != _F0
            ybar = fwd / np.where(ok, f, _F1)
        if b is not None:
            ybar = ybar + b
        keep = np.empty(y.shape, bool)
        for off, nv, per in viewgram_rows(y.shape, parts):
            yp = y[off : off + nv * per].reshape(nv, per)
            small = np.maximum(yp.max(axis=1) * SMALL_FRACTION, _F0).reshape(nv, 1)
            keep[off : off + nv * per].reshape(nv, per)[...] = yp > small
        big = y > ybar * MAX_QUOTIENT
        divide = keep & ~big
        q = np.where(divide, y / np.where(divide, ybar, _F1), _F0)
        q = np.where(keep & big, MAX_QUOTIENT, q)
        est = np.maximum(ybar, y / MAX_QUOTIENT)
        term = np.where(keep, y.astype(np.float64) * np.log(np.where(keep, est, _F1).astype(np.float64)), 0.0)
        term = term - est.astype(np.float64)
        if ok is not None:
            q = np.where(ok, q / np.where(ok, f, _F1), _F0)
            term = np.where(ok, term, 0.0)
    return q.astype(np.float32), term


def random_chunk(rng):
    """Flat float32 data of a chunk of 1-3 parts, with zeros, negatives, tiny and huge values,
    inf and NaN among them; the parts as the engine describes them."""
    nt = int(rng.integers(1, 7))
    parts, off = [], 0
    for _ in range(int(rng.integers(1, 4))):
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 5)), nt)
        n = shape[0] * shape[1] * shape[2]
        parts.append(types.SimpleNamespace(offset=off, shape=shape, stop=off + n))
        off += n

    def scaled(base, values, p):
        return (base * rng.choice(np.array(values, np.float32), off, p=p)).astype(np.float32)

    y = scaled(rng.poisson(3, off), [1, 0, -1, 1e-7, 1e9], [0.8, 0.08, 0.04, 0.04, 0.04])
    fwd = scaled(rng.random(off) * 4, [1, 0, 1e-8, -1, np.inf, np.nan], [0.8, 0.08, 0.04, 0.03, 0.03, 0.02])
    b = scaled(rng.random(off) * 0.5, [1, 0, np.nan], [0.9, 0.08, 0.02])
    f = scaled(1 + rng.random(off), [1, 0, 1e-30, np.inf], [0.85, 0.1, 0.03, 0.02])
    if rng.random() < 0.1:
        y[0] = np.nan
    return fwd, y, b, f, parts


def _bits(a):
    return np.asarray(a, np.float32).view(np.int32)


def _same_numbers(got, want) -> bool:
    """The same float32 bits wherever ``want`` is a number, and NaN where it is NaN: a GPU's NaNs
    are CUDA's canonical NaN, not the payload x86 carries through from a NaN input."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    nan = np.isnan(want)
    if not np.array_equal(np.isnan(got), nan):
        return False
    return bool(np.array_equal(_bits(got[~nan]), _bits(want[~nan])))


@pytest.mark.parametrize("seed", range(4))
def test_numba_kernel_gives_the_array_formulations_bits(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        fwd, y, b, f, parts = random_chunk(rng)
        for bg in (None, b):
            for fac in (None, f):
                want, terms = array_quotient(fwd, y, bg, fac, parts)
                ll = np.zeros(1)
                got = fwd.copy()
                assert poisson_quotient(got, y, bg, fac, out=got, loglik=ll, parts=parts) is got
                assert np.array_equal(_bits(got), _bits(want))
                total = terms.sum()
                assert (np.isnan(total) and np.isnan(ll[0])) or ll[0] == pytest.approx(total, rel=1e-12, abs=1e-12)


def test_quotient_of_a_viewgram_array_and_a_new_result():
    """Without parts the first axis is the viewgrams; without out a new array is returned and
    the inputs are left as they were."""
    rng = np.random.default_rng(7)
    y = rng.poisson(5, (3, 4, 6)).astype(np.float32)
    fwd = rng.random((3, 4, 6)).astype(np.float32)
    kept = fwd.copy()
    want, _ = array_quotient(fwd.reshape(-1), y.reshape(-1), None, None, [_part(0, (3, 4, 6))])
    got = poisson_quotient(fwd, y)
    assert got is not fwd and got.shape == fwd.shape and np.array_equal(fwd, kept)
    assert np.array_equal(got.reshape(-1), want)


def _part(offset, shape):
    return types.SimpleNamespace(offset=offset, shape=shape, stop=offset + int(np.prod(shape)))


def test_bad_arguments_are_named():
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(StirGpuError, match="y has shape"):
        poisson_quotient(a, np.zeros((3, 2), np.float32))
    with pytest.raises(StirGpuError, match="background is float64"):
        poisson_quotient(a, a, np.zeros((2, 3)))
    with pytest.raises(StirGpuError, match="expected numpy or cupy"):
        poisson_quotient([1.0], [1.0])


def test_gpu_row_thresholds_are_stirs_per_viewgram_small():
    """The GPU kernel's broadcast thresholds (one per row of the gcd of the parts' offsets and
    viewgram lengths), computed here with numpy in cupy's place: every bin's row threshold is
    its viewgram's small."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        _, y, _, _, parts = random_chunk(rng)
        rows = viewgram_rows(y.shape, parts)
        nt = poisson_cuda._row_length(rows, y.size)
        assert all(per % nt == 0 and off % nt == 0 for off, _, per in rows)
        small = poisson_cuda.row_thresholds(np, y, rows, nt)
        per_bin = np.repeat(small.reshape(-1), nt)
        for off, nv, per in rows:
            for v in range(nv):
                vg = y[off + v * per : off + (v + 1) * per]
                with np.errstate(invalid="ignore"):
                    want = np.maximum(vg.max() * SMALL_FRACTION, _F0)
                got = per_bin[off + v * per : off + (v + 1) * per]
                assert np.array_equal(_bits(got), np.full(per, want, np.float32).view(np.int32))


_HARNESS = r"""
#include <cmath>
#define __device__
#define __forceinline__ inline
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
using std::log;
SOURCE
extern "C" void run(long n, const float *fwd, const float *y, const float *small, const float *bg,
                    const float *fac, int wb, int wf, float *q, double *terms)
{
    for (long i = 0; i < n; ++i) {
        q[i] = sg_quotient(fwd[i], y[i], small[i], wb ? bg[i] : 0.0f, wf ? fac[i] : 1.0f, wb, wf);
        terms[i] = sg_loglik_term(fwd[i], y[i], small[i], wb ? bg[i] : 0.0f, wf ? fac[i] : 1.0f, wb, wf);
    }
}
"""


@pytest.fixture(scope="module")
def cuda_rule_on_cpu(tmp_path_factory):
    """The CUDA kernels' rule (poisson_cuda.QUOTIENT_SOURCE) compiled for the CPU: the
    ``__*_rn`` intrinsics as the single IEEE operations they are, no contraction, no fast math."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler to compile the CUDA rule for the CPU")
    d = tmp_path_factory.mktemp("poisson_rule")
    (d / "rule.cpp").write_text(_HARNESS.replace("SOURCE", poisson_cuda.QUOTIENT_SOURCE))
    lib = d / "rule.so"
    cmd = [cxx, "-O2", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC", "-o", str(lib), str(d / "rule.cpp")]
    subprocess.run(cmd, check=True, capture_output=True)
    return ctypes.CDLL(str(lib)).run


def test_cuda_rule_gives_the_numba_kernels_bits(cuda_rule_on_cpu):
    rng = np.random.default_rng(11)
    ptr = np.ctypeslib.as_ctypes_type
    for _ in range(40):
        fwd, y, b, f, parts = random_chunk(rng)
        rows = viewgram_rows(y.shape, parts)
        nt = poisson_cuda._row_length(rows, y.size)
        small = np.repeat(poisson_cuda.row_thresholds(np, y, rows, nt).reshape(-1), nt)
        for wb in (0, 1):
            for wf in (0, 1):
                q = np.empty_like(fwd)
                terms = np.empty(fwd.size, np.float64)
                args = [a.ctypes.data_as(ctypes.POINTER(ptr(a.dtype))) for a in (fwd, y, small, b, f)]
                cuda_rule_on_cpu(
                    ctypes.c_long(fwd.size),
                    *args,
                    wb,
                    wf,
                    q.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                    terms.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                )
                ll = np.zeros(1)
                want = poisson_quotient(fwd, y, b if wb else None, f if wf else None, loglik=ll, parts=parts)
                assert np.array_equal(_bits(q), _bits(want))
                total = terms.sum()
                assert (np.isnan(total) and np.isnan(ll[0])) or ll[0] == pytest.approx(total, rel=1e-12, abs=1e-12)


@pytest.mark.gpu
def test_gpu_kernels_give_the_cpu_kernels_bits(cp):
    """On a GPU (cupy.ElementwiseKernel / ReductionKernel): the same quotient bits as the numba
    kernel (NaN where it gives NaN), in place and into a new array, and the log-likelihood to
    float64 summation order."""
    rng = np.random.default_rng(5)
    for _ in range(40):
        fwd, y, b, f, parts = random_chunk(rng)
        for bg in (None, b):
            for fac in (None, f):
                ll = np.zeros(1)
                want = poisson_quotient(fwd, y, bg, fac, loglik=ll, parts=parts)
                dev = [None if a is None else cp.asarray(a) for a in (fwd, y, bg, fac)]
                dll = cp.zeros(1, cp.float64)
                got = poisson_quotient(*dev, loglik=dll, parts=parts)
                assert _same_numbers(cp.asnumpy(got), want)
                in_place = dev[0].copy()
                assert poisson_quotient(in_place, *dev[1:], out=in_place, parts=parts) is in_place
                assert _same_numbers(cp.asnumpy(in_place), want)
                total = float(dll.get()[0])
                assert (np.isnan(total) and np.isnan(ll[0])) or total == pytest.approx(ll[0], rel=1e-12, abs=1e-12)
