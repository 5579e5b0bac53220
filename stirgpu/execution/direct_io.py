"""Direct I/O: which stores GPUs copy straight to and from, and when they are page-locked.

A store that keeps its bins in host memory in view order says so (``abilities.host_memory``)
and hands that memory out, one array per segment and timing position
(``host_array(segment, timing_pos)``: float32, C-contiguous, writeable, (views, axial,
tangential), the same memory for the store's life).  Once that memory is page-locked
(:mod:`stirgpu.execution.pinning`), a chunk's parts go between it and a GPU by DMA: no read
or write stage, no staging buffer.  A TOF part is one slab per timing position in the chunk's
buffer (``[timing position][view][axial][tangential]``, the kernels' layout) and one array per
timing position in the store, so it is one copy per timing position (:func:`direct_copies`:
where each one goes, pure arithmetic; the engine's lanes issue them).

The policy (``pin_host_memory``): "reused" page-locks a store at its second use by the engine
(page-locking costs more than one call gains from it; a store used once, such as a fresh
output, stays staged), "always" at its first, "never" keeps every store staged.  Memory its
owner page-locked is used as it is.

The answers are kept per store (weakly: the engine never keeps a store alive) and geometry,
so a repeated call does not look at every segment again.  Only GPUs copy directly: on the
CPU backend nothing is direct.

Imports: numpy, :mod:`.identity`, :mod:`.pinning` (cupy only through it, on GPUs), :mod:`.plan`
(for its types).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .identity import STRONG, WEAK, IdentityCache
from .pinning import HostPinning, owner_of

if TYPE_CHECKING:
    from .plan import Chunk

__all__ = ["DirectCopy", "DirectIO", "direct_copies"]


class DirectCopy(NamedTuple):
    """One DMA of a chunk's direct copies: the ``views`` of the store's array for (``segment``,
    ``timing_pos``) and ``len(views)`` consecutive viewgrams of the chunk's buffer from bin
    ``offset`` on."""

    segment: int
    timing_pos: int
    views: tuple[int, ...]
    offset: int


def direct_copies(chunk: Chunk) -> Iterator[DirectCopy]:
    """The copies that move ``chunk`` between a store's host arrays and its buffer: per part, one
    per timing position, in buffer order (a part's timing positions are consecutive slabs of
    ``views x axial x tangential`` bins from the part's offset on, TOF outermost)."""
    for part in chunk.parts:
        nv, na, nt = part.shape
        slab = nv * na * nt
        for k, t in enumerate(part.timing_poss):
            yield DirectCopy(part.segment, t, part.views, part.offset + k * slab)


class DirectIO:
    """Which stores of a call are used in place, for one engine (``backend``, ``pin_policy``:
    one of :data:`stirgpu.config.PIN_POLICIES`, checked by the engine; ``pinning``: what
    page-locks host memory, a :class:`.HostPinning` unless given -- tests give one that needs
    no GPU)."""

    def __init__(self, backend: str, pin_policy: str, pinning: HostPinning | None = None):
        self.backend = backend
        self.pin_policy = pin_policy
        self._pinning = HostPinning() if pinning is None else pinning
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
        """``{name: {(segment, timing_pos): array}}`` for the stores GPUs copy straight to and
        from (see :meth:`stirgpu.execution.Engine.direct_io`).  Not thread-safe: the engine calls it
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

    def image_in_place(self, image) -> bool:
        """Whether a numpy input image can go to the GPUs by DMA straight from its own memory:
        C-contiguous float32, page-locked already or by this call under the same policy as the
        stores (``"reused"``: from its second upload on, so an OSEM estimate kept on the host,
        or one image projected again and again, pays the page-locking once).  Not thread-safe,
        as :meth:`find`."""
        if self.backend != "cuda" or self.pin_policy == "never" or not isinstance(image, np.ndarray):
            return False
        if image.dtype != np.float32 or not image.flags.c_contiguous or image.nbytes == 0:
            return False
        owner = owner_of(image)
        if owner is not None and owner.nbytes > 2 * image.nbytes:
            # page-locking covers the whole owner: a view into a series of images would lock
            # them all, for one image's upload
            return False
        if self.pin_policy == "always" or self._met_before(image):
            return self._pinning.pin(image)
        return self._pinning.is_pinned(image)

    def _met_before(self, store) -> bool:
        """Whether this engine has met ``store`` before (and remembers it now; a store that
        cannot be weakly held is never remembered, so it stays staged)."""
        if self._met.get((store,)) is not None:
            return True
        self._met.put((store,), True)
        return False

    def _host_arrays(self, store, pdi, segments, register: bool) -> dict | None:
        """``{(segment, timing_pos): host_array(segment, timing_pos)}`` for every segment and
        timing position, when every one fits and is page-locked (by this call when
        ``register``, else already), or None."""
        if not store.abilities.host_memory:
            return None
        arrays = {}
        timing_poss = range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)  # (0 alone: non-TOF)
        for seg in segments:
            shape = (pdi.get_num_views(), pdi.get_num_axial_poss(seg), pdi.get_num_tangential_poss())
            for t in timing_poss:
                a = store.host_array(seg, timing_pos=t)
                if not _fits(a, shape):
                    return None
                arrays[seg, t] = a
        if not _apart(arrays.values()):
            return None  # (a store handing out one array for several timing positions or segments)
        lock = self._pinning.pin if register else self._pinning.is_pinned
        return arrays if all(lock(a) for a in arrays.values()) else None


def _fits(a, shape: tuple[int, int, int]) -> bool:
    """Whether ``a`` is memory a GPU can copy viewgrams of ``shape`` straight to and from."""
    return (
        isinstance(a, np.ndarray)
        and a.dtype == np.float32
        and a.flags.c_contiguous
        and a.flags.writeable
        and a.shape == shape
    )


def _apart(arrays) -> bool:
    """Whether no two of ``arrays`` (C-contiguous) share a byte of memory."""
    spans = sorted((int(a.ctypes.data), int(a.ctypes.data) + a.nbytes) for a in arrays)
    return all(start >= end for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
