"""One error hierarchy for stirgpu.

Every error stirgpu raises on purpose is a :class:`StirGpuError`.  Errors about
a file name the file and, where there is one, the Interfile key or the line, so
a user can fix the input without reading a traceback.
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = [
    "renamed_arguments",
    "StirGpuError",
    "FormatError",
    "NonFiniteError",
    "GeometryError",
    "StoreAbilityError",
    "FileStoreAbilityError",
    "PlanError",
    "OutOfMemoryError",
    "DeviceError",
    "PipelineError",
    "Cancelled",
    "RankFailure",
    "ParFileError",
    "ParFileProblems",
    "KernelCacheWarning",
]


def renamed_arguments(**new_names: str):
    """Decorator for a function (or a class, meaning its ``__init__``) whose keyword arguments
    were renamed: calling it with an old name raises a TypeError naming the old and the new one
    (``new_names`` maps each old name to the sentence that says what to use instead), so that
    code written for the old name stops rather than means something else or fails obscurely."""

    def decorate(obj):
        cls: Any = obj  # (a class's __init__ is read and replaced below)
        target = cls.__init__ if isinstance(obj, type) else obj
        where = obj.__qualname__

        @functools.wraps(target)
        def checked(*args, **kwargs):
            for old in kwargs.keys() & new_names.keys():
                raise TypeError(f"{where}(): there is no argument '{old}' any more: {new_names[old]}")
            return target(*args, **kwargs)

        if isinstance(obj, type):
            cls.__init__ = checked
            return obj
        return checked

    return decorate


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


class NonFiniteError(FormatError):
    """An input (an image, projection data, normalisation factors, an additive term, an initial
    estimate) holds NaN or ±Inf values; refused before a projection or a reconstruction writes
    anything, since one such value spreads to every bin or voxel it touches.

    ``what`` is the input: its file, else the Python argument; ``count`` how many values are not
    finite (in what the call reads of it: the views of its subset and segments).  ``path`` (a
    :class:`FormatError`'s) is the file, or None for an argument without one."""

    def __init__(self, what: str, count: int, path: str | os.PathLike | None = None):
        self.what, self.count = str(what), int(count)
        values = "value" if self.count == 1 else "values"
        reason = (
            f"holds {self.count} non-finite {values} (NaN or ±Inf): a NaN or an infinity spreads to "
            "every bin or voxel it touches; replace them with finite values first"
        )
        super().__init__(reason, path)
        self.args = (f"{self.what} {reason}",)

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return type(self), (self.what, self.count, self.path)


class GeometryError(StirGpuError, ValueError):
    """Geometry parameters that STIR would refuse, or a request outside the geometry."""


class StoreAbilityError(StirGpuError):
    """A projection-data store was asked for something its declared abilities
    (``store.abilities``, :class:`~stirgpu.formats.StoreAbilities`) say it cannot do -- read a
    template, write a read-only store, abort data already committed, ... -- and refused it
    without reading or changing a value.  The message names the store and what it cannot do."""


class FileStoreAbilityError(FormatError, StoreAbilityError):
    """A :class:`StoreAbilityError` of a store on disk; as a :class:`FormatError`, its ``path``
    is the store's file."""


class PlanError(StirGpuError):
    """The execution plan cannot be built (e.g. not even one viewgram fits the memory budget)."""


class OutOfMemoryError(PlanError):
    """Memory ran out during a call, and still did with the smallest chunks the engine can make
    (one viewgram per buffer).  ``memory`` is ``"GPU"`` or ``"host"``; ``budget`` the plan's
    budget of that memory and ``free`` what was free when the call gave up (bytes; None where
    not known); ``option`` the setting to change.  The message says all of them.  Outputs were
    handled as for any failed call: a new store aborted, nothing committed."""

    def __init__(self, message: str, memory: str, budget: int | None, free: int | None, option: str):
        super().__init__(message)
        self.memory, self.budget, self.free, self.option = memory, budget, free, option


class DeviceError(StirGpuError):
    """A requested device or backend is not available."""


class PipelineError(StirGpuError):
    """A reader, worker or writer of the execution pipeline failed; the cause is chained."""


class Cancelled(StirGpuError):
    """Work stopped early because its caller cancelled it (a kernel given ``cancel=``, a
    pipeline stopping after another thread's failure or a KeyboardInterrupt); its results are
    incomplete and were not committed."""


class RankFailure(StirGpuError):
    """Under MPI: one or more ranks failed in a step that every rank takes together; raised on
    every rank alike, naming the failing rank(s) and the cause.  ``ranks`` are the ranks that
    failed, ``size`` the number of ranks, ``cause`` the first failing rank's message."""

    def __init__(self, ranks: tuple[int, ...], size: int, cause: str, what: str = ""):
        self.ranks, self.size, self.cause, self.what = tuple(ranks), int(size), cause, what
        if len(self.ranks) == self.size:  # the same failure everywhere (a bad input): rank 0's words
            super().__init__(cause)
            return
        who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)
        step = f" ({what})" if what else ""
        super().__init__(f"{who} of {size} MPI ranks failed{step}: {cause}")


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


class ParFileProblems(ParFileError):
    """Every problem found in one reading of a parameter file (and, where checked, of the
    files it names), so that a user fixes them all in one go.

    ``problems``: the :class:`ParFileError` s, in file order (by line).  ``path`` and ``line``
    are those of the first.  ``str()`` is one line per problem (``file:line: message``),
    followed by a count line when there is more than one.
    """

    problems: tuple[ParFileError, ...]

    def __init__(self, problems):
        problems = tuple(problems)
        if not problems:
            raise ValueError("ParFileProblems needs at least one problem")
        flat: list[ParFileError] = []
        for p in problems:  # a nested collection contributes its own problems
            flat.extend(p.problems if isinstance(p, ParFileProblems) else (p,))
        self.problems = tuple(sorted(flat, key=lambda p: (p.path or "", p.line or 0)))
        first = self.problems[0]
        lines = [str(p) for p in self.problems]
        if len(lines) > 1:
            files = sorted({p.path for p in self.problems if p.path is not None})
            where = f" in {', '.join(files)}" if files else ""
            lines.append(f"{len(lines)} problems{where}")
        Exception.__init__(self, "\n".join(lines))
        self.path, self.line = first.path, first.line
        self.reason = "\n".join(p.reason for p in self.problems)

    def __reduce__(self):
        return type(self), (self.problems,)


class KernelCacheWarning(UserWarning):
    """Compiled kernels cannot be kept on disk (the cache folder is not writable); they still run."""
