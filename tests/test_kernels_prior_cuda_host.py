"""The CUDA prior kernels' own source (stirgpu/kernels/cuda/priors.cu), compiled for the host with
a small emulation of the CUDA features it uses (tests/cuda_host/cuda_shim.h: a block's threads
as std::threads meeting at a barrier for __syncthreads), against the numba kernels.

What this checks without a GPU: the kernels' indexing (32- and 64-bit), bounds, loop order,
kappa, weights, the Hessian's zero-weight and centre rules, STIR's INFINITY, the value's
block reduction, and what prior_cuda.py computes for each launch: its size, the index width
and the argument tuple cupy is given.  With the host's IEEE double
arithmetic and no contraction (``-ffp-contract=off``, as NVRTC's ``--fmad=false``) the
Quadratic and RDP results are the numba ones bit for bit; Logcosh's log / cosh / tanh come
from the host's libm, so within one ulp.  What it cannot check: cupy's compilation and launch of
the kernels and CUDA's own math library (tests/test_kernels_gpu_priors.py, on a GPU).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest
from helpers import PRIOR_CASES, PRIOR_POTENTIALS, REPO_ROOT, assert_within_one_ulp, prior_image

from stirgpu.kernels.priors import LOGCOSH, prior_gradient, prior_hessian_times, prior_value
from stirgpu.kernels.priors import cuda as prior_cuda

SOURCES = (REPO_ROOT / "stirgpu" / "kernels" / "cuda", REPO_ROOT / "tests" / "cuda_host")
_VALUE, _GRADIENT, _HESSIAN = "prior_value_blocks", "prior_gradient", "prior_hessian_times"


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    """priors_host.cpp (priors.cu's kernels as C functions of the kernels' own parameters) built as
    a shared library."""
    cxx = shutil.which(os.environ.get("CXX") or "g++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) to build priors.cu for the host")
    lib = tmp_path_factory.mktemp("priors_host") / "libpriors_host.so"
    cmd = [cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-pthread"]
    cmd += [f"-DSG_PRIOR_THREADS={prior_cuda.THREADS_PER_BLOCK}", *(f"-I{d}" for d in SOURCES)]
    cmd += [str(SOURCES[1] / "priors_host.cpp"), "-o", str(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(lib))


#: numpy scalar type -> the ctypes type of the same C type (what cupy passes it as)
_C_SCALARS = {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float64: ctypes.c_double}


def _c_argument(a):
    if isinstance(a, np.ndarray):
        return a.ctypes.data_as(ctypes.c_void_p)
    return _C_SCALARS[type(a)](a)


def run(lib, op, x, w, kind, p1, p2, *, kappa=None, vector=None, scale=1.0, out=None, index64=None):
    """One kernel over ``x`` with prior_cuda's launch size, index width (unless ``index64``) and
    argument tuple (:func:`prior_cuda.kernel_arguments`, passed on as cupy passes it: by the
    numpy scalars' C types), so a wrong order or type there breaks these results."""
    blocks = prior_cuda.launch_blocks(x.size)
    wide = prior_cuda.needs_index64(x.size) if index64 is None else index64
    if op == _VALUE:
        out = np.full(blocks, np.nan)  # every block must write its sum
    elif op == _GRADIENT:
        out = np.full_like(x, np.nan)  # every voxel must be written
    w = np.ascontiguousarray(w, dtype=np.float32)
    args = prior_cuda.kernel_arguments(op, x, w, p1, p2, out=out, scale=scale, kappa=kappa, vector=vector, index64=wide)
    entry = getattr(lib, f"{op}_{'i64' if wide else 'i32'}")
    entry(ctypes.c_int(kind), ctypes.c_int(x.dtype == np.float64), ctypes.c_uint(blocks), *map(_c_argument, args))
    return float(out.sum()) if op == _VALUE else out


def assert_same(got, want, kind):
    if kind == LOGCOSH:
        assert_within_one_ulp(got, want)
    else:
        np.testing.assert_array_equal(got, want)  # NaN positions equal too


@pytest.mark.parametrize("name", sorted(PRIOR_POTENTIALS))
@pytest.mark.parametrize("case", sorted(PRIOR_CASES))
@pytest.mark.parametrize("with_kappa", [False, True], ids=["no-kappa", "kappa"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index64", [False, True], ids=["int", "long-long"])
def test_priors_cu_computes_the_numba_numbers(host_kernels, name, case, with_kappa, dtype, index64):
    """Value (block sums added) to 1e-12 relative; gradient (scaled, every voxel written) and
    H v (accumulated into a non-zero out) as the numba kernels, on odd, 2-D and 3-D images with
    zeros, default, only-2D and user weights (zeros, a centre weight)."""
    kind, p1, p2 = PRIOR_POTENTIALS[name]
    shape, w = PRIOR_CASES[case]
    x = prior_image(shape, 1, dtype)
    v = np.random.default_rng(2).normal(size=shape).astype(dtype)
    kappa = prior_image(shape, 3, dtype, zeros=False) if with_kappa else None
    args = (w, kind, p1, p2)

    value = run(host_kernels, _VALUE, x, *args, kappa=kappa, index64=index64)
    assert value == pytest.approx(prior_value(x, *args, kappa=kappa), rel=1e-12, abs=1e-300)
    g = run(host_kernels, _GRADIENT, x, *args, kappa=kappa, scale=0.3, index64=index64)
    assert_same(g, prior_gradient(x, *args, scale=0.3, kappa=kappa), kind)
    start = np.random.default_rng(4).normal(size=shape).astype(dtype)
    h = run(host_kernels, _HESSIAN, x, *args, kappa=kappa, vector=v, scale=0.3, out=start.copy(), index64=index64)
    want = prior_hessian_times(x, v, *args, scale=0.3, out=start.copy(), kappa=kappa)
    assert_same(h, want, kind)
    if name == "rdp":
        assert not np.isfinite(want).all()  # a zero pair was reached (STIR's INFINITY: inf or NaN)


def test_a_partial_last_block_and_many_blocks(host_kernels):
    """An image of 3 x 17 x 29 = 1479 voxels: 6 blocks, the last one partial (its idle threads
    must add 0 to the value and write nothing)."""
    kind, p1, p2 = PRIOR_POTENTIALS["rdp-gamma-eps"]
    w = PRIOR_CASES["3d-default"][1]
    x = prior_image((3, 17, 29), 5, np.float32)
    assert prior_cuda.launch_blocks(x.size) == 6
    assert run(host_kernels, _VALUE, x, w, kind, p1, p2) == pytest.approx(prior_value(x, w, kind, p1, p2), rel=1e-12)
    np.testing.assert_array_equal(run(host_kernels, _GRADIENT, x, w, kind, p1, p2), prior_gradient(x, w, kind, p1, p2))
