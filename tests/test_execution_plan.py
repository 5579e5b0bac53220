"""Chunk plans: coverage, contiguity, budgets, the PlanError, views per segment, sizes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import plan_of, small_geometry

from stirgpu.errors import PlanError
from stirgpu.execution import format_bytes, parse_bytes
from stirgpu.execution.plan import MAX_CHUNK_BYTES, host_available_bytes


def _plan(views=None, **kw):
    pdi, _ = small_geometry()
    return pdi, plan_of(pdi, views, **kw)


def test_chunks_cover_the_views_once_in_file_order():
    """Every (segment, view) of the request is in exactly one chunk, and the chunks walk the
    viewgrams in file order (segments ascending, then the sorted view list); a chunk's parts
    are one per segment, each a run of consecutive entries of the sorted view list, laid out
    one after the other in the chunk's buffers; no chunk exceeds the view limit."""
    views = [5, 1, 9, 13, 17, 21]  # subset 1 of 4, unsorted on purpose
    pdi, plan = _plan(views=views, max_views_per_chunk=4)
    seen = [vg for c in plan.chunks for vg in c.viewgrams()]
    assert seen == [(s, v) for s in sorted(pdi.segment_nums) for v in sorted(views)]
    for c in plan.chunks:
        assert c.num_viewgrams <= 4
        assert len({p.segment for p in c.parts}) == len(c.parts)
        offset = 0
        for p in c.parts:
            pos = [sorted(views).index(v) for v in p.views]
            assert pos == list(range(pos[0], pos[0] + len(pos)))
            assert p.shape == (len(p.views), pdi.get_num_axial_poss(p.segment), 32)
            assert p.offset == offset
            offset = p.stop
        assert c.num_bins == offset and c.nbytes == 4 * offset
    assert [c.index for c in plan.chunks] == list(range(len(plan.chunks)))
    assert any(len(c.parts) > 1 for c in plan.chunks)  # 6 views per segment, 4 per chunk


def test_small_requests_pack_several_segments_per_chunk():
    """A subset of a many-segment scanner gets a few multi-part chunks, not one small chunk per
    segment (mMR span 11, subset 1/21: 12 views x 11 segments, 13.8 MB, 4 MiB minimum chunk);
    full data keep about one part per chunk."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    mmr = ProjDataInfo.construct(Scanner.from_name("Siemens mMR"), span=11, max_ring_diff=60)
    sub = plan_of(mmr, mmr.subset_views(0, 21), host_budget=1 << 34)
    assert len(sub.chunks) <= 4 < mmr.get_num_segments()
    assert sum(c.num_viewgrams for c in sub.chunks) == 12 * mmr.get_num_segments()
    assert max(c.nbytes for c in sub.chunks) <= max(
        4 << 20, max(4 * mmr.get_num_axial_poss(s) * 344 for s in mmr.segment_nums)
    )
    full = plan_of(mmr, host_budget=1 << 34)
    assert sum(len(c.parts) for c in full.chunks) <= len(full.chunks) + mmr.get_num_segments()


def test_large_calls_ramp_up_and_taper():
    """With big chunks, each lane's first chunks are smaller (the device starts sooner) and the
    last ones shrink (a short drain), never below 4 MiB (except the remainder); a subset, whose
    chunks are at the minimum already, is not shaped; an explicit target turns shaping off."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    mmr = ProjDataInfo.construct(Scanner.from_name("Siemens mMR"), span=11, max_ring_diff=60)
    args = dict(host_budget=1 << 34, ramp_up=True, taper=True)
    sizes = [c.nbytes for c in plan_of(mmr, range(252), **args).chunks]
    big = max(sizes)
    viewgram = 4 * 127 * 344  # chunks hold whole viewgrams
    assert sizes[0] < sizes[1] < sizes[2] < big and sizes[0] > (4 << 20) - viewgram
    assert sizes[-2] < big / 2 and sizes[-1] < sizes[-3] and min(sizes[:-1]) > (4 << 20) - viewgram
    plain = [c.nbytes for c in plan_of(mmr, range(252), **{**args, "ramp_up": False, "taper": False}).chunks]
    assert plain[0] > 0.99 * max(plain) and len(plain) < len(sizes)
    sub = plan_of(mmr, mmr.subset_views(0, 21), **args)
    assert len(sub.chunks) == 4
    fixed = plan_of(mmr, range(252), target_chunk_bytes=8 << 20, **args)
    assert all(c.nbytes <= 8 << 20 for c in fixed.chunks) and fixed.chunks[0].nbytes > (8 << 20) * 0.9


def test_buffers_fit_the_budgets():
    """Host staging (lanes x slots x buffers x buffer size + fixed images) stays within the host
    budget, GPU use within the GPU budget; the largest chunk fills at most one buffer."""
    pdi, plan = _plan(
        lanes=2,
        host_buffers_per_slot=3,
        device_buffers_per_slot=5,
        host_budget=300_000,
        gpu_budget=200_000,
        host_fixed_bytes=50_000,
        device_fixed_bytes=40_000,
        depth=2,
    )
    assert plan.host_bytes <= 300_000 and plan.device_bytes_per_lane <= 200_000
    assert max(c.nbytes for c in plan.chunks) == plan.buffer_bytes
    assert len(plan.chunks) > pdi.get_num_segments()


def test_plan_error_names_the_numbers():
    """A budget that cannot hold one viewgram of the largest segment is a PlanError giving the
    viewgram size and what the budget leaves."""
    pdi, _ = small_geometry()
    one_view = 4 * pdi.get_num_axial_poss(0) * 32
    with pytest.raises(PlanError, match=f"{one_view} bytes") as info:
        _plan(host_budget=one_view, host_buffers_per_slot=2)
    assert "host" in str(info.value) and "viewgram" in str(info.value)
    with pytest.raises(PlanError, match="GPU"):
        _plan(gpu_budget=10_000, device_buffers_per_slot=2, device_fixed_bytes=9_000)
    with pytest.raises(PlanError, match="images alone"):
        _plan(host_buffers_per_slot=0, host_budget=100, host_fixed_bytes=1000)


def test_tof_chunks_hold_as_many_lors_as_non_tof_ones():
    """The smallest chunk worth making is counted in LORs (a chunk is one launch of one thread
    per LOR): 4 MiB per timing position.  A TOF subset (GE Discovery MI, 13 TOF bins, maximum
    ring difference 11, subset 1/21: 13 views x 23 segments, 195 MB) gets a few chunks of many
    parts, not one or two segments' worth each; full TOF data keep chunks of 52 to 64 MiB but
    the last (the taper stops at the smallest chunk)."""
    from stirgpu.execution.plan import MIN_CHUNK_BYTES
    from stirgpu.geometry import ProjDataInfo, Scanner

    dmi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 11, 272, 415, tof_mash_factor=29)
    sub = plan_of(dmi, dmi.subset_views(0, 21), host_budget=1 << 34)
    total = sum(c.nbytes for c in sub.chunks)
    assert len(sub.chunks) <= -(-total // (13 * MIN_CHUNK_BYTES)) + 1 < 8
    assert min(len(c.parts) for c in sub.chunks[:-1]) >= 3
    assert all(c.nbytes <= MAX_CHUNK_BYTES for c in sub.chunks)
    full = plan_of(dmi, range(272), host_budget=1 << 34)
    assert max(c.nbytes for c in full.chunks) <= MAX_CHUNK_BYTES
    one_view = 4 * 13 * 36 * 415  # of the largest segment
    assert min(c.nbytes for c in full.chunks[:-1]) >= 13 * MIN_CHUNK_BYTES - one_view


def test_target_chunk_size_gives_several_chunks_per_lane_but_not_tiny_ones():
    """Without a view limit, big data are split so each lane gets several chunks (none above
    64 MiB); small data are not split below the minimum chunk size."""
    from stirgpu.geometry import ProjDataInfo, Scanner

    big = ProjDataInfo.construct(Scanner.from_name("Siemens mMR"), span=11, max_ring_diff=60)
    plan = plan_of(big, lanes=2, host_budget=1 << 34)
    assert len(plan.chunks) >= 2 * 4 and plan.buffer_bytes <= MAX_CHUNK_BYTES
    _, small = _plan()
    assert len(small.chunks) == 1 and len(small.chunks[0].parts) == 5  # 300 KiB of data: one chunk


def test_plan_table_is_readable():
    """str(plan) has one row per segment under plain headings (axial positions, the call's views,
    the chunks holding them, the most views in one chunk) and then the chunk and memory totals
    in words; counts of one are singular; repr(plan) is one short line, not every view."""
    pdi, plan = _plan(max_views_per_chunk=5)
    text = str(plan)
    lines = text.splitlines()
    assert (
        lines[0].split("  ")[0] == "segment" and "axial positions" in lines[0] and "views per chunk (max)" in lines[0]
    )
    assert len(lines) == 2 + len(pdi.segment_nums) + 2
    for seg, row in zip(sorted(pdi.segment_nums), lines[2:-2], strict=True):
        parts = [p for c in plan.chunks for p in c.parts if p.segment == seg]
        assert [int(v) for v in row.split()] == [
            seg,
            pdi.get_num_axial_poss(seg),
            24,
            len(parts),
            max(len(p.views) for p in parts),
        ]
    assert lines[-2].startswith(f"{len(plan.chunks)} chunks of at most ")
    assert lines[-1].startswith("host memory ") and "1 CPU worker x 2 slots x 1 buffer of" in lines[-1]
    assert "(s)" not in text
    _, one = _plan()
    assert len(one.chunks) == 1 and str(one).splitlines()[-2].startswith("1 chunk of at most ")
    r = repr(plan)
    assert r.startswith("<Plan: ") and f"{len(plan.chunks)} chunks" in r and len(r) < 200


def test_plural():
    from stirgpu.execution.plan import plural

    assert (plural(1, "chunk"), plural(2, "chunk"), plural(0, "chunk")) == ("1 chunk", "2 chunks", "0 chunks")
    assert plural(3, "sensitivity image") == "3 sensitivity images" and plural(2, "axis", "axes") == "2 axes"


def test_empty_request_gives_empty_plan():
    _, plan = _plan(views=[])
    assert plan.chunks == () and plan.num_bins == 0


def test_a_plan_of_views_per_segment_plans_only_those():
    """Views per segment (a rank's share under MPI, stirgpu.distributed.share_viewgrams): each
    segment's own views, once; a segment with none gets no part."""
    pdi, _ = small_geometry()
    segs = list(pdi.segment_nums)
    share = {segs[0]: [5, 6], segs[-1]: [0, 1, 2]}
    _, plan = _plan(views=share, lanes=2)
    got = sorted((p.segment, v) for c in plan.chunks for p in c.parts for v in p.views)
    assert got == sorted((s, v) for s, vs in share.items() for v in vs)


@pytest.mark.parametrize(
    "text, value",
    [
        ("512M", 512 << 20),
        ("2G", 2 << 30),
        ("1.5GiB", 3 << 29),
        ("1048576", 1 << 20),
        ("64 kb", 64 << 10),
        (4096, 4096),
    ],
)
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "abc", "-5M", "0", "5Q"])
def test_parse_bytes_refuses_nonsense(text):
    with pytest.raises(PlanError):
        parse_bytes(text)


def test_memory_helpers():
    """MemAvailable is read (positive); sizes print in binary units."""
    assert host_available_bytes() > 0
    assert format_bytes(3 << 20) == "3.0 MiB" and format_bytes(10) == "10 B"
    assert np.isfinite(host_available_bytes())
