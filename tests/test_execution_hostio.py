"""Chunk I/O on the host (``execution/hostio.py``): a chunk's reads announced to the store first."""

from __future__ import annotations

import numpy as np
from helpers import plan_of

from stirgpu.execution.hostio import DaemonPool, read_chunk
from stirgpu.formats import ProjDataInMemory
from stirgpu.formats.testing import small_tof_proj_data_info


class RecordingStore:
    """A store that records the order of its prefetch_views and read_views calls."""

    def __init__(self, store):
        self.store, self.calls = store, []

    def prefetch_views(self, segment, views, timing_pos=0):
        self.calls.append(("prefetch", segment, tuple(views), timing_pos))
        self.store.prefetch_views(segment, views, timing_pos=timing_pos)

    def read_views(self, segment, views, out=None, timing_pos=0):
        self.calls.append(("read", segment, tuple(views), timing_pos))
        return self.store.read_views(segment, views, out=out, timing_pos=timing_pos)


def test_a_chunk_is_announced_whole_before_its_reads():
    """read_chunk tells the store every (segment, views, timing position) of the chunk before
    reading any of them, split over the pool; the buffer gets the same values as without."""
    pdi = small_tof_proj_data_info()
    data = ProjDataInMemory(pdi)
    data.fill(np.random.default_rng(1).uniform(0, 1, data.shape).astype(np.float32))
    store = RecordingStore(data)
    pool = DaemonPool(2, "test-io")
    try:
        for chunk in plan_of(pdi, pdi.subset_views(1, 3), host_budget=1 << 20, max_views_per_chunk=2).chunks:
            store.calls.clear()
            flat = np.full(chunk.num_bins, np.nan, np.float32)
            read_chunk(store, chunk, flat, pool, 3)
            kinds = [c[0] for c in store.calls]
            first_read = kinds.index("read")
            assert set(kinds[:first_read]) == {"prefetch"} and "prefetch" not in kinds[first_read:]
            expected = {(p.segment, tuple(p.views), t) for p in chunk.parts for t in p.timing_poss}
            assert {c[1:] for c in store.calls[:first_read]} == expected
            plain = np.full(chunk.num_bins, np.nan, np.float32)
            read_chunk(data, chunk, plain, None, 1)
            np.testing.assert_array_equal(flat, plain)
    finally:
        pool.shutdown()
