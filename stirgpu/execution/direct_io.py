"""Direct I/O: which stores GPUs copy straight to and from, and when they are page-locked.

A store that keeps its bins in host memory in view order says so (``abilities.host_memory``)
and hands that memory out (``host_array(segment)``: float32, C-contiguous, writeable, (views,
axial, tangential), the same memory for the store's life).  Once that memory is page-locked
(:mod:`stirgpu.execution.pinning`), a chunk's parts go between it and a GPU by DMA: no read
or write stage, no staging buffer.  The policy (``pin_host_memory``): "reused" page-locks a
store at its second use by the engine (page-locking costs more than one call gains from it;
a store used once, such as a fresh output, stays staged), "always" at its first, "never"
keeps every store staged.  Memory its owner page-locked is used as it is.

The answers are kept per store (weakly: the engine never keeps a store alive) and geometry,
so a repeated call does not look at every segment again.  Only GPUs copy directly: on the
CPU backend nothing is direct.

Imports: numpy, :mod:`.identity`, :mod:`.pinning` (cupy only through it, on GPUs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .identity import STRONG, WEAK, IdentityCache
from .pinning import HostPinning

__all__ = ["DirectIO"]


class DirectIO:
    """Which stores of a call are used in place, for one engine (``backend``, ``pin_policy``:
    one of :data:`stirgpu.config.PIN_POLICIES`, checked by the engine)."""

    def __init__(self, backend: str, pin_policy: str):
        self.backend = backend
        self.pin_policy = pin_policy
        self._pinning = HostPinning()
        # stores met once (weakly held): "reused" page-locks them at their next use
        self._met = IdentityCache((WEAK,))
        # the answer per (store, geometry, segments): a store's host memory is the same for its
        # whole life, so a call does not check every segment again
        self._answers = IdentityCache((WEAK, STRONG))

    def clear(self) -> None:
        """Forget the kept answers (not which stores were met, nor the page-locks: those last
        as long as the arrays, see :mod:`.pinning`)."""
        self._answers.clear()

    def find(self, stores: Mapping[str, Any], proj_data_info, segments: tuple[int, ...]) -> dict:
        """``{name: {segment: array}}`` for the stores GPUs copy straight to and from (see
        :meth:`stirgpu.execution.Engine.direct_io`).  Not thread-safe: the engine calls it
        under its lock (one page-locking at a time)."""
        if self.backend != "cuda" or self.pin_policy == "never":
            return {}
        found = {}
        for name, store in stores.items():
            arrays = self._answers.get((store, proj_data_info), segments)
            if arrays is None:
                register = self.pin_policy == "always" or self._met_before(store)
                arrays = self._host_arrays(store, proj_data_info, segments, register)
                if arrays is not None:
                    self._answers.put((store, proj_data_info), arrays, segments)
            if arrays is not None:
                found[name] = arrays
        return found

    def _met_before(self, store) -> bool:
        """Whether this engine has met ``store`` before (and remembers it now; a store that
        cannot be weakly held is never remembered, so it stays staged)."""
        if self._met.get((store,)) is not None:
            return True
        self._met.put((store,), True)
        return False

    def _host_arrays(self, store, pdi, segments, register: bool) -> dict | None:
        """``{segment: host_array(segment)}`` when every one fits and is page-locked (by this
        call when ``register``, else already), or None."""
        if not store.abilities.host_memory or pdi.is_tof_data():
            # a TOF part is one slab per timing position, apart in the store's memory (TOF
            # outermost): such parts are staged
            return None
        get = store.host_array
        nt, nv = pdi.get_num_tangential_poss(), pdi.get_num_views()
        arrays = {}
        for seg in segments:
            a = get(seg)
            if not (
                isinstance(a, np.ndarray)
                and a.dtype == np.float32
                and a.flags.c_contiguous
                and a.flags.writeable
                and a.shape == (nv, pdi.get_num_axial_poss(seg), nt)
            ):
                return None
            arrays[seg] = a
        lock = self._pinning.pin if register else self._pinning.is_pinned
        return arrays if all(lock(a) for a in arrays.values()) else None
