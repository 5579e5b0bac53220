"""Compilation of the package's CUDA sources (``cuda/*.cu``, package data) by
:class:`cupy.RawModule` (NVRTC; cupy passes ``-arch=sm_XX`` of the current device) on first use:
:func:`compiled_module`, memoised per (device, source files, options, name expressions), serves
every CUDA kernel module of stirgpu; a compile error is a :class:`~stirgpu.errors.DeviceError`
naming the source.  The Joseph kernels (``cuda/joseph.cu`` + ``cuda/joseph_common.cuh``) are
looked up once each (:func:`get_kernel`).  Nothing happens at import; cupy is imported on the
first compilation.
"""

from __future__ import annotations

import functools
import importlib.resources
import re

from ..arrays import import_cupy
from ..errors import DeviceError, StirGpuError
from .cuda_options import KernelOptions

__all__ = ["package_source", "compiled_module", "kernel_source", "get_kernel", "device_arch"]


_E_TYPES = ("float", "double")
_I_TYPES = ("int", "long long")


def _name_expressions() -> tuple[str, ...]:
    names = []
    for k in ("fwd_explicit_simple", "back_explicit_simple", "fwd_explicit_tiled", "back_explicit_tiled"):
        names += [f"{k}<{e}, {i}>" for e in _E_TYPES for i in _I_TYPES]
    for k in ("fwd_chunk_simple", "back_chunk_simple", "fwd_chunk_tiled", "back_chunk_tiled"):
        names += [f"{k}<{i}>" for i in _I_TYPES]
    return tuple(names)


#: a quoted include of one of the package's own headers (inlined by :func:`package_source`)
_INCLUDE = re.compile(r'^#include "([^"]+)"[ \t]*$', re.MULTILINE)
_SOURCE_DIR = "stirgpu/kernels/cuda"
_JOSEPH = ("joseph.cu",)


def _read(name: str, named_by: str) -> str:
    path = importlib.resources.files("stirgpu.kernels").joinpath("cuda", name)
    if not path.is_file():
        raise StirGpuError(f"{named_by} names {_SOURCE_DIR}/{name}, which is not in the package")
    return path.read_text(encoding="utf-8")


def _with_headers(name: str) -> str:
    """``cuda/<name>`` with each quoted include of a package header replaced by the header."""
    return _INCLUDE.sub(lambda m: _read(m.group(1), f"{_SOURCE_DIR}/{name}"), _read(name, "a CUDA kernel module"))


@functools.lru_cache(maxsize=8)
def package_source(files: tuple[str, ...]) -> str:
    """The package's CUDA sources ``cuda/<file>`` of ``files``, one after the other, their quoted
    ``#include "header"`` of package headers inlined: cupy's on-disk kernel cache, keyed by the
    source text, then sees every change of every file."""
    return "\n".join(_with_headers(f) for f in files)


def kernel_source() -> str:
    """joseph.cu with joseph_common.cuh inlined: what the Joseph kernels are compiled from."""
    return package_source(_JOSEPH)


@functools.lru_cache(maxsize=512)  # room for every module of 8 GPUs (both LOR orders, every TOF window)
def compiled_module(
    device_id: int, files: tuple[str, ...], options: tuple[str, ...], name_expressions: tuple[str, ...] = ()
):
    """The RawModule of :func:`package_source` ``(files)`` compiled with ``options`` for one
    device (cupy adds ``-arch=sm_XX`` of that device), instantiating the templates of
    ``name_expressions`` (``extern "C"`` kernels need none); memoised per argument tuple."""
    cp = import_cupy()
    with cp.cuda.Device(device_id):
        mod = cp.RawModule(code=package_source(files), options=options, name_expressions=name_expressions)
        try:
            mod.compile()
        except cp.cuda.compiler.CompileException as e:
            where = " + ".join(f"{_SOURCE_DIR}/{f}" for f in files)
            raise DeviceError(f"compiling {where} for CUDA device {device_id} failed:\n{e}") from e
    return mod


@functools.lru_cache(maxsize=512)
def get_kernel(device_id: int, options: KernelOptions, name: str):
    """One kernel (cached: get_function costs more than a launch).  Back-projection
    kernels come from the module compiled with the back options, the others from the
    forward one: a register cap that speeds up the forward slows the atomics down."""
    back = name.startswith("back_") or name == "combine_back"
    mod = compiled_module(device_id, _JOSEPH, options.compile_options(back=back), _name_expressions())
    return mod.get_function(name)


def device_arch(device_id: int | None = None) -> str:
    """``sm_XY`` of a CUDA device (default: the current one): what the kernels are built for."""
    cp = import_cupy()
    dev = cp.cuda.Device(device_id) if device_id is not None else cp.cuda.Device()
    return f"sm_{dev.compute_capability}"
