"""The CUDA kernel of STIR's kernelised image (stirgpu/kernels/cuda/kernelised.cu), compiled for the
host with the small CUDA emulation of tests/cuda_host/cuda_shim.h, against the numba kernel.

What this checks without a GPU: the kernel's indexing (32- and 64-bit), the neighbourhood's cut at
the image's edges, the hybrid and anatomical terms and their order, STIR's cases at a zero of the
kernel image, a partial last block, and what kernelised/cuda.py computes for each launch: its size,
the index width and the argument tuple cupy is given.  With the host's IEEE double arithmetic,
its libm exp (as numba's) and no contraction (``-ffp-contract=off``, as NVRTC's ``--fmad=false``)
the results are the numba ones bit for bit.  What it cannot check: cupy's compilation and launch and
CUDA's own exp (tests/test_recon_kosmaposl.py's gpu test, on a GPU).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest
from helpers import REPO_ROOT

from stirgpu.kernels.kernelised import anatomical_stack, distance_table, kernelised_image, standard_deviation
from stirgpu.kernels.kernelised import cuda as kernelised_cuda

SOURCES = (REPO_ROOT / "stirgpu" / "kernels" / "cuda", REPO_ROOT / "tests" / "cuda_host")


@pytest.fixture(scope="module")
def host_kernel(tmp_path_factory):
    """kernelised_host.cpp (the kernel as C functions of its own parameters) built as a shared library."""
    cxx = shutil.which(os.environ.get("CXX") or "g++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++ or $CXX) to build kernelised.cu for the host")
    lib = tmp_path_factory.mktemp("kernelised_host") / "libkernelised_host.so"
    cmd = [cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-pthread"]
    cmd += [f"-DSG_PRIOR_THREADS={kernelised_cuda.THREADS_PER_BLOCK}", *(f"-I{d}" for d in SOURCES)]
    cmd += [str(SOURCES[1] / "kernelised_host.cpp"), "-o", str(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(lib))


_C_SCALARS = {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float64: ctypes.c_double}


def _c_argument(a):
    if isinstance(a, np.ndarray):
        return a.ctypes.data_as(ctypes.c_void_p)
    return _C_SCALARS[type(a)](a)


def run(lib, image, alpha, images, sigma_m, sds, sigmas, distance, hybrid, index64=None):
    """The kernel over ``image`` with kernelised/cuda.py's launch size, index width (unless given)
    and argument tuple, passed on as cupy passes it (by the numpy scalars' C types)."""
    n = len(images)
    wide = kernelised_cuda.needs_index64(image.size * max(n, 1)) if index64 is None else index64
    out = np.full(image.shape, np.nan, np.float32)  # every voxel must be written
    args = kernelised_cuda.kernel_arguments(
        image,
        alpha,
        anatomical_stack(images) if n else np.zeros(1, np.float32),
        n,
        np.asarray([s * s for s in sigma_m] or [1.0]),
        np.asarray([s * s for s in sds] or [1.0]),
        tuple(s * s for s in sigmas),
        distance,
        hybrid,
        out,
        wide,
    )
    entry = getattr(lib, f"kernelised_image_{'i64' if wide else 'i32'}")
    entry(ctypes.c_uint(kernelised_cuda.launch_blocks(image.size)), *map(_c_argument, args))
    return out


CASES = {
    # name: (shape, number of neighbours, only 2D, hybrid, anatomical images)
    "hybrid-3d": ((4, 9, 11), 3, False, True, 1),
    "anatomical-2d-5": ((3, 8, 7), 5, True, False, 1),
    "even-4-two-images": ((5, 6, 9), 4, False, True, 2),
    "hybrid-alone": ((2, 7, 7), 3, False, True, 0),
    "partial-blocks": ((3, 17, 29), 3, False, True, 1),
}


@pytest.mark.parametrize("index64", [False, True], ids=["int", "long-long"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernelised_cu_computes_the_numba_numbers(host_kernel, name, index64):
    """Every voxel written, equal to the numba kernel's, with zeros in the kernel image (STIR's
    cases: 0 for a hybrid kernel, the undivided sum for another)."""
    shape, neighbours, only_2d, hybrid, n = CASES[name]
    rng = np.random.default_rng(3)
    image = (rng.random(shape) + 0.5).astype(np.float32)
    alpha = (rng.random(shape) + 0.2).astype(np.float32)
    alpha[0, 0, 0] = alpha[1, 3, 2] = 0.0
    images = [(rng.random(shape) * (i + 1)).astype(np.float32) for i in range(n)]
    sigma_m, sds = [0.7, 1.9][:n], [standard_deviation(m) for m in images]
    sigmas = (0.5, 2.0, 3.0)
    distance = distance_table(neighbours, only_2d, (2.5, 2.0, 2.2))
    got = run(host_kernel, image, alpha, images, sigma_m, sds, sigmas, distance, hybrid, index64)
    want = kernelised_image(
        image,
        alpha,
        images,
        sigma_m,
        sds,
        sigma_p=sigmas[0],
        sigma_dp=sigmas[1],
        sigma_dm=sigmas[2],
        distance=distance,
        hybrid=hybrid,
    )
    np.testing.assert_array_equal(got, want)
    assert (got[0, 0, 0] == 0) == hybrid


def test_launch_sizes():
    """One thread a voxel in blocks of 256, the last partial; 64-bit indices from 2^31 threads."""
    assert kernelised_cuda.launch_blocks(3 * 17 * 29) == 6
    assert not kernelised_cuda.needs_index64(2**31 - 256) and kernelised_cuda.needs_index64(2**31)
    assert kernelised_cuda.kernel_name(True) == "kernelised_image<long long>"
