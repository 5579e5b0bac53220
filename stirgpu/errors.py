"""One error hierarchy for stirgpu.

Every error stirgpu raises on purpose is a :class:`StirGpuError`.  Errors about
a file name the file and, where there is one, the Interfile key or the line, so
a user can fix the input without reading a traceback.
"""

from __future__ import annotations

import os

__all__ = [
    "StirGpuError",
    "FormatError",
    "GeometryError",
    "PlanError",
    "DeviceError",
    "PipelineError",
    "ParFileError",
    "KernelCacheWarning",
]


class StirGpuError(Exception):
    """Base class of every error stirgpu raises deliberately."""


class FormatError(StirGpuError, ValueError):
    """A file (header or data) is missing, malformed or inconsistent.

    ``path`` is the file, ``key`` the Interfile keyword at fault (if any).
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, key: str | None = None):
        self.path = None if path is None else os.fspath(path)
        self.key = key
        self.reason = message
        parts = []
        if self.path is not None:
            parts.append(self.path)
        if key is not None:
            parts.append(f"key '{key}'")
        parts.append(message)
        super().__init__(": ".join(parts))


class GeometryError(StirGpuError, ValueError):
    """Geometry parameters that STIR would refuse, or a request outside the geometry."""


class PlanError(StirGpuError):
    """The execution plan cannot be built (e.g. not even one viewgram fits the memory budget)."""


class DeviceError(StirGpuError):
    """A requested device or backend is not available."""


class PipelineError(StirGpuError):
    """A reader, worker or writer of the execution pipeline failed; the cause is chained."""


class ParFileError(StirGpuError, ValueError):
    """A STIR parameter file is malformed or asks for something stirgpu does not support.

    ``path`` and ``line`` (1-based) locate the problem.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None):
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.reason = message
        where = ""
        if self.path is not None:
            where = self.path
            if line is not None:
                where += f":{line}"
        elif line is not None:
            where = f"line {line}"
        super().__init__(f"{where}: {message}" if where else message)


class KernelCacheWarning(UserWarning):
    """Compiled kernels cannot be kept on disk (the cache folder is not writable); they still run."""
