"""Direct transfers: in-memory stores page-locked once and copied straight to/from the GPUs.

The direct path must give the numbers of the staged path (pinned staging buffers, a host
copy each way): forward projections bit for bit, back projections to float32 summation
order (the kernels add with atomics), for full calls, subsets, a tiny GPU budget and the
fused OSEM step -- including calls that mix a direct store with a staged (disk) one.  The
GPU tests also check the copies themselves (consecutive, strided and irregular views, both
directions) and the page-locking's life cycle.  Plan caching is checked on the CPU.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers import BACK_RTOL, phantom, random_proj_data, same_data, small_geometry

from stirgpu import config
from stirgpu.execution import Engine
from stirgpu.formats import ProjDataInMemory, ProjDataOnDisk
from stirgpu.kernels import kernel_geometry
from stirgpu.projectors import ProjectorPair
from stirgpu.projectors.programs import BackProgram, ForwardProgram


def _pair(pin: bool, **kw):
    with config(pin_host_memory="always" if pin else "never"):
        return ProjectorPair(backend="cuda", devices=kw.pop("devices", [0]), restrict_to_cylindrical_fov=False, **kw)


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(np.max(np.abs(want))))


# --------------------------------------------------------------------------------------
# CPU: plans are kept; nothing is direct without a GPU
# --------------------------------------------------------------------------------------
def test_plans_are_kept_per_arguments():
    """The same request gives the same plan object; other views, budgets or programs a new
    one; an explicit budget too small for the kept plan is never given the kept plan."""
    pdi, info = small_geometry()
    eng = Engine("cpu", (0, 1))
    prog = BackProgram(kernel_geometry(info, pdi))
    args = dict(host_budget=1 << 26, depth=2)
    a = eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape, **args)
    assert eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape, **args) is a
    assert (
        eng.make_plan(
            BackProgram(kernel_geometry(info, pdi)),
            pdi,
            pdi.segment_nums,
            list(pdi.subset_views(0, 4)),
            info.shape,
            **args,
        )
        is a
    )  # equal program and views
    b = eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(1, 4), info.shape, **args)
    assert b is not a and sorted({v for c in b.chunks for _, v in c.viewgrams()}) == list(pdi.subset_views(1, 4))
    f = eng.make_plan(
        ForwardProgram(kernel_geometry(info, pdi)), pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape, **args
    )
    assert f is not a
    small = eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape, host_budget=1 << 20, depth=2)
    assert small is not a and small.host_bytes <= 1 << 20
    eng.release()
    assert eng.make_plan(prog, pdi, pdi.segment_nums, pdi.subset_views(0, 4), info.shape, **args) is not a


def test_pin_policy_is_validated():
    """An unknown ``pin_host_memory`` policy is refused by ``config`` and by the engine, naming
    the option (a typo must not fall back to a default silently)."""
    from stirgpu.errors import DeviceError, StirGpuError

    with pytest.raises(StirGpuError, match="pin_host_memory"):
        with config(pin_host_memory="sometimes"):
            pass
    with pytest.raises(DeviceError, match="pin_host_memory"):
        Engine("cpu", (0,), pin_host_memory=True)


def test_cpu_engine_copies_nothing_directly():
    """A CPU engine has no GPU to copy to: ``direct_io`` finds no store."""
    pdi, info = small_geometry()
    eng = Engine("cpu", (0,))
    assert eng.direct_io({"out": ProjDataInMemory(pdi)}, pdi, pdi.segment_nums) == {}


def test_cpu_stats_name_no_direct_store():
    """A CPU projector's statistics name no direct store and count every bin written once."""
    pdi, info = small_geometry()
    pp = ProjectorPair(backend="cpu", restrict_to_cylindrical_fov=False)
    pp.set_up(pdi, info)
    pp.forward_project(ProjDataInMemory(pdi), phantom(info))
    assert pp.last_stats.direct == () and pp.last_stats.bytes_written == 4 * pdi.total_num_bins


# --------------------------------------------------------------------------------------
# GPU: the copies and the page-locking
# --------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("views", [[3], [2, 3, 4, 5], [0, 4, 8, 12, 16], [1, 2, 5, 9, 10, 11], [7, 3]])
def test_copy_views_both_ways(cp, views):
    """Consecutive, evenly spaced (one 2-D copy), irregular (one copy per run) and unordered
    view lists go up and come back exactly, and a download touches only its views."""
    from stirgpu.execution.devices import CudaLane
    from stirgpu.execution.pinning import HostPinning

    lane = CudaLane(0, 0)
    host = np.random.default_rng(0).random((20, 3, 5), dtype=np.float32)
    assert HostPinning().pin(host)
    dev = cp.zeros((len(views), 3, 5), cp.float32)
    # the lane's streams do not wait for cupy's: its zeroing must be done before the upload
    cp.cuda.get_current_stream().synchronize()
    with lane.device:
        lane.copy_views(True, dev.data.ptr, host, views, lane.s_in)
        lane.s_in.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(dev), host[views])
        dev *= -1
        cp.cuda.get_current_stream().synchronize()  # (and the negation before the download)
        back = host.copy()
        lane.copy_views(False, dev.data.ptr, host, views, lane.s_out)
        lane.s_out.synchronize()
    back[views] *= -1
    np.testing.assert_array_equal(host, back)


@pytest.mark.gpu
def test_pinning_lives_and_dies_with_the_array(cp):
    """An array is page-locked once (a second pin is answered from memory); memory page-locked
    by its owner (cupy's pinned allocator) is used as it is; and the registration ends with
    the array: arrays made and dropped in a row -- glibc hands the same mapping back -- are
    each page-locked anew (a leftover registration would make the driver refuse them)."""
    import cupyx

    from stirgpu.execution.pinning import HostPinning

    rt = cp.cuda.runtime
    pins = HostPinning()
    a = np.ones(1 << 22, np.float32)
    assert pins.pin(a) and pins.pin(a[5:])
    assert rt.pointerGetAttributes(a.ctypes.data).type == 1
    owned = cupyx.empty_pinned((1000,), np.float32)
    assert pins.pin(owned)
    del a
    gc.collect()
    for _ in range(3):
        b = np.ones(1 << 22, np.float32)
        assert HostPinning().pin(b)
        del b
        gc.collect()


# --------------------------------------------------------------------------------------
# GPU: direct equals staged
# --------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("kw", [dict(), dict(gpu_memory_budget=300_000), dict(num_slots=1, max_views_per_chunk=3)])
def test_direct_equals_staged(kw):
    """Forward (bitwise) and back projections, full and subset, with the stores copied
    straight to/from the GPU equal the staged path; statistics say which stores went direct
    and count their bytes as read/written."""
    pdi, info = small_geometry()
    img = phantom(info)
    data = random_proj_data(pdi)
    res = {}
    for pin in (False, True):
        pp = _pair(pin, **kw)
        pp.set_up(pdi, info)
        full = ProjDataInMemory(pdi, fill=-1.0)
        pp.forward_project(full, img)
        fstats = pp.last_stats
        sub = ProjDataInMemory(pdi, fill=-1.0)
        pp.forward_project(sub, img, subset_num=2, num_subsets=5)
        back = pp.back_project(None, data)
        bstats = pp.last_stats
        sback = pp.back_project(None, data, subset_num=1, num_subsets=3)
        res[pin] = (full, sub, back, sback)
        assert fstats.direct == (("out",) if pin else ())
        assert bstats.direct == (("data",) if pin else ())
        assert fstats.bytes_written == 4 * pdi.total_num_bins
        assert bstats.bytes_read == 4 * pdi.total_num_bins
    (f0, s0, b0, sb0), (f1, s1, b1, sb1) = res[False], res[True]
    assert same_data(f0, f1, pdi) and same_data(s0, s1, pdi)
    assert np.all(s1.host_array(0)[np.setdiff1d(np.arange(24), pdi.subset_views(2, 5))] == -1)
    _close(b1, b0)
    _close(sb1, sb0)


@pytest.mark.gpu
def test_mixed_direct_and_staged_stores(tmp_path):
    """The fused OSEM step with the measured data on disk (staged) and the background and
    multiplicative terms in memory (direct) equals the all-staged call."""
    pdi, info = small_geometry()
    img = phantom(info)
    measured = random_proj_data(pdi, seed=3, low=1.0)
    with ProjDataOnDisk.create(tmp_path / "y.hs", pdi) as f:
        f.fill(measured)
    background = random_proj_data(pdi, seed=4, low=0.1)
    mult = random_proj_data(pdi, seed=5, low=0.5)
    out = {}
    for pin in (False, True):
        pp = _pair(pin)
        pp.set_up(pdi, info)
        with ProjDataOnDisk.open(tmp_path / "y.hs") as y:
            out[pin] = pp.forward_back_ratio(
                img, y, 1, 3, background=background, multiplicative=mult, return_loglik=True
            )
        assert pp.last_stats.direct == (("background", "multiplicative") if pin else ())
    _close(out[True][0], out[False][0])
    assert out[True][1] == pytest.approx(out[False][1], rel=1e-9)


@pytest.mark.gpu
def test_default_policy_page_locks_a_store_at_its_second_use():
    """By default a store's first use is staged (a fresh output is not worth page-locking),
    its second and later uses are direct; an output made fresh for each call stays staged;
    and the numbers are the same either way."""
    pdi, info = small_geometry()
    img = phantom(info)
    pp = ProjectorPair(backend="cuda", devices=[0], restrict_to_cylindrical_fov=False)
    pp.set_up(pdi, info)
    out = ProjDataInMemory(pdi)
    got = []
    for _ in range(3):
        pp.forward_project(out, img)
        got.append((pp.last_stats.direct, ProjDataInMemory.from_proj_data(out)))
    assert [d for d, _ in got] == [(), ("out",), ("out",)]
    assert same_data(got[0][1], got[2][1], pdi)
    for _ in range(2):
        pp.forward_project(ProjDataInMemory(pdi), img, subset_num=1, num_subsets=4)
        assert pp.last_stats.direct == ()


@pytest.mark.gpu
def test_failing_program_ends_direct_call():
    """A program failing on a direct call (no reader or writer threads) ends it with the
    worker's PipelineError, promptly; the engine runs the next call normally."""
    import time

    from test_execution_pipeline import Boom
    from test_execution_pipeline import _Failing as Failing

    from stirgpu.errors import PipelineError

    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    eng = Engine("cuda", (0,), pin_host_memory="always")
    direct = eng.direct_io({"data": data}, pdi, pdi.segment_nums)
    assert set(direct) == {"data"}
    plan = eng.make_plan(Failing(2), pdi, pdi.segment_nums, range(24), info.shape, max_views_per_chunk=2, direct=direct)
    assert plan.host_buffers_per_slot == 0
    t0 = time.monotonic()
    with pytest.raises(PipelineError, match="worker") as err:
        eng.run(Failing(2), plan, pdi, {"data": data}, {}, image_shape=info.shape, direct=direct)
    assert isinstance(err.value.__cause__, Boom) and time.monotonic() - t0 < 10
    res = eng.run(Failing(-1), plan, pdi, {"data": data}, {}, image_shape=info.shape)
    assert res.stats.chunks == len(plan.chunks) and res.stats.direct == ("data",)


@pytest.mark.multi_gpu
def test_direct_on_two_gpus_equals_one():
    """Two GPUs on the direct path (the second lane on a kept thread) give one GPU's numbers,
    and both take chunks."""
    pdi, info = small_geometry()
    img = phantom(info)
    data = random_proj_data(pdi)
    res = []
    for devices in ([0], [0, 1]):
        pp = _pair(True, devices=devices, max_views_per_chunk=2)
        pp.set_up(pdi, info)
        out = ProjDataInMemory(pdi)
        pp.forward_project(out, img)
        res.append((out, pp.back_project(None, data)))
        assert pp.last_stats.direct == ("data",)
    assert all(n > 0 for n in pp.last_stats.chunks_per_lane.values())
    assert same_data(res[0][0], res[1][0], pdi)
    _close(res[1][1], res[0][1])
