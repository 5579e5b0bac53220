"""``cached_njit``: numba's ``njit`` with its on-disk cache in stirgpu's cache folder.

numba's own ``cache=True`` writes beside the source, into the installed package's
``__pycache__``, whenever that folder is writable (see :mod:`stirgpu.caches` for why that
breaks a later editable install).  ``cached_njit`` keeps numba's cache format and its
invalidation (source stamp, numba version, CPU, argument types) and changes only the
location: ``stirgpu.caches.numba_cache_dir()``, one sub-folder per source file.

The cache is opened on the first compilation, not at decoration: importing a kernel module
creates no folder.  Where the folder cannot be written, kernels still run (compiled in every
process) and a :class:`~stirgpu.errors.KernelCacheWarning` says so once per function.

numba has no public hook for the cache location short of its process-wide
``NUMBA_CACHE_DIR`` (which would move every other package's cache too), so this uses the
documented-in-source extension point of ``numba.core.caching``: a locator class on a
``FunctionCache`` subclass, installed as the dispatcher's cache.
"""

from __future__ import annotations

import os
import warnings

from numba import njit
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    NullCache,
    _Cache,
    _CacheLocator,
    _SourceFileBackedLocatorMixin,
)

from ..caches import CACHE_DIR_ENV, numba_cache_dir
from ..errors import KernelCacheWarning

__all__ = ["cached_njit"]


def cached_njit(**options):
    """Decorator: ``numba.njit(**options)`` whose machine code is cached in stirgpu's cache folder.
    ``options`` are numba's (``parallel``, ``fastmath``, ``inline``, ``error_model``, ...)."""
    if "cache" in options:
        raise TypeError("cached_njit: 'cache' is not an option here (the cache is always stirgpu's)")

    def decorate(py_func):
        dispatcher = njit(**options)(py_func)
        dispatcher._cache = _DeferredCache(py_func)
        return dispatcher

    return decorate


class _StirgpuLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """numba's user-wide locator, rooted at :func:`stirgpu.caches.numba_cache_dir`."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(numba_cache_dir(), self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path


class _StirgpuCacheImpl(CompileResultCacheImpl):
    _locator_classes = [_StirgpuLocator]


class _StirgpuFunctionCache(FunctionCache):
    _impl_class = _StirgpuCacheImpl


class _DeferredCache(_Cache):
    """Opens the real cache on first use (the first compilation), so that decoration does no I/O."""

    def __init__(self, py_func):
        self._py_func = py_func
        self._opened = None

    def _cache(self):
        if self._opened is None:
            self._opened = _open(self._py_func)
        return self._opened

    @property
    def cache_path(self):
        return self._cache().cache_path

    def load_overload(self, sig, target_context):
        return self._cache().load_overload(sig, target_context)

    def save_overload(self, sig, cres):
        self._cache().save_overload(sig, cres)

    def enable(self):
        self._cache().enable()

    def disable(self):
        self._cache().disable()

    def flush(self):
        self._cache().flush()


def _open(py_func):
    try:
        return _StirgpuFunctionCache(py_func)
    except RuntimeError:
        # numba's "no locator available": the folder cannot be created or written
        warnings.warn(
            f"stirgpu: cannot write the kernel cache in {numba_cache_dir()}; "
            f"{py_func.__qualname__} is compiled again in every process "
            f"(set {CACHE_DIR_ENV} to a writable folder)",
            KernelCacheWarning,
            stacklevel=4,
        )
        return NullCache()
