"""Several compute streams per GPU, results reduced into the caller's array, and the
engine's per-call bookkeeping.

A GPU's chunks take its compute streams in turn (on calls whose stores are all copied
directly; staged calls compute one chunk at a time), so two chunks' kernels may run at once.
That must not change any number: forward projections bit for bit, back projections to
float32 summation order (atomics), the fused OSEM step's log-likelihood to float64
rounding (each compute stream sums its own row).  A back projection into a cupy image of
the right layout is reduced into that very array, after the caller's pending work on it.
On the CPU: option validation, busy time as the union of overlapping stage intervals,
and default budgets measured at most once a second for kept plans.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BACK_RTOL, phantom, random_proj_data, same_data, small_geometry

from stirgpu import config
from stirgpu.errors import DeviceError, PipelineError, StirGpuError
from stirgpu.execution import Engine
from stirgpu.execution.stats import StatsRecorder
from stirgpu.formats import ProjDataInMemory
from stirgpu.kernels import kernel_geometry
from stirgpu.projectors import ProjectorPair
from stirgpu.projectors.programs import BackProgram, ForwardProgram


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(np.max(np.abs(want))))


# --------------------------------------------------------------------------------------
# CPU
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, 9, 1.5, True, "2"])
def test_compute_streams_is_validated(bad):
    """``config(compute_streams=...)`` refuses anything but a whole number in its range (0, 9, a
    float, a bool, a string), naming the option."""
    with pytest.raises(StirGpuError, match="compute_streams"):
        with config(compute_streams=bad):
            pass


def test_engine_refuses_no_compute_stream():
    """An engine of no compute stream is refused, naming the option; a CPU engine computes one
    chunk at a time whatever it is asked."""
    with pytest.raises(DeviceError, match="compute_streams"):
        Engine("cuda", (0,), compute_streams=0)
    assert Engine("cpu", (0, 1), compute_streams=4).compute_streams == 1  # CPU lanes: one compute at a time


def test_busy_time_is_the_union_of_overlapping_intervals():
    """Two chunks computing at once on one lane count their common time once."""
    rec = StatsRecorder(["cuda0"], 0.0)
    rec.stage("cuda0", "compute", 0, 1.0, 3.0)
    rec.stage("cuda0", "compute", 1, 2.0, 4.0)  # overlaps the first by 1 s
    rec.stage("cuda0", "compute", 2, 5.0, 6.0)  # after a gap
    rec.stage("cuda0", "h2d", 0, 0.5, 1.5)  # other stages are separate
    stats = rec.finish(wall_seconds=6.0)
    assert stats.busy["cuda0"]["compute"] == pytest.approx(4.0)
    assert stats.busy["cuda0"]["h2d"] == pytest.approx(1.0)
    assert stats.compute_utilisation <= 1.0
    assert len(stats.events) == 4


def test_kept_plans_reuse_recent_default_budgets(monkeypatch):
    """Asking again for a kept plan does not measure the default budgets again within a
    second (it costs as much as a subset call's engine overhead); a new plan, or a kept
    one after that, measures them."""
    from stirgpu.execution import planning

    calls = []
    real = planning.default_host_budget
    monkeypatch.setattr(planning, "default_host_budget", lambda: calls.append(1) or real())
    pdi, info = small_geometry()
    eng = Engine("cpu", (0,))
    prog = BackProgram(kernel_geometry(info, pdi))
    a = eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape)
    assert len(calls) == 1
    assert eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape) is a
    assert len(calls) == 1
    eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(1, 4), info.shape)  # a new plan
    assert len(calls) == 2
    eng.planner.budgets_recent = 0.0  # (an instance attribute: this engine only)
    assert eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape) is a
    assert len(calls) == 3
    # explicit budgets are never measured
    eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape, host_budget=1 << 26)
    assert len(calls) == 3


def test_plans_count_each_computing_chunks_temporaries():
    """A GPU plan whose stores are all copied directly is sized for the temporaries of every
    chunk computing at once (a back projection of data / f allocates some per chunk); a GPU
    budget that fits one chunk's but not two gets a plan of one compute stream instead of an
    error; a plan with staged stores computes one chunk at a time; the fused OSEM step has no
    chunk-sized temporaries (its quotient is one kernel per chunk).  (Plans only: no GPU needed.)"""
    from stirgpu.projectors.programs import PoissonRatioProgram

    pdi, info = small_geometry()
    eng = Engine("cuda", (0,), compute_streams=2)
    prog = BackProgram(kernel_geometry(info, pdi), with_multiplicative=True)
    args = (prog, pdi, pdi.segment_nums, range(24), info.shape)
    direct = ("data", "multiplicative")
    roomy = eng.make_plan(*args, host_budget=1 << 30, gpu_budget=1 << 30, depth=2, direct=direct)
    assert roomy.concurrency == 2 and "2 chunks computing at once" in str(roomy)
    staged = eng.make_plan(*args, host_budget=1 << 30, gpu_budget=1 << 30, depth=2, direct=("data",))
    assert staged.concurrency == 1 and "computing at once" not in str(staged)
    one_view = max(4 * pdi.get_num_axial_poss(s) * pdi.get_num_tangential_poss() for s in pdi.segment_nums)
    fixed = roomy.device_fixed_bytes
    # room for one view in each buffer of one stream's plan (2 slots x (2 inputs + 1 scratch + 3/2
    # temporaries, rounded up)), not of two streams' (2 x (2 + 1 + 6/2))
    budget = fixed + 2 * 5 * one_view
    tight = eng.make_plan(*args, host_budget=1 << 30, gpu_budget=budget, depth=2, direct=direct)
    assert tight.concurrency == 1 and tight.device_bytes_per_lane <= budget
    assert (
        Engine("cuda", (0,), compute_streams=1)
        .make_plan(*args, host_budget=1 << 30, gpu_budget=1 << 30, depth=2, direct=direct)
        .concurrency
        == 1
    )
    ratio = PoissonRatioProgram(kernel_geometry(info, pdi), True, False, True)
    assert ratio.workspace == 0
    ratio_args = (ratio, pdi, pdi.segment_nums, range(24), info.shape)
    ratio_direct = ("measured", "background")
    ratio_fixed = eng.make_plan(
        *ratio_args, host_budget=1 << 30, gpu_budget=1 << 30, depth=2, direct=ratio_direct
    ).device_fixed_bytes
    # 2 slots x (2 inputs + 1 scratch): two streams at no extra memory
    lean = eng.make_plan(
        *ratio_args, host_budget=1 << 30, gpu_budget=ratio_fixed + 2 * 3 * one_view, depth=2, direct=ratio_direct
    )
    assert lean.concurrency == 2
    back = eng.make_plan(
        BackProgram(kernel_geometry(info, pdi)),
        pdi,
        pdi.segment_nums,
        range(24),
        info.shape,
        host_budget=1 << 30,
        gpu_budget=1 << 30,
        depth=2,
        direct=("data",),
    )
    assert back.concurrency == 2  # no temporaries: two streams at no extra memory


def test_result_out_is_refused_where_it_cannot_be_used():
    """``result_out`` is for a GPU engine's accumulating program and an array of the image's
    layout on ``result_device``; anything else is a PipelineError naming the argument."""
    pdi, info = small_geometry()
    eng = Engine("cpu", (0,))
    prog = BackProgram(kernel_geometry(info, pdi))
    plan = eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape)
    with pytest.raises(PipelineError, match="result_out"):
        eng.run(
            prog,
            plan,
            pdi,
            {"data": random_proj_data(pdi)},
            {},
            image_shape=info.shape,
            result_device=0,
            result_out=np.zeros(info.shape, np.float32),
        )
    # a program that accumulates nothing, called without an image shape (the message once
    # failed on the missing shape with a TypeError)
    fwd = ForwardProgram(kernel_geometry(info, pdi))
    eng.set_image(phantom(info), None)
    plan = eng.make_plan(fwd, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape)
    with pytest.raises(PipelineError, match="result_out must be .* of a program that accumulates an image"):
        eng.run(fwd, plan, pdi, {}, {"out": ProjDataInMemory(pdi)}, result_out=np.zeros(info.shape, np.float32))


# --------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------
def _pair(streams: int, **kw):
    # page-locked stores from their first use: the direct path, where compute streams are used
    # (calls through staging buffers compute one chunk at a time)
    with config(compute_streams=streams, pin_host_memory="always"):
        return ProjectorPair(backend="cuda", devices=kw.pop("devices", [0]), restrict_to_cylindrical_fov=False, **kw)


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [dict(max_views_per_chunk=2), dict(gpu_memory_budget=700_000, max_views_per_chunk=5)])
def test_one_or_more_compute_streams_give_the_same_numbers(kw):
    """Forward (bitwise), back and the fused OSEM step (image and log-likelihood), full and
    subset, with 1, 2 and 3 compute streams; the chunks did overlap with 2."""
    pdi, info = small_geometry()
    img = phantom(info)
    data = random_proj_data(pdi)
    measured = random_proj_data(pdi, seed=3, low=1.0)
    background = random_proj_data(pdi, seed=4, low=0.1)
    res = {}
    for streams in (1, 2, 3):
        pp = _pair(streams, **kw)
        pp.set_up(pdi, info)
        full = ProjDataInMemory(pdi, fill=-1.0)
        pp.forward_project(full, img)
        sub = ProjDataInMemory(pdi, fill=-1.0)
        pp.forward_project(sub, img, subset_num=1, num_subsets=3)
        back = pp.back_project(None, data)
        stats = pp.last_stats
        assert stats.direct == ("data",)
        ratio, loglik = pp.forward_back_ratio(img, measured, 2, 3, background=background, return_loglik=True)
        res[streams] = (full, sub, back, ratio, loglik)
        assert stats.chunks > 2 and stats.busy["cuda0"]["compute"] <= stats.wall_seconds
    for streams in (2, 3):
        full, sub, back, ratio, loglik = res[streams]
        assert same_data(full, res[1][0], pdi) and same_data(sub, res[1][1], pdi)
        _close(back, res[1][2])
        _close(ratio, res[1][3])
        assert loglik == pytest.approx(res[1][4], rel=1e-9)


@pytest.mark.gpu
def test_back_projection_is_reduced_into_a_cupy_image(cp):
    """A cupy float32 C-contiguous image of the right shape receives the back projection
    in place (the engine accumulates there; the call returns that very array), after the
    caller's own pending work on it; with ``accumulate`` or another layout the result is
    added or copied as before -- the same numbers every way."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    pp = _pair(2, max_views_per_chunk=3)
    pp.set_up(pdi, info)
    want = pp.back_project(None, data, subset_num=0, num_subsets=2)
    out = cp.empty(info.shape, cp.float32)
    out.fill(5.0)  # queued on the caller's stream: must be overwritten, not race the call
    got = pp.back_project(out, data, subset_num=0, num_subsets=2)
    assert got is out
    _close(cp.asnumpy(out), want)
    plus = cp.full(info.shape, 2.0, cp.float32)
    pp.back_project(plus, data, subset_num=0, num_subsets=2, accumulate=True)
    _close(cp.asnumpy(plus) - 2.0, want)
    strided = cp.zeros((info.shape[0], info.shape[1], 2 * info.shape[2]), cp.float32)[:, :, ::2]
    pp.back_project(strided, data, subset_num=0, num_subsets=2)
    _close(cp.asnumpy(strided), want)
    sens = cp.empty(info.shape, cp.float32)
    assert pp.sensitivity(sens) is sens
    _close(cp.asnumpy(sens), pp.sensitivity())


@pytest.mark.multi_gpu
def test_two_gpus_reduce_into_the_second_gpus_image(cp):
    """With two GPUs and the result's image on the second, the first GPU's part is added
    into the caller's array there."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    pp = _pair(2, devices=[0, 1], max_views_per_chunk=2)
    pp.set_up(pdi, info)
    want = pp.back_project(None, data)
    with cp.cuda.Device(1):
        out = cp.full(info.shape, 9.0, cp.float32)
    assert pp.back_project(out, data) is out
    assert all(n > 0 for n in pp.last_stats.chunks_per_lane.values())
    _close(cp.asnumpy(out), want)


@pytest.mark.gpu
def test_workspaces_kept_between_calls_are_reused_and_released(cp):
    """The engine keeps a GPU's accumulation image from call to call (zeroed at each call's
    start by the lane's kernels) and the lane's kernels their tables: back projections, a
    sensitivity in between and a numpy result all stay right; ``release`` drops them."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    pp = _pair(2, max_views_per_chunk=3)
    pp.set_up(pdi, info)
    first = pp.back_project(None, data, subset_num=1, num_subsets=3)
    eng = pp.session.engine
    kept = eng.kept_workspaces(0)
    assert kept and kept.accumulation is not None and kept.kernels.transaxial is not None
    sens = pp.sensitivity()
    again = pp.back_project(None, data, subset_num=1, num_subsets=3)
    assert eng.kept_workspaces(0).accumulation is kept.accumulation  # the same memory
    assert eng.kept_workspaces(0).kernels.transaxial is kept.kernels.transaxial
    _close(again, first)
    assert not np.shares_memory(again, first)
    eng.release()
    assert not any(eng.kept_workspaces(k) for k in range(len(eng.devices)))
    _close(pp.back_project(None, data, subset_num=1, num_subsets=3), first)
    _close(pp.sensitivity(), sens)


@pytest.mark.gpu
def test_calls_into_other_targets_equal_a_fresh_projector(cp):
    """A GPU lane keeps its tables from call to call while each call brings its own targets:
    back projections into the engine's image, into two caller arrays in turn (full of 5.0,
    replaced) and accumulated into one, and forward projections of images changed in between,
    all equal a fresh projector's (forward bit for bit, back to summation order).  Guards against
    a kept object carrying a previous call's image or accumulation image into the next."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    images = [phantom(info), 2.0 * phantom(info) + 1.0]
    pp = _pair(2, max_views_per_chunk=3)
    pp.set_up(pdi, info)

    def fresh():
        q = _pair(2, max_views_per_chunk=3)
        q.set_up(pdi, info)
        return q

    want_back = fresh().back_project(None, data, subset_num=1, num_subsets=3)
    outs = [cp.full(info.shape, 5.0, cp.float32) for _ in range(2)]
    for target in (None, outs[0], outs[1], outs[0], None):
        got = pp.back_project(target, data, subset_num=1, num_subsets=3)
        _close(cp.asnumpy(got) if target is not None else got, want_back)
    summed = pp.back_project(outs[1], data, subset_num=1, num_subsets=3, accumulate=True)
    _close(cp.asnumpy(summed), 2 * want_back)
    for image in images + images[:1]:
        want = ProjDataInMemory(pdi)
        fresh().forward_project(want, image)
        got = ProjDataInMemory(pdi)
        pp.forward_project(got, image)
        assert same_data(got, want, pdi)


@pytest.mark.gpu
def test_tables_are_kept_per_chunk_and_packed_once_per_lane(cp):
    """A GPU lane keeps the geometry's transaxial tables, packed on the device once, and each
    chunk's tables (a JosephChunk) from call to call, by the engine's kept tables of the chunk:
    a subset's forward and back projections, the full data's and the subset's again all equal a
    fresh projector's (of one compute stream) and reuse the very objects; ``release`` drops
    them."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    image = phantom(info)

    def calls(pp):
        got = []
        for subset in ((1, 3), (None, 1), (1, 3)):
            kw = {} if subset[0] is None else dict(subset_num=subset[0], num_subsets=subset[1])
            out = ProjDataInMemory(pdi)
            pp.forward_project(out, image, **kw)
            got += [out, pp.back_project(None, data, **kw)]
        return got

    fresh = _pair(1, max_views_per_chunk=3)
    fresh.set_up(pdi, info)
    want = calls(fresh)
    pp = _pair(2, max_views_per_chunk=3)
    pp.set_up(pdi, info)
    got = calls(pp)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, np.ndarray):
            _close(g, w)
        else:
            assert same_data(g, w, pdi)
    eng = pp.session.engine
    kept = eng.kept_workspaces(0).kernels
    packing = kept.transaxial.device_packings[0]
    chunks = dict(kept.chunks)
    assert len(chunks) >= 2 and all(c.transaxial is kept.transaxial for c in chunks.values())
    assert kept.device_bytes() >= packing.X.nbytes + packing.H.nbytes > 0
    got = calls(pp)
    assert same_data(got[0], want[0], pdi)
    assert eng.kept_workspaces(0).kernels.transaxial.device_packings[0] is packing
    assert all(kept.chunks.get(t) is c for t, c in chunks.items())
    eng.release()
    assert eng.kept_workspaces(0).kernels.is_empty()


@pytest.mark.gpu
def test_back_projection_replaces_an_uninitialised_result(cp):
    """The engine hands a back projection's GPU image over uninitialised (the lane's kernels zero
    it before the first chunk): a caller's array full of NaN, and the engine's own image between
    calls, end with exactly the back projection."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    ref = _pair(1)
    ref.set_up(pdi, info)
    want = ref.back_project(None, data)
    pp = _pair(2, max_views_per_chunk=3)
    pp.set_up(pdi, info)
    out = cp.full(info.shape, np.nan, cp.float32)
    assert pp.back_project(out, data) is out
    _close(cp.asnumpy(out), want)
    _close(pp.back_project(None, data), want)
