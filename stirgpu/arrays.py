"""The one registry of array kinds stirgpu meets, without importing a GPU library before one is seen.

Every question "what kind of array is this?" is answered here, by :func:`array_kind`:

==================  ===========================================================================
``"numpy"``         a :class:`numpy.ndarray` (host memory)
``"cupy"``          a :class:`cupy.ndarray` (CUDA device memory)
``"torch"``         a torch tensor (``on_cuda`` says where it lives)
``"cuda"``          another object with ``__cuda_array_interface__`` (numba, jax, ...)
``"dlpack-cuda"``   another object whose ``__dlpack_device__`` is CUDA memory
``"other"``         anything else (lists, scalars, host DLPack objects, ...)
==================  ===========================================================================

and the helpers built on it:

* :func:`library_of` -- the top-level package an object's type comes from (``"cupy"``,
  ``"torch"``, ``"stir"``, ...): the one place that reads ``type(x).__module__``;
* :func:`is_cupy`, :func:`is_torch`, :func:`on_cuda` (CUDA memory, whatever the library);
* :func:`array_module` -- numpy or cupy, whichever an array belongs to (the ``xp`` of code
  written once for both);
* :func:`as_cupy_view` -- a CUDA array of any kind as a cupy array, without a copy;
* :func:`in_namespace` -- a numpy or cupy array in the other namespace (a copy across host and
  GPU), or itself;
* :func:`ignoring_float_errors` -- numpy's floating-point warnings silenced for code whose IEEE
  results (inf, NaN) are wanted, written once for numpy and cupy (cupy does not warn);
* :func:`count_non_finite` -- how many values of a numpy or cupy array are NaN or ±Inf, at
  the cost of one sum where there are none;
* :data:`DLPACK_CUDA` -- the DLPack device types of CUDA device memory;
* :func:`import_cupy` -- cupy, imported on first use, or a :class:`~stirgpu.errors.DeviceError`
  saying how to install it.

Any package may import it (it imports numpy and :mod:`stirgpu.errors` only; cupy on first use,
torch never: a torch tensor is recognised by its type's module).
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import numpy as np

from .errors import DeviceError

__all__ = [
    "ArrayKind",
    "DLPACK_CUDA",
    "array_kind",
    "library_of",
    "is_cupy",
    "is_torch",
    "on_cuda",
    "import_cupy",
    "array_module",
    "as_cupy_view",
    "in_namespace",
    "ignoring_float_errors",
    "count_non_finite",
]

#: DLPack device types meaning CUDA device memory: kDLCUDA (2) and kDLCUDAManaged (13)
DLPACK_CUDA = (2, 13)

ArrayKind = Literal["numpy", "cupy", "torch", "cuda", "dlpack-cuda", "other"]


def library_of(obj: Any) -> str:
    """The top-level package ``obj``'s type is defined in (``"builtins"`` for built-in types)."""
    return type(obj).__module__.split(".")[0]


def _has_cuda_interface(obj: Any) -> bool:
    try:  # read, not only looked up: a property may refuse (torch CPU tensors raise)
        getattr(obj, "__cuda_array_interface__")  # noqa: B009
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return False
    return True


def _dlpack_on_cuda(obj: Any) -> bool:
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return int(dev()[0]) in DLPACK_CUDA
    except (TypeError, ValueError, RuntimeError):
        return False


def array_kind(obj: Any) -> ArrayKind:
    """Which of the kinds in the module docstring ``obj`` is (checked in that order)."""
    if isinstance(obj, np.ndarray):
        return "numpy"
    lib = library_of(obj)
    if lib == "cupy":
        return "cupy"
    if lib == "torch":
        return "torch"
    if _has_cuda_interface(obj):
        return "cuda"
    if _dlpack_on_cuda(obj):
        return "dlpack-cuda"
    return "other"


def is_cupy(obj: Any) -> bool:
    """A cupy array."""
    return array_kind(obj) == "cupy"


def is_torch(obj: Any) -> bool:
    """A torch tensor (on any device)."""
    return array_kind(obj) == "torch"


def on_cuda(obj: Any) -> bool:
    """An array in CUDA memory: cupy, a torch CUDA tensor, ``__cuda_array_interface__`` or CUDA DLPack."""
    kind = array_kind(obj)
    if kind == "torch":
        return bool(getattr(obj, "is_cuda", False))
    return kind in ("cupy", "cuda", "dlpack-cuda")


def import_cupy():
    """The cupy module; a DeviceError naming the install extras where it cannot be imported."""
    try:
        import cupy
    except ImportError as e:
        raise DeviceError(
            f"the CUDA backend needs cupy (pip install 'stirgpu[cuda12]' or 'stirgpu[cuda13]'): {e}"
        ) from e
    return cupy


def array_module(a: Any):
    """numpy or cupy, whichever ``a`` belongs to (numpy for anything that is not cupy)."""
    return import_cupy() if is_cupy(a) else np


def as_cupy_view(a: Any):
    """``a`` (cupy, a torch CUDA tensor, ``__cuda_array_interface__`` or CUDA DLPack) as a cupy
    array sharing its memory; None for any other kind (the caller says what it wanted)."""
    kind = array_kind(a)
    if kind == "cupy":
        return a
    if kind == "other" or kind == "numpy" or (kind == "torch" and not on_cuda(a)):
        return None
    cp = import_cupy()
    return cp.asarray(a) if kind == "cuda" else cp.from_dlpack(a)


def in_namespace(xp, a: Any):
    """``a`` (numpy or cupy) as an array of ``xp``: itself when it is one, else a copy to the
    host (numpy) or to the current GPU (cupy)."""
    if array_module(a) is xp:
        return a
    return a.get() if xp is np else xp.asarray(a)


def ignoring_float_errors(xp, **which):
    """A context in which numpy does not warn about floating-point errors (``which``: numpy's
    ``errstate`` keywords, default all); nothing for cupy, which never warns."""
    if xp is not np:
        return contextlib.nullcontext()
    return np.errstate(**(which or {"all": "ignore"}))


def count_non_finite(a: Any) -> int:
    """How many values of ``a`` (numpy or cupy) are NaN or ±Inf.

    One sum answers for arrays without any (the usual case): a sum is finite only when every
    term is -- NaN and ±Inf propagate, +Inf + -Inf is NaN --, and it reads the array once
    without a temporary.  Only a sum that is not finite is followed by the exact count (a
    float32 sum of finite values beyond 3.4e38 overflows too: that count then says 0)."""
    xp = array_module(a)
    if a.dtype.kind not in "fc" or a.size == 0:
        return 0
    with ignoring_float_errors(xp):
        total = float(xp.sum(a))
        if total - total == 0.0:  # (finite: inf - inf and nan - nan are NaN)
            return 0
        return int(xp.count_nonzero(~xp.isfinite(a)))
