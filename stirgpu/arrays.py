"""Which array library an array belongs to, without importing a GPU library before one is seen.

* :data:`DLPACK_CUDA` -- the DLPack device types of CUDA device memory;
* :func:`import_cupy` -- cupy, imported on first use, or a :class:`~stirgpu.errors.DeviceError`
  saying how to install it;
* :func:`array_module` -- numpy or cupy, whichever an array belongs to (the ``xp`` of code
  written once for both).

Any package may import it (it imports numpy and :mod:`stirgpu.errors` only; cupy on first use).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DeviceError

__all__ = ["DLPACK_CUDA", "import_cupy", "array_module"]

#: DLPack device types meaning CUDA device memory: kDLCUDA (2) and kDLCUDAManaged (13)
DLPACK_CUDA = (2, 13)


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
    """numpy or cupy, whichever ``a`` belongs to."""
    if isinstance(a, np.ndarray):
        return np
    mod = type(a).__module__.split(".")[0]
    if mod == "cupy":
        return import_cupy()
    return np
