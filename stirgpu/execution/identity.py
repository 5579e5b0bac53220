"""Values kept per *object*, not per equal value: the engine's one cache.

The engine keeps answers that belong to particular objects: a plan and geometry tables made
from one geometry object (:class:`~stirgpu.geometry.ProjDataInfo` equality tolerates header
rounding, tables must come from the very geometry of the call), whether a store was met
before, which host memory of a store GPUs copy straight from, whether an array is
page-locked.  Such a cache is keyed by the objects' ids, and an id is only an identity while
its object lives: afterwards another object may get it.  :class:`IdentityCache` makes that
safe once, for every such cache:

* every entry holds its key objects, each **weakly** (the entry goes when the object dies: for
  stores and arrays, which the engine must not keep alive) or **strongly** (the object lives as
  long as the entry, so its id cannot be reused meanwhile: for geometry objects, which cannot
  be weakly referenced);
* a hit needs every key object to be the very object of the entry (``is``);
* eviction: an entry whose weakly held object died is dropped at the cache's next use (its
  value is then freed); beyond ``max_entries`` the least recently used entry goes.

Thread-safe: the pipeline's threads share one cache.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal

__all__ = ["IdentityCache", "WEAK", "STRONG"]

#: how an entry holds one of its key objects
WEAK: Literal["weak"] = "weak"
STRONG: Literal["strong"] = "strong"


class IdentityCache:
    """Values by the identity of a fixed number of key objects, plus an ordinary hashable key.

    ``hold`` says, per key object position, whether entries hold it weakly (:data:`WEAK`) or
    strongly (:data:`STRONG`); a weakly held object that cannot be weakly referenced is never
    cached (:meth:`put` returns False).  ``max_entries`` None: no bound but the objects' lives.
    """

    def __init__(self, hold: Sequence[str], max_entries: int | None = None):
        if not hold or any(h not in (WEAK, STRONG) for h in hold):
            raise ValueError(f"hold must be a non-empty sequence of {WEAK!r} / {STRONG!r}, not {hold!r}")
        if max_entries is not None and int(max_entries) < 1:
            raise ValueError(f"max_entries must be at least 1 (or None), not {max_entries!r}")
        self.hold = tuple(hold)
        self._weak = tuple(h == WEAK for h in self.hold)
        self.max_entries = None if max_entries is None else int(max_entries)
        # (id of each key object, ..., key) -> (holders: weakref or the object itself, value);
        # ordered from the least to the most recently used
        self._entries: collections.OrderedDict = collections.OrderedDict()
        # entries whose weakly held object died (appended by weakref callbacks, which may run in
        # any thread, even inside this cache's own methods: they only append)
        self._dead: collections.deque = collections.deque()
        self._lock = threading.Lock()

    def get(self, objects: Sequence[Any], key: Hashable = None, default: Any = None) -> Any:
        """The value kept for these very ``objects`` and ``key``, or ``default``."""
        entry_key = self._entry_key(objects, key)
        with self._lock:
            if self._dead:
                self._drop_dead()
            entry = self._entries.get(entry_key)
            if entry is None:
                return default
            for holder, obj, weak in zip(entry[0], objects, self._weak, strict=True):
                if (holder() if weak else holder) is not obj:
                    return default
            self._entries.move_to_end(entry_key)
            return entry[1]

    def put(self, objects: Sequence[Any], value: Any, key: Hashable = None) -> bool:
        """Keep ``value`` for ``objects`` and ``key`` (replacing what was kept); False when an
        object to be held weakly cannot be: nothing is kept then."""
        entry_key = self._entry_key(objects, key)
        dead = self._dead
        holders = []
        for obj, weak in zip(objects, self._weak, strict=True):
            if not weak:
                holders.append(obj)
                continue
            try:
                holders.append(weakref.ref(obj, _report_death(dead, entry_key)))
            except TypeError:
                return False
        with self._lock:
            self._drop_dead()
            self._entries[entry_key] = (tuple(holders), value)
            self._entries.move_to_end(entry_key)
            if self.max_entries is not None:
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return True

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._dead.clear()

    def __len__(self) -> int:
        """Entries kept (a dead object's entry is no longer counted)."""
        with self._lock:
            self._drop_dead()
            return len(self._entries)

    def values(self) -> list:
        """The values kept, from the least to the most recently used."""
        with self._lock:
            self._drop_dead()
            return [v for _, v in self._entries.values()]

    def _entry_key(self, objects: Sequence[Any], key: Hashable) -> tuple:
        if len(objects) != len(self._weak):
            raise ValueError(f"this cache is keyed by {len(self._weak)} objects, got {len(objects)}")
        return (*map(id, objects), key)

    def _drop_dead(self) -> None:
        """Drop the entries whose weakly held objects died (with the lock held).  An entry made
        since for a new object that got the same id is kept."""
        while self._dead:
            entry_key = self._dead.popleft()
            entry = self._entries.get(entry_key)
            if entry is not None and any(w and h() is None for h, w in zip(entry[0], self._weak, strict=True)):
                del self._entries[entry_key]


def _report_death(dead: collections.deque, entry_key: tuple) -> Callable[[weakref.ref], None]:
    """A weakref callback that reports the entry as dead (it holds the queue, not the cache)."""

    def died(_ref: weakref.ref) -> None:
        dead.append(entry_key)

    return died
