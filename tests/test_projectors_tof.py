"""TOF projection data through the streaming projectors on the CPU: chunks carry all timing
positions of their views, any chunk plan gives the same numbers, STIR's subsets of views with all
TOF bins, memory per chunk bounded by the plan, the adjoint, and line integrals in mm
(``units="mm"``).  Agreement with STIR: ``stir_differential/test_tof_projection_vs_stir.py``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import plan_of

from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info, stir_image_frame
from stirgpu.kernels.tof.api import back_chunk_tof, forward_chunk_tof
from stirgpu.projectors import ProjectorPair


@pytest.fixture(scope="module")
def case():
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 8, 31, tof_mash_factor=29)
    info = stir_default_image_info(pdi)
    img = np.random.default_rng(0).uniform(0, 1, info.shape).astype(np.float32)
    return pdi, info, img


def _pair(pdi, info, **kw):
    pair = ProjectorPair(backend="cpu", restrict_to_cylindrical_fov=False, **kw)
    pair.set_up(pdi, info)
    return pair


def _reference_forward(pdi, info, img):
    frame = stir_image_frame(info)
    return {s: forward_chunk_tof(pdi.chunk_tables(s), pdi, img, frame) for s in pdi.segment_nums}


@pytest.mark.parametrize("views_per_chunk", [1, 3, None])
def test_forward_equals_the_kernels_for_any_chunk_plan(case, views_per_chunk):
    pdi, info, img = case
    pair = _pair(pdi, info, max_views_per_chunk=views_per_chunk)
    out = ProjDataInMemory(pdi)
    pair.forward_project(out, img)
    ref = _reference_forward(pdi, info, img)
    for s in pdi.segment_nums:
        for j, t in enumerate(range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)):
            assert np.array_equal(out.read_views(s, range(pdi.get_num_views()), timing_pos=t), ref[s][j]), (s, t)
    assert out.shape[0] == pdi.get_num_tof_poss()


def test_subsets_are_views_with_all_tof_bins(case):
    pdi, info, img = case
    pair = _pair(pdi, info)
    out = ProjDataInMemory(pdi)
    pair.forward_project(out, img, subset_num=1, num_subsets=4)
    ref = _reference_forward(pdi, info, img)
    views = pdi.subset_views(1, 4)
    others = np.setdiff1d(np.arange(pdi.get_num_views()), views)
    for s in pdi.segment_nums:
        for j, t in enumerate(range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)):
            assert np.array_equal(out.read_views(s, views, timing_pos=t), ref[s][j][views])
            assert not np.any(out.read_views(s, others, timing_pos=t))


def test_back_projection_and_adjoint(case):
    pdi, info, img = case
    pair = _pair(pdi, info, max_views_per_chunk=2)
    data = ProjDataInMemory(pdi)
    data.fill(np.random.default_rng(1).uniform(0, 1, data.shape).astype(np.float32))
    got = np.asarray(pair.back_project(None, data))
    frame = stir_image_frame(info)
    ref = np.zeros(info.shape, np.float32)
    for s in pdi.segment_nums:
        values = np.stack([data.read_views(s, range(8), timing_pos=t) for t in range(-6, 7)])
        back_chunk_tof(pdi.chunk_tables(s), pdi, values, ref, frame)
    assert np.abs(got - ref).max() <= 1e-6 * ref.max()  # float32 sums in another order
    assert pair.adjointness_test(3) < 1e-6


def test_chunk_memory_is_bounded_by_the_plan(case):
    """A TOF viewgram is all its timing positions: a plan's chunks hold 13 x the bins of the
    non-TOF plan's, and a budget bounds them whatever the number of TOF bins."""
    pdi, info, img = case
    tof = _pair(pdi, info, max_views_per_chunk=2)
    non_tof = _pair(pdi.create_non_tof_clone(), info, max_views_per_chunk=2)
    out, out1 = ProjDataInMemory(pdi), ProjDataInMemory(pdi.create_non_tof_clone())
    tof.forward_project(out, img)
    non_tof.forward_project(out1, img)
    p, p1 = tof.last_plan, non_tof.last_plan
    assert p is not None and p1 is not None
    assert [c.num_bins for c in p.chunks] == [13 * c.num_bins for c in p1.chunks]
    assert all(part.timing_poss == tuple(range(-6, 7)) for c in p.chunks for part in c.parts)


def test_fused_osem_ratio_equals_the_unfused_steps(case):
    """OSEM's fused forward-back ratio on TOF data: STIR's quotient per viewgram, which for TOF
    data is per view and timing position, then the back projection."""
    from stirgpu.projectors.poisson import poisson_quotient

    pdi, info, img = case
    pair = _pair(pdi, info, max_views_per_chunk=3)
    y = ProjDataInMemory(pdi)
    y.fill(np.random.default_rng(2).poisson(3.0, y.shape).astype(np.float32))
    fused, ll = pair.forward_back_ratio(img, y, subset_num=1, num_subsets=2, return_loglik=True)
    views = pdi.subset_views(1, 2)
    fwd = ProjDataInMemory(pdi)
    pair.forward_project(fwd, img, subset_num=1, num_subsets=2)
    ratio = ProjDataInMemory(pdi)
    ll_ref = np.zeros(1)
    for s in pdi.segment_nums:
        for t in range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1):
            q = poisson_quotient(
                np, fwd.read_views(s, views, timing_pos=t), y.read_views(s, views, timing_pos=t), loglik=ll_ref
            )
            ratio.write_views(q, s, views, timing_pos=t)
    unfused = np.asarray(pair.back_project(None, ratio, subset_num=1, num_subsets=2))
    assert np.abs(np.asarray(fused) - unfused).max() <= 1e-6 * unfused.max()
    assert ll == pytest.approx(ll_ref[0], rel=1e-9)


#: (scanner, TOF mashing factor) for 1, 13 and 33 TOF bins
TOF_BIN_CASES = {
    1: ("GE Discovery MI 4 rings", 377),
    13: ("GE Discovery MI 4 rings", 29),
    33: ("Siemens Vision 600", 8),
}


def _tof_bin_case(num_tof_bins: int):
    scanner, mash = TOF_BIN_CASES[num_tof_bins]
    pdi = ProjDataInfo.construct(Scanner.from_name(scanner), 1, 0, 4, 21, tof_mash_factor=mash)
    assert pdi.get_num_tof_poss() == num_tof_bins and pdi.is_tof_data()
    info = stir_default_image_info(pdi)
    return pdi, info, np.random.default_rng(num_tof_bins).uniform(0, 1, info.shape).astype(np.float32)


@pytest.mark.parametrize("num_tof_bins", sorted(TOF_BIN_CASES))
def test_tiny_host_budget_bounds_the_plan_whatever_the_tof_bins(num_tof_bins):
    """A host budget that leaves each chunk buffer room for 1.5 viewgrams (all timing positions)
    beside the images (the ample plan's): every plan (forward and back) fits it, its chunks fit their buffers, the
    data take several chunks, and the projections equal those of an ample budget (forward bit
    for bit, back to float32 summation order)."""
    pdi, info, img = _tof_bin_case(num_tof_bins)
    viewgram = 4 * num_tof_bins * pdi.get_num_axial_poss(0) * pdi.get_num_tangential_poss()

    def tiny_budget(plan):
        return plan.host_fixed_bytes + plan.lanes * plan.depth * plan.host_buffers_per_slot * (3 * viewgram // 2)

    ample = _pair(pdi, info)
    fwd_ref = ample.forward_project(ProjDataInMemory(pdi), img)
    fwd_budget = tiny_budget(ample.last_plan)
    back_ref = np.asarray(ample.back_project(None, fwd_ref))
    back_budget = tiny_budget(ample.last_plan)
    tiny_fwd = _pair(pdi, info, host_memory_budget=fwd_budget)
    fwd = tiny_fwd.forward_project(ProjDataInMemory(pdi), img)
    tiny_back = _pair(pdi, info, host_memory_budget=back_budget)
    back = np.asarray(tiny_back.back_project(None, fwd_ref))
    for plan, budget in ((tiny_fwd.last_plan, fwd_budget), (tiny_back.last_plan, back_budget)):
        assert plan is not None and plan.host_budget == budget
        assert plan.host_bytes <= budget
        assert max(c.nbytes for c in plan.chunks) <= plan.buffer_bytes < 2 * viewgram
        assert len(plan.chunks) > 1
        assert all(part.num_tof_poss == num_tof_bins for c in plan.chunks for part in c.parts)
    assert np.array_equal(fwd.as_array(), fwd_ref.as_array())
    assert np.abs(back - back_ref).max() <= 1e-6 * back_ref.max()  # chunks summed in another order


@pytest.mark.parametrize("num_tof_bins", sorted(TOF_BIN_CASES))
def test_gpu_budget_bounds_the_plan_whatever_the_tof_bins(num_tof_bins):
    """The planner's GPU side (what the CUDA backend asks of it): with a GPU budget for 1.5
    viewgrams per device buffer, every chunk fits and the device bytes stay within the budget."""
    pdi, _, _ = _tof_bin_case(num_tof_bins)
    viewgram = 4 * num_tof_bins * pdi.get_num_axial_poss(0) * pdi.get_num_tangential_poss()
    fixed, depth, device_buffers = 1 << 20, 3, 2
    gpu_budget = fixed + depth * device_buffers * (3 * viewgram // 2)
    plan = plan_of(
        pdi,
        host_buffers_per_slot=0,
        device_buffers_per_slot=device_buffers,
        host_budget=1 << 40,
        gpu_budget=gpu_budget,
        device_fixed_bytes=fixed,
        depth=depth,
    )
    assert plan.device_bytes_per_lane <= gpu_budget
    assert max(c.nbytes for c in plan.chunks) <= plan.buffer_bytes < 2 * viewgram
    assert sum(c.num_bins for c in plan.chunks) == pdi.total_num_bins


@pytest.mark.parametrize("num_tof_bins", sorted(TOF_BIN_CASES))
def test_units_mm_are_stir_units_times_vx(num_tof_bins):
    """TOF projections with units='mm' are those in STIR's x-voxel units times vx, forward and
    back, to float32 rounding.  Both run the same float32 kernels, mm on the unscaled frame and
    TOF kernel (bin width, sigma), STIR's units on everything times 1/vx rounded to float32, so
    the erf arguments of the TOF weights differ in their last bits: measured 5.3e-6 / 1.2e-5
    (forward / back, 13 bins), 4.7e-6 / 1.4e-5 (1 bin), 1.7e-5 / 3.3e-5 (33 bins, Vision 600) of
    the maximum; bar 1e-4.  Guards against TOF data in mm losing the factor vx or scaling the
    LORs but not the TOF bins and sigma (which moves every TOF bin's weight)."""
    pdi, info, img = _tof_bin_case(num_tof_bins)
    data = ProjDataInMemory(pdi)
    data.fill(np.random.default_rng(1).uniform(0, 1, data.shape).astype(np.float32))
    fwd, back = {}, {}
    for units in ("stir", "mm"):
        pair = _pair(pdi, info, units=units)
        fwd[units] = pair.forward_project(ProjDataInMemory(pdi), img).as_array().astype(np.float64)
        back[units] = np.asarray(pair.back_project(None, data), np.float64)
    vx = info.voxel_size[2]
    assert vx > 1.5
    for got in (fwd, back):
        want = got["stir"] * vx
        assert np.abs(got["mm"] - want).max() <= 1e-4 * want.max()
