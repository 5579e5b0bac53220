"""The engine's one cache of answers kept per object (stirgpu.execution.identity).

A hit needs the very key objects (an equal one is another key); weakly held objects take
their entries with them when they die, and an id reused meanwhile never finds the dead
object's entry; strongly held objects live as long as their entry; beyond the bound the least
recently used entry goes.  Also: the engine's stores are only ever held weakly.
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

from stirgpu.execution import identity
from stirgpu.execution.direct_io import DirectIO
from stirgpu.execution.identity import STRONG, WEAK, IdentityCache


class Key:
    """Weakly referenceable; equal to every other Key (equality must not matter)."""

    def __eq__(self, other):
        return isinstance(other, Key)

    __hash__ = object.__hash__


class Value:
    pass


def test_a_hit_needs_the_very_objects():
    cache = IdentityCache((STRONG,))
    a, b = Key(), Key()
    assert a == b
    cache.put((a,), "for a", key=("seg", 1))
    assert cache.get((a,), ("seg", 1)) == "for a"
    assert cache.get((b,), ("seg", 1)) is None
    assert cache.get((a,), ("seg", 2), default="none") == "none"
    cache.put((a,), False)  # a false value is a value, not a miss
    assert cache.get((a,)) is False


def test_weakly_held_objects_take_their_entries_with_them():
    cache = IdentityCache((WEAK,))
    a, v = Key(), Value()
    value_alive = weakref.ref(v)
    assert cache.put((a,), v)
    del v
    assert len(cache) == 1 and cache.get((a,)) is value_alive()
    del a
    gc.collect()
    assert len(cache) == 0
    assert value_alive() is None  # the value went with the entry


def test_an_id_reused_after_death_does_not_find_the_old_entry(monkeypatch):
    """Two objects given the same id (as a new object may get a dead one's): the dead one's
    entry is not the new one's, and dropping it later does not drop the new one's entry."""
    monkeypatch.setattr(identity, "id", lambda obj: 42, raising=False)
    cache = IdentityCache((WEAK,))
    old, new = Key(), Key()
    cache.put((old,), "old")
    assert cache.get((new,)) is None  # same id, another object
    cache.put((new,), "new")  # replaces the entry under that id
    del old
    gc.collect()
    assert cache.get((new,)) == "new" and len(cache) == 1


def test_strongly_held_objects_live_as_long_as_their_entry():
    cache = IdentityCache((STRONG,), max_entries=4)
    a = Key()
    alive = weakref.ref(a)
    cache.put((a,), 1)
    del a
    gc.collect()
    assert alive() is not None  # its id cannot be reused while the entry lives
    assert cache.get((alive(),)) == 1
    cache.clear()
    gc.collect()
    assert alive() is None


def test_least_recently_used_goes_first():
    cache = IdentityCache((STRONG,), max_entries=2)
    a, b, c = Key(), Key(), Key()
    cache.put((a,), "a")
    cache.put((b,), "b")
    assert cache.get((a,)) == "a"  # a is now the most recently used
    cache.put((c,), "c")
    assert cache.get((b,)) is None and cache.get((a,)) == "a" and cache.get((c,)) == "c"
    assert len(cache) == 2 and cache.values() == ["a", "c"]


def test_objects_that_cannot_be_weakly_held_are_not_cached():
    cache = IdentityCache((WEAK,))
    plain = object()
    with pytest.raises(TypeError):
        weakref.ref(plain)
    assert cache.put((plain,), 1) is False
    assert cache.get((plain,)) is None and len(cache) == 0


def test_mixed_holding():
    """(store, geometry): the store weakly, the geometry strongly; the entry goes with the store."""
    cache = IdentityCache((WEAK, STRONG))
    store, geometry = Key(), object()
    cache.put((store, geometry), "arrays", key=(0, 1))
    assert cache.get((store, geometry), (0, 1)) == "arrays"
    assert cache.get((store, object()), (0, 1)) is None
    del store
    gc.collect()
    assert len(cache) == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="hold"):
        IdentityCache(("sometimes",))
    with pytest.raises(ValueError, match="max_entries"):
        IdentityCache((WEAK,), max_entries=0)
    with pytest.raises(ValueError, match="2 objects"):
        IdentityCache((WEAK, STRONG)).get((Key(),))


def test_threads_share_one_cache():
    cache = IdentityCache((WEAK,), max_entries=64)
    keys = [Key() for _ in range(200)]
    failures = []

    def work(offset):
        try:
            for i in range(2000):
                k = keys[(i + offset) % len(keys)]
                if cache.get((k,)) not in (None, id(k)):
                    failures.append(k)
                cache.put((k,), id(k))
        except Exception as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n * 7,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and len(cache) <= 64


def test_direct_io_never_keeps_a_store_alive(tmp_path):
    """The engine remembers the stores it met (to page-lock them at their second use) weakly:
    a store the caller dropped is freed, and the engine forgets it.  (A disk store: it keeps
    no bins in host memory, so nothing is page-locked and no GPU is needed.)"""
    from helpers import small_geometry

    from stirgpu.formats import ProjDataOnDisk

    pdi, _ = small_geometry()
    direct = DirectIO("cuda", "reused")
    store = ProjDataOnDisk.create(tmp_path / "s.hs", pdi)
    alive = weakref.ref(store)
    assert direct.find({"data": store}, pdi, (0,)) == {}
    assert direct.find({"data": store}, pdi, (0,)) == {}  # met before: would be page-locked now
    assert len(direct._met) == 1
    store.abort()
    del store
    gc.collect()
    assert alive() is None and len(direct._met) == 0


def test_tof_stores_are_copied_directly_at_every_timing_position():
    """A TOF part is one slab per timing position, apart in an in-memory store's memory (TOF
    outermost): GPUs copy TOF stores directly with one array per segment and timing position,
    never timing position 0's for all of them.  (Page-locking that needs no GPU: the decision
    alone; tests/test_execution_direct_tof.py checks the copies.)"""
    from stirgpu.formats import ProjDataInMemory
    from stirgpu.geometry import ProjDataInfo, Scanner

    class Pinning:
        def pin(self, a):
            return True

    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 4, 21, tof_mash_factor=29)
    store = ProjDataInMemory(pdi)
    direct = DirectIO("cuda", "always", Pinning())
    arrays = direct.find({"data": store}, pdi, tuple(pdi.segment_nums))["data"]
    timing = range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)
    assert set(arrays) == {(s, t) for s in pdi.segment_nums for t in timing} and len(timing) == 13
    for (s, t), a in arrays.items():
        a[...] = 100 * s + t
    for s in pdi.segment_nums:
        for t in timing:
            assert np.all(store.read_views(s, range(4), timing_pos=t) == 100 * s + t)
