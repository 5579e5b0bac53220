"""CUDA kernels of STIR's neighbourhood priors: value, gradient, Hessian times a vector.

The same operations, signatures and numbers as :mod:`.cpu` (whose docstring states the
rules; ``docs/priors.md`` the formulas), for cupy arrays, which never leave their device.

* The kernels are ``cuda/priors.cu`` (package data): one thread per voxel walks its
  neighbourhood, every pair term and sum in double, the same expressions in the same order as
  the numba kernels (``--fmad=false``), so CPU and GPU agree to float32 rounding.  The value is
  a per-voxel sum reduced per block in shared memory (double), the blocks' partial sums then
  added by cupy (double): no image-sized temporary.
* Compiled on first use by :class:`cupy.RawModule` (NVRTC; cupy passes ``-arch=sm_XX`` of the
  device), memoised per device, one module per (kind, dtype, index width) so that only what is
  used gets compiled.  Nothing happens at import; cupy is imported on the first call.
* Indices are 32-bit where every thread's voxel index fits, 64-bit otherwise
  (:func:`needs_index64`): images are limited only by memory.
* Kernels run on cupy's current stream, on the image's device.  The weights (a few floats)
  are copied to each device once per distinct weights array and kept (:func:`_device_weights`).
"""

from __future__ import annotations

import functools

import numpy as np

from ...arrays import import_cupy
from ...errors import DeviceError, StirGpuError
from ..cuda.compile import compiled_module
from .api import KINDS

__all__ = [
    "value",
    "gradient",
    "hessian_times",
    "THREADS_PER_BLOCK",
    "launch_blocks",
    "needs_index64",
    "kernel_name",
    "kernel_arguments",
]

#: threads per block of every prior kernel (``SG_PRIOR_THREADS`` of priors.cu, set from here)
THREADS_PER_BLOCK = 256
_INT32_MAX = 2**31 - 1
_GRID_X_MAX = 2**31 - 1  # CUDA's limit on gridDim.x
_OPTIONS = ("--std=c++17", "--fmad=false", f"-DSG_PRIOR_THREADS={THREADS_PER_BLOCK}")
_OPS = ("prior_value_blocks", "prior_gradient", "prior_hessian_times")
_C_TYPES = {"float32": "float", "float64": "double"}


def launch_blocks(num_voxels: int) -> int:
    """Blocks of the 1-D launch over ``num_voxels`` voxels (one thread each)."""
    n = int(num_voxels)
    if n < 0:
        raise StirGpuError(f"number of voxels {n}: must be >= 0")
    blocks = -(-n // THREADS_PER_BLOCK)
    if blocks > _GRID_X_MAX:
        raise DeviceError(
            f"an image of {n} voxels needs {blocks} blocks of {THREADS_PER_BLOCK} threads, "
            f"more than CUDA's grid limit {_GRID_X_MAX}"
        )
    return blocks


def needs_index64(num_voxels: int) -> bool:
    """Whether the kernels need 64-bit indices: the number of threads launched
    (``blocks * THREADS_PER_BLOCK``, past the image's end for a partial last block) must fit in a
    32-bit int, so that every thread's linear index, the voxel count the kernels compute
    (``nz * ny * nx``) and every voxel and neighbour index do."""
    return launch_blocks(num_voxels) * THREADS_PER_BLOCK > _INT32_MAX


def kernel_name(op: str, kind: int, dtype, index64: bool) -> str:
    """The C++ name of one instantiation, e.g. ``prior_gradient<1, float, int>``."""
    if op not in _OPS:
        raise StirGpuError(f"prior kernel {op!r}: expected one of {_OPS}")
    if kind not in KINDS:
        raise StirGpuError(f"prior kind {kind!r}: expected one of {sorted(KINDS)}")
    name = np.dtype(dtype).name
    if name not in _C_TYPES:
        raise StirGpuError(f"prior kernels take float32 or float64 images, not {name}")
    return f"{op}<{int(kind)}, {_C_TYPES[name]}, {'long long' if index64 else 'int'}>"


# --------------------------------------------------------------------------------------
# compilation (lazy, memoised per device)
# --------------------------------------------------------------------------------------
def _module(device_id: int, kind: int, dtype_name: str, index64: bool):
    """The three kernels of one (kind, dtype, index width), compiled for one device."""
    names = tuple(kernel_name(op, kind, dtype_name, index64) for op in _OPS)
    return compiled_module(device_id, ("priors.cu",), _OPTIONS, names)


@functools.lru_cache(maxsize=256)
def _kernel(device_id: int, op: str, kind: int, dtype_name: str, index64: bool):
    return _module(device_id, kind, dtype_name, index64).get_function(kernel_name(op, kind, dtype_name, index64))


@functools.lru_cache(maxsize=32)
def _device_weights(device_id: int, shape: tuple[int, int, int], data: bytes):
    """The float32 weights on one device (kept: the same weights serve every subiteration)."""
    cp = import_cupy()
    with cp.cuda.Device(device_id):
        return cp.asarray(np.frombuffer(data, dtype=np.float32).reshape(shape))


# --------------------------------------------------------------------------------------
# launches
# --------------------------------------------------------------------------------------
def kernel_arguments(op: str, image, weights, p1, p2, *, out, scale=1.0, kappa=None, vector=None, index64=False):
    """The arguments of one kernel of priors.cu, in its parameter order, scalars as the numpy types
    cupy passes as the C types of the instantiation (``int`` / ``long long`` sizes, ``double``
    parameters).  ``weights``: the (wz, wy, wx) float32 array where the kernel reads it; ``out``:
    the output (for ``prior_value_blocks`` the float64 partial sums, one per block)."""
    if op not in _OPS:
        raise StirGpuError(f"prior kernel {op!r}: expected one of {_OPS}")
    idx = np.int64 if index64 else np.int32
    inputs = (image, vector) if op == "prior_hessian_times" else (image,)
    head = (*inputs, image if kappa is None else kappa, np.int32(kappa is not None), weights)
    head += tuple(np.int32(n) for n in weights.shape) + (np.float64(p1), np.float64(p2))
    if op != "prior_value_blocks":
        head += (np.float64(scale),)
    return head + tuple(idx(n) for n in image.shape) + (out,)


def _device_of(image, **others) -> int:
    dev = int(image.device.id)
    for name, a in others.items():
        if a is not None and int(a.device.id) != dev:
            raise DeviceError(f"{name} is on CUDA device {a.device.id}, the image on device {dev}")
    return dev


def _run(op, image, weights, kind, p1, p2, *, out=None, scale=1.0, kappa=None, vector=None, index64=None):
    """Launch one kernel over the cupy ``image`` on its device; returns ``out`` (for the value,
    the partial sums it allocates)."""
    cp = import_cupy()
    dev = _device_of(image, kappa=kappa, vector=vector, out=out)
    blocks = launch_blocks(image.size)
    wide = needs_index64(image.size) if index64 is None else bool(index64)
    w = np.ascontiguousarray(weights, dtype=np.float32)
    with cp.cuda.Device(dev):
        if op == "prior_value_blocks":
            out = cp.empty(blocks, dtype=cp.float64)
        if blocks:
            dw = _device_weights(dev, tuple(int(n) for n in w.shape), w.tobytes())
            args = kernel_arguments(
                op, image, dw, p1, p2, out=out, scale=scale, kappa=kappa, vector=vector, index64=wide
            )
            _kernel(dev, op, int(kind), image.dtype.name, wide)((blocks,), (THREADS_PER_BLOCK,), args)
    return out


def value(image, weights, kind: int, p1: float, p2: float, kappa=None, *, index64: bool | None = None) -> float:
    """The prior's value at the cupy ``image`` for a penalisation factor of 1 (float64)."""
    partials = _run("prior_value_blocks", image, weights, kind, p1, p2, kappa=kappa, index64=index64)
    return float(partials.sum()) if partials.size else 0.0


def gradient(image, weights, kind: int, p1: float, p2: float, scale: float, out, kappa=None, *, index64=None):
    """``out = scale * gradient`` (overwritten), on the image's device."""
    return _run("prior_gradient", image, weights, kind, p1, p2, out=out, scale=scale, kappa=kappa, index64=index64)


def hessian_times(
    image, vector, weights, kind: int, p1: float, p2: float, scale: float, out, kappa=None, *, index64=None
):
    """``out += scale * H(image) vector`` (accumulated, as STIR's ``accumulate_Hessian_times_input``)."""
    return _run(
        "prior_hessian_times",
        image,
        weights,
        kind,
        p1,
        p2,
        out=out,
        scale=scale,
        kappa=kappa,
        vector=vector,
        index64=index64,
    )
