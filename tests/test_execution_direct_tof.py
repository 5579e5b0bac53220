"""Direct transfers of TOF data: an in-memory TOF store's parts go between its page-locked memory
and a GPU by one DMA per part and timing position, into the kernels' part layout
``[timing position][view][axial][tangential]``.

On the CPU: which stores :class:`DirectIO` takes (every segment and timing position, under the
same page-locking policy as non-TOF stores; a store handing out one array for several timing
positions is staged), where each copy goes (:func:`direct_copies`: the chunk's buffer tiled in
order), and the copies the engine queues (:func:`copy_direct`, on a lane whose DMA is a host
copy) putting every bin where the staged path's read and write put it.  On a GPU: projections
through the direct path equal the staged path's (forward bit for bit, back to float32 summation
order: atomics) and the CPU's to float32 rounding, full and subset.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from helpers import Pinning, plan_of

from stirgpu.execution.call import copy_direct
from stirgpu.execution.direct_io import DirectIO, direct_copies
from stirgpu.execution.hostio import read_chunk, write_chunk
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info
from stirgpu.projectors import ProjectorPair

DMI = "GE Discovery MI 4 rings"


def _tof_pdi(mash=29, views=8, tang=21):
    return ProjDataInfo.construct(Scanner.from_name(DMI), 1, 1, views, tang, tof_mash_factor=mash)


def _random_store(pdi, seed=3):
    store = ProjDataInMemory(pdi)
    store.fill(np.random.default_rng(seed).uniform(0, 1, store.shape).astype(np.float32))
    return store


def _timing_poss(pdi):
    return range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)


class HostLane:
    """A lane whose DMA is a host copy (``copy_views``' contract: the views of a C-contiguous
    (views, axial, tangential) array and consecutive viewgrams at an address)."""

    def __init__(self):
        self.copies = 0

    def copy_views(self, to_device, dev_ptr, host, views, stream):
        vb = host.strides[0]
        for i, v in enumerate(views):
            h = host.ctypes.data + int(v) * vb
            dst, src = (dev_ptr + i * vb, h) if to_device else (h, dev_ptr + i * vb)
            ctypes.memmove(dst, src, vb)
        self.copies += 1


def _plan(pdi, views, max_views):
    return plan_of(pdi, views, host_budget=1 << 26, max_views_per_chunk=max_views)


# --------------------------------------------------------------------------------------
# CPU: what is direct, and where each copy goes
# --------------------------------------------------------------------------------------
def test_tof_store_is_direct_at_every_segment_and_timing_position():
    """Every (segment, timing position) is the store's own memory for it, page-locked, apart
    from the others."""
    pdi = _tof_pdi()
    store = _random_store(pdi)
    pins = Pinning()
    found = DirectIO("cuda", "always", pins).find({"data": store}, pdi, tuple(pdi.segment_nums))
    arrays = found["data"]
    assert set(arrays) == {(s, t) for s in pdi.segment_nums for t in _timing_poss(pdi)}
    assert len(arrays) == pdi.get_num_segments() * 13
    for (s, t), a in arrays.items():
        assert a.ctypes.data == store.host_array(s, timing_pos=t).ctypes.data
        np.testing.assert_array_equal(a, store.read_views(s, range(pdi.get_num_views()), timing_pos=t))
    assert len({a.ctypes.data for a in arrays.values()}) == len(arrays)
    assert len(pins.asked) == len(arrays)


def test_tof_stores_follow_the_pinning_policy():
    """ "reused": staged at the first use, direct from the second; "never" and the CPU backend:
    never direct; page-locking refused: staged."""
    pdi = _tof_pdi()
    store = _random_store(pdi)
    segs = tuple(pdi.segment_nums)
    reused = DirectIO("cuda", "reused", Pinning())
    assert reused.find({"data": store}, pdi, segs) == {}
    assert set(reused.find({"data": store}, pdi, segs)) == {"data"}
    assert DirectIO("cuda", "never", Pinning()).find({"data": store}, pdi, segs) == {}
    assert DirectIO("cpu", "always", Pinning()).find({"data": store}, pdi, segs) == {}
    assert DirectIO("cuda", "always", Pinning(refuse=True)).find({"data": store}, pdi, segs) == {}


class _OnePosition(ProjDataInMemory):
    """A store that hands out timing position 0's memory for every timing position."""

    def host_array(self, segment, timing_pos=0):
        return super().host_array(segment, 0)


class _Missing(ProjDataInMemory):
    """A store without host memory at its last timing position."""

    def host_array(self, segment, timing_pos=0):
        return None if timing_pos == self.get_max_tof_pos_num() else super().host_array(segment, timing_pos)


@pytest.mark.parametrize("cls", [_OnePosition, _Missing])
def test_stores_without_memory_for_every_timing_position_are_staged(cls):
    """Copying such a store directly would read or write one timing position for all of them
    (the bug of copying timing position 0 alone): it stays staged."""
    pdi = _tof_pdi()
    pins = Pinning()
    assert DirectIO("cuda", "always", pins).find({"data": cls(pdi)}, pdi, tuple(pdi.segment_nums)) == {}
    assert pins.asked == []


@pytest.mark.parametrize("subset", [None, (1, 3)])
@pytest.mark.parametrize("max_views", [1, 3, None])
def test_direct_copies_tile_the_chunk_buffer(subset, max_views):
    """One copy per part and timing position, in buffer order, each its part's slab for that
    timing position: together they cover every bin of the chunk once."""
    pdi = _tof_pdi()
    views = pdi.subset_views(*subset) if subset else range(pdi.get_num_views())
    for chunk in _plan(pdi, views, max_views).chunks:
        copies = list(direct_copies(chunk))
        assert len(copies) == len(chunk.parts) * 13
        at = 0
        for c in copies:
            part = next(p for p in chunk.parts if p.segment == c.segment)
            nv, na, nt = part.shape
            assert c.offset == at and c.views == part.views
            assert c.offset == part.offset + (c.timing_pos - pdi.get_min_tof_pos_num()) * nv * na * nt
            at += nv * na * nt
        assert at == chunk.num_bins


def test_direct_copies_of_non_tof_data_are_one_per_part():
    pdi = ProjDataInfo.construct(Scanner.from_name(DMI), 1, 1, 8, 21)
    for chunk in _plan(pdi, range(8), 3).chunks:
        assert [(c.segment, c.timing_pos, c.views, c.offset) for c in direct_copies(chunk)] == [
            (p.segment, 0, p.views, p.offset) for p in chunk.parts
        ]


@pytest.mark.parametrize("mash", [29, 13])
@pytest.mark.parametrize("subset", [None, (2, 3)])
def test_queued_copies_put_bins_where_the_staged_path_does(mash, subset):
    """The engine's direct copies (copy_direct, on a lane whose DMA is a host copy) fill a
    chunk's buffer as the staged read does, and write a buffer into the store as the staged
    write does, bit for bit: every timing position in the kernels' layout."""
    pdi = _tof_pdi(mash)
    data = _random_store(pdi)
    views = pdi.subset_views(*subset) if subset else range(pdi.get_num_views())
    direct = DirectIO("cuda", "always", Pinning())
    out_direct, out_staged = ProjDataInMemory(pdi), ProjDataInMemory(pdi)
    found = direct.find({"data": data, "out": out_direct}, pdi, tuple(pdi.segment_nums))
    lane = HostLane()
    rng = np.random.default_rng(9)
    for chunk in _plan(pdi, views, 2).chunks:
        staged, dev = np.full(chunk.num_bins, np.nan, np.float32), np.full(chunk.num_bins, np.nan, np.float32)
        read_chunk(data, chunk, staged, None, 1)
        copy_direct(lane, True, dev.ctypes.data, found["data"], chunk, None)
        np.testing.assert_array_equal(dev, staged)
        result = rng.uniform(0, 1, chunk.num_bins).astype(np.float32)
        write_chunk(out_staged, chunk, result, None, 1)
        copy_direct(lane, False, result.ctypes.data, found["out"], chunk, None)
    for s in pdi.segment_nums:
        for t in _timing_poss(pdi):
            np.testing.assert_array_equal(out_direct.host_array(s, t), out_staged.host_array(s, t))
    assert lane.copies == sum(len(c.parts) for c in _plan(pdi, views, 2).chunks) * 2 * pdi.get_num_tof_poss()


# --------------------------------------------------------------------------------------
# GPU: the direct path's projections
# --------------------------------------------------------------------------------------
def _gpu_pair(pdi, info, pin):
    from stirgpu import config

    with config(pin_host_memory="always" if pin else "never"):
        pair = ProjectorPair(backend="cuda", devices=[0], restrict_to_cylindrical_fov=False, max_views_per_chunk=3)
    pair.set_up(pdi, info)
    return pair


def _projections(pair, pdi, img, data, subset):
    """(forward projection, back projection, (the stores each went direct with, the stages of
    each: no read or write stage where every store is direct))."""
    kw = {} if subset is None else dict(subset_num=subset[0], num_subsets=subset[1])
    out = ProjDataInMemory(pdi, fill=-1.0)
    pair.forward_project(out, img, **kw)
    fstats = pair.last_stats
    back = np.asarray(pair.back_project(None, data, **kw))
    stats = (fstats, pair.last_stats)
    return out, back, tuple((st.direct, {e.stage for e in st.events} & {"read", "write"}) for st in stats)


@pytest.mark.gpu
@pytest.mark.parametrize("subset", [None, (1, 4)])
def test_tof_direct_equals_staged_and_the_cpu(subset):
    """A TOF in-memory store through the direct path: forward projections equal the staged
    path's bit for bit, back projections to float32 summation order (the kernels add with
    atomics); both agree with the CPU to float32 rounding (CUDA's erff: 1e-6 forward, 1e-5
    back, as tests/test_kernels_gpu_tof.py); a subset leaves the other views alone."""
    pdi = _tof_pdi(views=12, tang=31)
    info = stir_default_image_info(pdi)
    img = np.random.default_rng(0).uniform(0, 1, info.shape).astype(np.float32)
    data = _random_store(pdi)
    got = {}
    for pin in (False, True):
        out, back, direct = _projections(_gpu_pair(pdi, info, pin), pdi, img, data, subset)
        assert direct == (((("out",), set()), (("data",), set())) if pin else (((), {"write"}), ((), {"read"})))
        got[pin] = out, back
    cpu = ProjectorPair(backend="cpu", restrict_to_cylindrical_fov=False, max_views_per_chunk=3)
    cpu.set_up(pdi, info)
    want_out, want_back, _ = _projections(cpu, pdi, img, data, subset)
    (staged, sback), (direct, dback) = got[False], got[True]
    scale = float(np.abs(want_back).max())
    np.testing.assert_allclose(dback, sback, rtol=0, atol=2e-6 * scale)
    assert float(np.abs(dback - want_back).max()) <= 1e-5 * scale
    fscale = max(float(np.abs(want_out.host_array(s, t)).max()) for s in pdi.segment_nums for t in _timing_poss(pdi))
    for s in pdi.segment_nums:
        for t in _timing_poss(pdi):
            np.testing.assert_array_equal(direct.host_array(s, t), staged.host_array(s, t))
            assert float(np.abs(direct.host_array(s, t) - want_out.host_array(s, t)).max()) <= 1e-6 * fscale
    if subset is not None:
        others = np.setdiff1d(np.arange(pdi.get_num_views()), pdi.subset_views(*subset))
        assert np.all(direct.host_array(0, pdi.get_max_tof_pos_num())[others] == -1.0)
