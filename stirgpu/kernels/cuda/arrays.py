"""The CUDA backend's array arguments: any CUDA array (cupy, torch CUDA tensors,
``__cuda_array_interface__``, CUDA DLPack) viewed as a cupy array without a copy, checked
(dtype, shape, C order, one device), and results given back as the kind of object passed in.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...arrays import array_kind, as_cupy_view, is_torch
from ...errors import DeviceError, GeometryError, StirGpuError

__all__ = ["as_cupy", "check_array", "one_device", "like_input"]


def as_cupy(cp, name: str, a: Any):
    """View ``a`` as a cupy array without copying."""
    if isinstance(a, cp.ndarray):
        return a
    kind = array_kind(a)
    if kind == "torch":
        if getattr(a, "requires_grad", False):
            raise StirGpuError(f"{name}: torch tensor requires grad; pass tensor.detach()")
        if not getattr(a, "is_cuda", False):
            raise DeviceError(f"{name}: torch tensor is on {a.device}, not on a CUDA device")
        return cp.from_dlpack(a)
    if kind in ("cuda", "dlpack-cuda"):
        return as_cupy_view(a)
    if kind == "numpy":
        raise DeviceError(
            f"{name}: numpy array given to the CUDA backend (use stirgpu.kernels, "
            f"which projects numpy arrays on the CPU, or move it to the GPU)"
        )
    raise StirGpuError(
        f"{name}: expected a CUDA array (cupy, torch, __cuda_array_interface__ or DLPack), not {type(a).__name__}"
    )


def check_array(name: str, a, dtypes=(np.float32,), shape=None, ndim=None) -> None:
    if a.dtype not in [np.dtype(d) for d in dtypes]:
        want = " or ".join(np.dtype(d).name for d in dtypes)
        raise StirGpuError(f"{name}: expected dtype {want}, got {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise GeometryError(f"{name}: expected a {ndim}-D array, got shape {a.shape}")
    if shape is not None and tuple(a.shape) != tuple(shape):
        raise GeometryError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if not a.flags.c_contiguous:
        raise StirGpuError(f"{name}: must be C-contiguous")


def one_device(named: dict) -> int:
    ids = {name: int(a.device.id) for name, a in named.items()}
    first = next(iter(ids))
    for name, d in ids.items():
        if d != ids[first]:
            raise DeviceError(
                f"{name} is on CUDA device {d} but {first} on device {ids[first]}; "
                f"all arrays of one projection must be on the same device"
            )
    return ids[first]


def like_input(result, reference):
    """Return ``result`` (cupy) as the kind of object ``reference`` is (torch -> torch)."""
    if is_torch(reference):
        import torch

        return torch.from_dlpack(result)
    return result
