"""What an array argument of a kernel entry point is, told without importing any GPU library:
where it lives (host, or which CUDA device), its shape, dtype and layout (:func:`facts`), from
numpy's own attributes or the array protocols (``__cuda_array_interface__``, DLPack); the checks
every entry point makes (:func:`check`, :func:`same_place`, :func:`check_endpoints`,
:func:`checked_triple`), each a one-line error naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import DLPACK_CUDA
from ..errors import DeviceError, GeometryError, StirGpuError

__all__ = ["ArrayFacts", "facts", "check", "same_place", "check_endpoints", "checked_triple"]

_DLPACK_CPU = 1


# --------------------------------------------------------------------------------------
# describing an argument without importing any GPU library
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArrayFacts:
    gpu: bool
    device: int | None
    shape: tuple[int, ...]
    dtype: str  # numpy name: "float32", "float64", ...
    c_contiguous: bool
    writable: bool


def facts(name: str, a: Any) -> ArrayFacts:
    """Where ``a`` lives and its shape/dtype/layout, from the array protocols."""
    if isinstance(a, np.ndarray):
        return ArrayFacts(
            False, None, tuple(a.shape), a.dtype.name, bool(a.flags.c_contiguous), bool(a.flags.writeable)
        )
    try:
        cai = a.__cuda_array_interface__
    except (AttributeError, RuntimeError):  # torch: CPU tensor / tensor requiring grad
        cai = None
    if cai is not None:
        shape = tuple(int(s) for s in cai["shape"])
        dt = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        contiguous = strides is None or tuple(strides) == _c_strides(shape, dt.itemsize)
        writable = not cai["data"][1]
        return ArrayFacts(True, _dlpack_device_id(a), shape, dt.name, contiguous, writable)
    dev = _dlpack_device(a)
    if dev is not None and dev[0] in DLPACK_CUDA:
        # a CUDA array without the CUDA array interface: the backend inspects it
        shape = tuple(int(s) for s in getattr(a, "shape", ()))
        return ArrayFacts(True, int(dev[1]), shape, _dtype_name(getattr(a, "dtype", None)), True, True)
    if dev is not None and dev[0] != _DLPACK_CPU:
        raise DeviceError(
            f"{name}: arrays on DLPack device type {dev[0]} are not supported "
            f"(numpy on the CPU, or CUDA arrays such as cupy / torch)"
        )
    raise StirGpuError(f"{name}: expected a numpy array or a CUDA array (cupy, torch), not {type(a).__name__}")


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _dlpack_device(a: Any) -> tuple[int, int] | None:
    f = getattr(a, "__dlpack_device__", None)
    if f is None:
        return None
    dev = f()
    return int(dev[0]), int(dev[1])


def _dlpack_device_id(a: Any) -> int | None:
    dev = _dlpack_device(a)
    return None if dev is None else dev[1]


def _dtype_name(dt: Any) -> str:
    s = str(dt)
    return s.split(".")[-1]  # "torch.float32" -> "float32"


def check(
    name: str,
    f: ArrayFacts,
    ndim: int | None = None,
    shape: tuple | None = None,
    dtypes: Sequence[str] = ("float32",),
    writable: bool = False,
) -> None:
    if ndim is not None and len(f.shape) != ndim:
        raise GeometryError(f"{name}: expected a {ndim}-D array, got shape {f.shape}")
    if shape is not None and f.shape != tuple(shape):
        raise GeometryError(f"{name}: expected shape {tuple(shape)}, got {f.shape}")
    if f.dtype not in dtypes:
        raise StirGpuError(f"{name}: expected dtype {' or '.join(dtypes)}, got {f.dtype}")
    if not f.c_contiguous:
        raise StirGpuError(f"{name}: must be C-contiguous (use numpy.ascontiguousarray or .copy())")
    if writable and not f.writable:
        raise StirGpuError(f"{name}: must be writable (it receives the result)")


def same_place(named: dict[str, ArrayFacts]) -> bool:
    """True if every array is on the GPU (one device), False if all on the CPU."""
    items = list(named.items())
    first_name, first = items[0]
    for name, f in items[1:]:
        if f.gpu != first.gpu:
            where = lambda g: "a CUDA device" if g else "the host"  # noqa: E731
            raise DeviceError(
                f"{name} is on {where(f.gpu)} but {first_name} is on {where(first.gpu)}; "
                f"all arrays of one projection must live in the same place"
            )
        if f.gpu and first.device is not None and f.device is not None and f.device != first.device:
            raise DeviceError(f"{name} is on CUDA device {f.device} but {first_name} on device {first.device}")
    return first.gpu


def check_endpoints(named: dict[str, ArrayFacts]) -> None:
    for name in ("xstart", "xend"):
        f = named[name]
        if len(f.shape) != 2 or f.shape[1] != 3:
            raise GeometryError(f"{name}: expected shape (N, 3) with (z, y, x) columns, got {f.shape}")
        check(name, f, dtypes=("float32", "float64"))
    if named["xstart"].shape != named["xend"].shape:
        raise GeometryError(f"xstart {named['xstart'].shape} and xend {named['xend'].shape} must have the same shape")


def checked_triple(name: str, value: object, positive: bool) -> tuple[float, float, float]:
    """A kernel argument ``name`` (origin, voxel size) as 3 finite floats (z, y, x), positive
    where asked; a GeometryError naming it otherwise."""
    try:
        t = tuple(float(v) for v in np.asarray(value, dtype=np.float64).reshape(-1))
    except (TypeError, ValueError):
        raise GeometryError(f"{name}: expected 3 numbers (z, y, x), got {value!r}") from None
    if len(t) != 3:
        raise GeometryError(f"{name}: expected 3 numbers (z, y, x), got {len(t)}")
    if not all(math.isfinite(v) for v in t):
        raise GeometryError(f"{name}: must be finite, got {t}")
    if positive and not all(v > 0 for v in t):
        raise GeometryError(f"{name}: must be positive, got {t}")
    return t
