"""Page-locking the host memory of in-memory stores, so that GPUs copy chunks straight to and from it.

A chunk goes between a GPU and a store's memory either through a pinned staging buffer
(one host copy each way, a few GB/s per thread) or, when the store's memory is itself
page-locked, by DMA straight from or into the store: asynchronous, at the link's rate,
and a subset's strided views in one 2-D copy per part.  Measured on an H200 host:
page-locking 290 MB of existing memory (``cudaHostRegister``) takes 14 ms (21 GB/s),
DMA then runs at 53 GB/s each way, while the staged path costs a host copy of every
byte at ~5 GB/s per thread (see docs/execution.md, "Direct transfers").

So the engine page-locks an in-memory store's arrays once -- by default at the store's
second use (a store used once, such as a fresh output of a SIRF-style ``forward``, would
pay the page-locking for one call's gain; a zero-filled new store even has its pages
faulted in by it) -- and the registration stays as long as the array lives; a finalizer
undoes it just before the array's memory is freed (numpy clears weak references before
it frees an array's buffer).  Memory somebody else already page-locked is used as it is and never
unregistered here.  A registration the driver refuses (limits, odd memory) leaves that
array on the staged path: slower, never wrong.
"""

from __future__ import annotations

import weakref

import numpy as np

from .identity import WEAK, IdentityCache

__all__ = ["HostPinning", "owner_of"]

#: cudaHostRegisterPortable: page-locked for every CUDA context of the process (all GPUs)
_PORTABLE = 1
#: cudaMemoryTypeHost in cudaPointerAttributes.type
_TYPE_HOST = 1


def owner_of(a: np.ndarray) -> np.ndarray | None:
    """The ndarray that owns ``a``'s memory (None when a non-numpy object does: its lifetime,
    and so the registration's, would be unknown)."""
    o = a
    while isinstance(o.base, np.ndarray):
        o = o.base
    return o if o.base is None and o.flags.owndata else None


def _unregister(ptr: int) -> None:
    from cupy.cuda import runtime

    runtime.hostUnregister(ptr)


class HostPinning:
    """Which host arrays this engine page-locked (or found page-locked), by owner.

    ``pin(a)`` returns True when ``a``'s memory is page-locked for every GPU afterwards.
    One per engine: the registrations themselves belong to the arrays (see the module
    docstring), this only remembers the answers so that a call does not ask the driver
    again."""

    def __init__(self):
        # per owning array (weakly held): whether it is page-locked for every GPU
        self._known = IdentityCache((WEAK,))

    def is_pinned(self, a: np.ndarray) -> bool:
        """Whether ``a``'s memory is page-locked already (here or by its owner); registers nothing."""
        if a.nbytes == 0:
            return False
        owner = owner_of(a)
        known = self._answer(owner) if owner is not None else None
        return known if known is not None else _locked(a)

    def pin(self, a: np.ndarray) -> bool:
        if a.nbytes == 0:
            return False
        owner = owner_of(a)
        if owner is None:
            # memory of another object (cupy's pinned allocator, a foreign buffer): used when it
            # is page-locked already, never registered here (its lifetime is not ours to follow)
            return _locked(a)
        known = self._answer(owner)
        if known is not None:
            return known
        ok = self._register(owner)
        self._known.put((owner,), ok)
        return ok

    def _answer(self, owner: np.ndarray) -> bool | None:
        """What :meth:`pin` found for ``owner`` before (None: not asked yet)."""
        return self._known.get((owner,))

    @staticmethod
    def _register(owner: np.ndarray) -> bool:
        from cupy.cuda import runtime

        if _locked(owner):
            return True  # page-locked by its owner: use it, leave it alone
        ptr = int(owner.ctypes.data)
        try:
            runtime.hostRegister(ptr, int(owner.nbytes), _PORTABLE)
        except runtime.CUDARuntimeError:
            return False  # e.g. already registered in part, or over a limit: stay staged
        fin = weakref.finalize(owner, _unregister, ptr)
        fin.atexit = False  # at exit the driver releases everything; cupy may be gone by then
        return True


def _locked(a: np.ndarray) -> bool:
    """Whether the driver reports both ends of ``a``'s memory as page-locked host memory."""
    from cupy.cuda import runtime

    ptr = int(a.ctypes.data)
    return all(_is_pinned(runtime, p) for p in (ptr, ptr + a.nbytes - 1))


def _is_pinned(runtime, ptr: int) -> bool:
    try:
        return int(runtime.pointerGetAttributes(ptr).type) == _TYPE_HOST
    except runtime.CUDARuntimeError:
        return False
