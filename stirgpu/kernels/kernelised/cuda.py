"""CUDA kernel of STIR's kernelised image (KOSMAPOSL): the numbers of :mod:`.cpu` for cupy
arrays, which never leave their device.

* The kernel is ``cuda/kernelised.cu`` (package data): one thread per voxel walks its
  neighbourhood, each kernel value in double, the same expressions in the same order as the numba
  kernel (``--fmad=false``), so CPU and GPU agree to float32 rounding.
* Compiled on first use by :class:`cupy.RawModule` (``..cuda.compile``), memoised per device and
  index width.  Nothing happens at import; cupy is imported on the first call.
* Indices are 32-bit where every thread's voxel index fits, 64-bit otherwise (:func:`needs_index64`).
* The kernel runs on cupy's current stream, on the image's device.
"""

from __future__ import annotations

import functools

import numpy as np

from ...arrays import import_cupy
from ...errors import DeviceError, StirGpuError
from ..cuda.compile import compiled_module

__all__ = ["THREADS_PER_BLOCK", "launch_blocks", "needs_index64", "kernel_name", "kernel_arguments", "kernelised_image"]

THREADS_PER_BLOCK = 256
_INT32_MAX = 2**31 - 1
_GRID_X_MAX = 2**31 - 1  # CUDA's limit on gridDim.x
_OPTIONS = ("--std=c++17", "--fmad=false")


def launch_blocks(num_voxels: int) -> int:
    """Blocks of the 1-D launch over ``num_voxels`` voxels (one thread each)."""
    n = int(num_voxels)
    if n < 0:
        raise StirGpuError(f"number of voxels {n}: must be >= 0")
    blocks = -(-n // THREADS_PER_BLOCK)
    if blocks > _GRID_X_MAX:
        raise DeviceError(f"an image of {n} voxels needs {blocks} blocks, more than CUDA's grid limit {_GRID_X_MAX}")
    return blocks


def needs_index64(num_voxels: int) -> bool:
    """Whether the kernel needs 64-bit indices: every launched thread's index (a partial last
    block included) and every voxel index of the anatomical images (``n_anatomical * n``) must fit
    in a 32-bit int otherwise."""
    return launch_blocks(num_voxels) * THREADS_PER_BLOCK > _INT32_MAX


def kernel_name(index64: bool) -> str:
    return f"kernelised_image<{'long long' if index64 else 'int'}>"


def kernel_arguments(
    image, alpha, anatomical, n_anatomical, sq_sigma_m, sq_sd, sigmas, distance, hybrid, out, index64
) -> tuple:
    """The kernel's arguments in its parameter order, scalars as the numpy types cupy passes as the
    C types (``int`` / ``long long`` sizes, ``double`` parameters).  ``anatomical``: the
    ``n_anatomical`` images one after the other (any buffer when there are none: the kernel reads
    none); ``sq_sigma_m``, ``sq_sd``: float64 arrays (idem); ``sigmas``: (sigma_p^2, sigma_dp^2,
    sigma_dm^2); ``distance``: the float32 table."""
    idx = np.int64 if index64 else np.int32
    hz, hy, hx = (int(n) // 2 for n in distance.shape)
    return (
        image,
        alpha,
        anatomical,
        np.int32(n_anatomical),
        sq_sigma_m,
        sq_sd,
        *(np.float64(v) for v in sigmas),
        distance,
        np.int32(hz),
        np.int32(hy),
        np.int32(hx),
        np.int32(bool(hybrid)),
        *(idx(n) for n in image.shape),
        out,
    )


@functools.lru_cache(maxsize=32)
def _kernel(device_id: int, index64: bool):
    name = kernel_name(index64)
    return compiled_module(device_id, ("kernelised.cu",), _OPTIONS, (name,)).get_function(name)


def kernelised_image(image, alpha, anatomical, sq_sigma_m, sq_sd, sigmas, distance, hybrid):
    """The kernelised cupy ``image`` (a new float32 cupy array on its device).  ``alpha`` and
    ``anatomical`` ((n, nz, ny, nx), n >= 0): cupy float32 on the same device; ``sq_sigma_m``,
    ``sq_sd``: host float64 arrays of n; ``sigmas``: (sigma_p^2, sigma_dp^2, sigma_dm^2);
    ``distance``: the host float32 table."""
    cp = import_cupy()
    dev = int(image.device.id)
    for name, a in (("kernel image", alpha), ("anatomical images", anatomical)):
        if int(a.device.id) != dev:
            raise DeviceError(f"{name} on CUDA device {a.device.id}, the image on device {dev}")
    n_anatomical = int(anatomical.shape[0])
    with cp.cuda.Device(dev):
        out = cp.empty(image.shape, dtype=cp.float32)
        if image.size == 0:
            return out
        one = np.ones(1, np.float64)  # (a buffer for the kernel to be given where there are no images)
        wide = needs_index64(image.size * max(n_anatomical, 1))
        args = kernel_arguments(
            cp.ascontiguousarray(image, dtype=cp.float32),
            cp.ascontiguousarray(alpha, dtype=cp.float32),
            anatomical if n_anatomical else cp.zeros(1, cp.float32),
            n_anatomical,
            cp.asarray(sq_sigma_m if n_anatomical else one),
            cp.asarray(sq_sd if n_anatomical else one),
            sigmas,
            cp.asarray(np.ascontiguousarray(distance, dtype=np.float32)),
            hybrid,
            out,
            wide,
        )
        _kernel(dev, wide)((launch_blocks(image.size),), (THREADS_PER_BLOCK,), args)
    return out
