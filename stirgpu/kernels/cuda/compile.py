"""Compilation of the package's CUDA sources (``*.cu`` and ``*.cuh`` beside this module, package
data) by :class:`cupy.RawModule` (NVRTC; cupy passes ``-arch=sm_XX`` of the current device) on
first use: :func:`compiled_module`, memoised per (device, source files, options, name
expressions), serves every CUDA kernel module of stirgpu; a compile error is a
:class:`~stirgpu.errors.DeviceError` naming the sources.  Nothing happens at import; cupy is
imported on the first compilation.
"""

from __future__ import annotations

import functools
import importlib.resources
import re

from ...arrays import import_cupy
from ...errors import DeviceError, StirGpuError

__all__ = ["package_source", "compiled_module", "device_arch"]

#: a quoted include of one of the package's own headers (inlined by :func:`package_source`)
_INCLUDE = re.compile(r'^#include "([^"]+)"[ \t]*$', re.MULTILINE)
_SOURCE_DIR = "stirgpu/kernels/cuda"


def _read(name: str, named_by: str) -> str:
    path = importlib.resources.files("stirgpu.kernels.cuda").joinpath(name)
    if not path.is_file():
        raise StirGpuError(f"{named_by} names {_SOURCE_DIR}/{name}, which is not in the package")
    return path.read_text(encoding="utf-8")


def _with_headers(name: str) -> str:
    """``<name>`` with each quoted include of a package header replaced by the header."""
    return _INCLUDE.sub(lambda m: _read(m.group(1), f"{_SOURCE_DIR}/{name}"), _read(name, "a CUDA kernel module"))


@functools.lru_cache(maxsize=8)
def package_source(files: tuple[str, ...]) -> str:
    """The package's CUDA sources ``files``, one after the other, their quoted
    ``#include "header"`` of package headers inlined: cupy's on-disk kernel cache, keyed by the
    source text, then sees every change of every file."""
    return "\n".join(_with_headers(f) for f in files)


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


def device_arch(device_id: int | None = None) -> str:
    """``sm_XY`` of a CUDA device (default: the current one): what the kernels are built for."""
    cp = import_cupy()
    dev = cp.cuda.Device(device_id) if device_id is not None else cp.cuda.Device()
    return f"sm_{dev.compute_capability}"
