"""Compilation of the CUDA Joseph kernels: ``cuda/joseph.cu`` + ``cuda/joseph_common.cuh``
(package data) compiled by :class:`cupy.RawModule` (NVRTC; cupy passes ``-arch=sm_XX`` of the
current device) on first use, memoised per (device, compile options); kernels looked up once.
Nothing happens at import; cupy is imported on the first compilation.
"""

from __future__ import annotations

import functools
import importlib.resources

from ..arrays import import_cupy
from ..errors import DeviceError, StirGpuError
from .cuda_options import KernelOptions

__all__ = ["kernel_source", "get_kernel", "device_arch"]


_E_TYPES = ("float", "double")
_I_TYPES = ("int", "long long")


def _name_expressions() -> tuple[str, ...]:
    names = []
    for k in ("fwd_explicit_simple", "back_explicit_simple", "fwd_explicit_tiled", "back_explicit_tiled"):
        names += [f"{k}<{e}, {i}>" for e in _E_TYPES for i in _I_TYPES]
    for k in ("fwd_chunk_simple", "back_chunk_simple", "fwd_chunk_tiled", "back_chunk_tiled"):
        names += [f"{k}<{i}>" for i in _I_TYPES]
    return tuple(names)


@functools.lru_cache(maxsize=1)
def kernel_source() -> str:
    """joseph.cu with joseph_common.cuh inlined, so that cupy's on-disk kernel cache,
    keyed by the source text, sees every change of either file."""
    d = importlib.resources.files("stirgpu.kernels").joinpath("cuda")
    header = d.joinpath("joseph_common.cuh").read_text(encoding="utf-8")
    body = d.joinpath("joseph.cu").read_text(encoding="utf-8")
    include = '#include "joseph_common.cuh"'
    if include not in body:
        raise StirGpuError("stirgpu/kernels/cuda/joseph.cu does not include joseph_common.cuh")
    return body.replace(include, header, 1)


@functools.lru_cache(maxsize=16)
def _module(device_id: int, compile_options: tuple[str, ...]):
    """The compiled RawModule for one device (cupy picks -arch=sm_XX of that device)."""
    cp = import_cupy()
    with cp.cuda.Device(device_id):
        mod = cp.RawModule(code=kernel_source(), options=compile_options, name_expressions=_name_expressions())
        try:
            mod.compile()
        except cp.cuda.compiler.CompileException as e:
            raise DeviceError(f"compiling the Joseph kernels for CUDA device {device_id} failed:\n{e}") from e
    return mod


@functools.lru_cache(maxsize=512)
def get_kernel(device_id: int, options: KernelOptions, name: str):
    """One kernel (cached: get_function costs more than a launch).  Back-projection
    kernels come from the module compiled with the back options, the others from the
    forward one: a register cap that speeds up the forward slows the atomics down."""
    back = name.startswith("back_") or name == "combine_back"
    mod = _module(device_id, options.compile_options(back=back))
    return mod.get_function(name)


def device_arch(device_id: int | None = None) -> str:
    """``sm_XY`` of a CUDA device (default: the current one): what the kernels are built for."""
    cp = import_cupy()
    dev = cp.cuda.Device(device_id) if device_id is not None else cp.cuda.Device()
    return f"sm_{dev.compute_capability}"
