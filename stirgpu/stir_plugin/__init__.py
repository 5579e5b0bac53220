"""stirgpu inside STIR: the projector types named ``stirgpu`` in STIR's own registries.

The plugin (C++, ``swig/``) is built once per STIR and Python (:func:`build`, or
``stirgpu stir-plugin build``).  Loaded into a process that runs STIR, it registers a
``ProjectorByBinPair``, a ``ForwardProjectorByBin`` and a ``BackProjectorByBin`` named
``stirgpu`` (``projector pair type := stirgpu`` in STIR's ``.par`` files), whose work is done
by stirgpu's engine in the same process (:mod:`.bridge`):

* STIR's executables: ``stirgpu stir OSMAPOSL file.par`` (preloads the plugin);
* STIR's Python module: ``import stir`` then :func:`load`; :func:`projector_pair`,
  :func:`forward_projector` and :func:`back_projector` make STIR Python objects of the
  stirgpu types (for ``set_projector_pair_sptr`` and the like).

Importing this package does nothing; :func:`load` only loads a build that exists.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

from ..errors import StirGpuError
from .building import PluginBuild, PluginBuildError, build, find_build, find_stir_prefix

__all__ = [
    "load",
    "projector_pair",
    "forward_projector",
    "back_projector",
    "build",
    "find_build",
    "find_stir_prefix",
    "PluginBuild",
    "PluginBuildError",
    "loaded_stir_prefix",
]


def loaded_stir_prefix() -> Path:
    """The prefix of the STIR whose libraries this process has loaded (``import stir`` did):
    the folder above the ``libstir_buildblock.so`` in the process's memory map."""
    if "stir" not in sys.modules:
        raise StirGpuError("STIR's Python module is not imported: import stir before stirgpu.stir_plugin.load()")
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip()
                if os.path.basename(path).startswith("libstir_buildblock.so"):
                    return Path(path).resolve().parent.parent
    except OSError as e:
        raise StirGpuError(f"cannot tell which STIR this process runs (/proc/self/maps: {e})") from None
    raise StirGpuError(
        "this process has STIR's Python module but no libstir_buildblock.so loaded (a static STIR build?); "
        "the plugin needs STIR's shared libraries"
    )


def load(stir_prefix: str | os.PathLike | None = None) -> PluginBuild:
    """Register the stirgpu types with the STIR of this process (``import stir`` first).

    The plugin built for that STIR (``stir_prefix``, default: the one loaded) and this Python
    is loaded into the process; loading it again does nothing.  Returns the build."""
    prefix = loaded_stir_prefix() if stir_prefix is None else Path(stir_prefix)
    found = find_build(prefix)
    ctypes.PyDLL(str(found.plugin), mode=ctypes.RTLD_GLOBAL)
    return found


def _native():
    lib = ctypes.PyDLL(str(load().plugin), mode=ctypes.RTLD_GLOBAL)
    lib.stirgpu_stir_plugin_module.restype = ctypes.py_object
    return lib.stirgpu_stir_plugin_module()


def _block(role: str, options: dict) -> str:
    from ..parfile.projectors import STIRGPU, ProjectorOptions

    try:
        opts = ProjectorOptions(type=STIRGPU, **options)
    except TypeError as e:
        raise StirGpuError(f"stirgpu projector options: {e}") from None
    except ValueError as e:
        raise StirGpuError(str(e)) from None
    return "\n".join(opts.block_lines(role)) + "\n"


def projector_pair(**options):
    """A ``stir.ProjectorByBinPair`` of type stirgpu (both projectors on one engine).

    ``options``: the fields of :class:`stirgpu.parfile.projectors.ProjectorOptions` --
    ``backend``, ``devices``, ``gpu_memory_budget_mb``, ``host_memory_budget_mb``,
    ``max_views_per_chunk``, ``restrict_to_cylindrical_fov``, ``verbosity``."""
    return _native().projector_pair(_block("Projector Pair", options))


def forward_projector(**options):
    """A ``stir.ForwardProjectorByBin`` of type stirgpu (options: see :func:`projector_pair`)."""
    return _native().forward_projector(_block("Forward Projector", options))


def back_projector(**options):
    """A ``stir.BackProjectorByBin`` of type stirgpu (options: see :func:`projector_pair`)."""
    return _native().back_projector(_block("Back Projector", options))
