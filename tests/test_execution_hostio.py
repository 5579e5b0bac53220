"""Chunk I/O on the host (``execution/hostio.py``) and the reader's announcements: each chunk's
views are announced to its store (``prefetch_views``) before they are read, one chunk ahead."""

from __future__ import annotations

import numpy as np
from helpers import plan_of

from stirgpu.execution.hostio import announce_chunk
from stirgpu.formats import ProjDataInMemory
from stirgpu.formats.testing import small_tof_proj_data_info
from stirgpu.kernels.joseph.lors import stir_default_image_info
from stirgpu.projectors import ProjectorPair


class RecordingStore(ProjDataInMemory):
    """An in-memory store that records its prefetch_views and read_views calls, in order."""

    def __init__(self, pdi):
        super().__init__(pdi)
        self.calls = []

    def prefetch_views(self, segment, views, timing_pos=0):
        self.calls.append(("prefetch", segment, tuple(int(v) for v in views), timing_pos))
        super().prefetch_views(segment, views, timing_pos=timing_pos)

    def read_views(self, segment, views, out=None, timing_pos=0):
        self.calls.append(("read", segment, tuple(int(v) for v in views), timing_pos))
        return super().read_views(segment, views, out=out, timing_pos=timing_pos)


def _announced(chunk):
    return {(p.segment, tuple(p.views), t) for p in chunk.parts for t in p.timing_poss}


def test_announce_chunk_names_every_view_of_every_part_and_timing_position():
    pdi = small_tof_proj_data_info()
    store = RecordingStore(pdi)
    for chunk in plan_of(pdi, pdi.subset_views(1, 3), host_budget=1 << 20, max_views_per_chunk=2).chunks:
        store.calls.clear()
        announce_chunk(store, chunk)
        assert {c[0] for c in store.calls} == {"prefetch"}
        assert {c[1:] for c in store.calls} == _announced(chunk)
    announce_chunk(object(), chunk)  # a store without the hint: nothing to do


def test_the_reader_announces_each_chunk_before_the_reads_of_the_one_before():
    """A back projection on one CPU lane through staging buffers: chunk i + 1 is announced
    before chunk i's first read, every chunk before its own reads; the image is the one a
    store without the hint gives (announcing changes no number)."""
    pdi = small_tof_proj_data_info()
    info = stir_default_image_info(pdi)
    store = RecordingStore(pdi)
    store.fill(np.random.default_rng(2).uniform(0, 1, store.shape).astype(np.float32))
    plain = ProjDataInMemory(pdi)
    plain.fill(store)
    pair = ProjectorPair(backend="cpu", devices=[0], restrict_to_cylindrical_fov=False, max_views_per_chunk=2)
    pair.set_up(pdi, info)
    want = np.asarray(pair.back_project(None, plain))
    store.calls.clear()
    got = np.asarray(pair.back_project(None, store))
    np.testing.assert_array_equal(got, want)
    chunks = pair.last_plan.chunks
    assert len(chunks) > 2 and len(pair.last_stats.lanes) == 1
    first_read = {}
    announced_at = {}
    for i, (kind, segment, views, t) in enumerate(store.calls):
        for c in chunks:
            if any(p.segment == segment and t in p.timing_poss and set(views) <= set(p.views) for p in c.parts):
                (first_read if kind == "read" else announced_at).setdefault(c.index, i)
    assert set(first_read) == set(announced_at) == {c.index for c in chunks}
    for c in chunks:
        assert announced_at[c.index] < first_read[c.index]
        if c.index + 1 < len(chunks):
            assert announced_at[c.index + 1] < first_read[c.index]
