"""Running out of memory during a call: the engine retries what did not complete with smaller chunks.

Allocations fail on demand through the engine's documented test hook,
``Engine.allocation_hook`` (called before every buffer a lane allocates and before every
chunk's device step; see :mod:`stirgpu.execution.devices`), on every backend; on GPUs also
through cupy's own allocator (``cupy.cuda.set_allocator``), failing real device allocations.

What must hold (docs/execution.md, "Out of memory"):

* results equal a run without failures: forward projections bit for bit (they are for any
  plan); back projections and OSEM's fused step to float32 summation order, and bit for bit
  (CPU) a failure-free run over the plan the retry completed with -- the failed attempt's
  partial sums were discarded, never added twice;
* nothing is written twice, nothing is left half-written: every viewgram of the output is
  written exactly once, a committed disk file is whole;
* when even one viewgram per buffer does not fit: OutOfMemoryError (a PlanError) naming the
  memory, its budget, what is free and the options; an in-memory output untouched, a new disk
  store aborted (no file left).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time

import numpy as np
import pytest
from helpers import BACK_RTOL, assert_same_back, phantom, random_proj_data, same_data, small_geometry

from stirgpu.errors import OutOfMemoryError, PlanError
from stirgpu.formats import ProjData, ProjDataInMemory, ProjDataOnDisk, read_from_file
from stirgpu.projectors import BackProjector, ForwardProjector, ProjectorPair
from stirgpu.projectors.programs import BackProgram

#: chunks of at most 8 viewgrams (16 KiB): the retries halve them to 8, 4 and 2 KiB -- 2 KiB
#: being one viewgram of the largest segment (16 axial x 32 tangential positions), the smallest
MAX_VIEWS = 8
SMALLEST = 4 * 16 * 32


class FailAllocations:
    """An allocation hook (``Engine.allocation_hook``) that fails (MemoryError) the allocations
    of kind ``what`` whose number (1-based, counted over the engine's calls) is in ``numbers``,
    and every one of them larger than ``above`` bytes: a device that has only that much room.
    ``delay``: seconds it waits before failing one (the chunks before it are written meanwhile)."""

    def __init__(self, what: str, numbers=(), above: int | None = None, delay: float = 0.0):
        self.what, self.numbers, self.above, self.delay = what, set(numbers), above, delay
        self.seen = 0
        self.failed: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()

    def __call__(self, lane: str, what: str, nbytes: int) -> None:
        if what != self.what:
            return
        with self._lock:
            self.seen += 1
            if self.seen in self.numbers or (self.above is not None and nbytes > self.above):
                self.failed.append((lane, self.seen, nbytes))
                time.sleep(self.delay)
                raise MemoryError(f"test: {what} number {self.seen} ({nbytes} bytes) on {lane} fails")


class CountingStore(ProjData):
    """Delegates to ``inner``, counting the writes of every (segment, view); its abilities are
    the inner store's less host memory, so that every chunk goes through ``write_views``."""

    def __init__(self, inner):
        self._inner = inner
        self.writes: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    proj_data_info = property(lambda self: self._inner.proj_data_info)
    storage_order = property(lambda self: self._inner.storage_order)
    abilities = property(lambda self: dataclasses.replace(self._inner.abilities, host_memory=False))

    def read_views(self, *args, **kw):
        return self._inner.read_views(*args, **kw)

    def write_views(self, array, segment, views):
        with self._lock:
            self.writes.update((int(segment), int(v)) for v in views)
        return self._inner.write_views(array, segment, views)

    def _read_box(self, *args) -> None:
        self._inner._read_box(*args)

    def _write_box(self, *args) -> None:
        self._inner._write_box(*args)

    def abort(self) -> None:
        self._inner.abort()


@contextlib.contextmanager
def hooked(projector, hook):
    """``hook`` as the allocation hook of ``projector``'s engine, for the ``with`` block."""
    engine = projector.session.engine
    engine.allocation_hook = hook
    try:
        yield hook
    finally:
        engine.allocation_hook = None


def _projector(cls, backend, pdi, info, **kw):
    p = cls(backend=backend, devices=[0], max_views_per_chunk=MAX_VIEWS, restrict_to_cylindrical_fov=False, **kw)
    p.set_up(pdi, info)
    return p


def test_forward_projection_retries_only_the_chunks_not_written(backend):
    """The 3rd chunk's temporaries fail: one retry, with smaller chunks; the output equals a run
    without failures bit for bit, and every viewgram was written exactly once."""
    pdi, info = small_geometry()
    img = phantom(info)
    fp = _projector(ForwardProjector, backend, pdi, info)
    want = fp.forward_project(ProjDataInMemory(pdi), img)
    first_plan = fp.last_plan
    out = CountingStore(ProjDataInMemory(pdi))
    with hooked(fp, FailAllocations("chunk temporaries", numbers={3}, delay=0.3)) as hook:
        fp.forward_project(out, img)
    assert len(hook.failed) == 1
    assert fp.last_stats.memory_retries == 1
    assert fp.last_plan.buffer_bytes == first_plan.buffer_bytes // 2
    assert same_data(out, want, pdi)
    assert set(out.writes) == {(s, v) for s in pdi.segment_nums for v in range(pdi.get_num_views())}
    assert set(out.writes.values()) == {1}


def test_chunks_shrink_until_they_fit():
    """Buffers above 5000 bytes cannot be had (16 KiB planned): the retries halve the chunks
    twice, to 4 KiB, and the forward projection completes with the same numbers.  (CPU: a GPU
    lane's host buffers include its chunk tables' pinned buffer, of another size.)"""
    backend = "cpu"
    pdi, info = small_geometry()
    img = phantom(info)
    ref = _projector(ForwardProjector, backend, pdi, info)
    want = ref.forward_project(ProjDataInMemory(pdi), img)
    assert ref.last_plan.buffer_bytes == 4 * SMALLEST * 2
    fp = _projector(ForwardProjector, backend, pdi, info)  # (a new engine: it holds no buffers yet)
    out = CountingStore(ProjDataInMemory(pdi))
    with hooked(fp, FailAllocations("host buffer", above=5000)):
        fp.forward_project(out, img)
    assert fp.last_stats.memory_retries == 2
    assert fp.last_plan.buffer_bytes <= 4096
    assert "out of memory 2 times" in fp.last_stats.summary()
    assert same_data(out, want, pdi)
    assert set(out.writes.values()) == {1}


def test_forward_projection_to_a_new_disk_file_is_committed_whole(backend, tmp_path):
    """A failure mid-call into a new disk store: the retried call commits a file equal, bit for
    bit, to the projection without failures."""
    pdi, info = small_geometry()
    img = phantom(info)
    fp = _projector(ForwardProjector, backend, pdi, info)
    want = fp.forward_project(ProjDataInMemory(pdi), img)
    with hooked(fp, FailAllocations("chunk temporaries", numbers={2})):
        with ProjDataOnDisk.create(tmp_path / "out.hs", pdi) as disk:
            fp.forward_project(disk, img)
    assert fp.last_stats.memory_retries == 1
    with read_from_file(tmp_path / "out.hs") as disk:
        assert same_data(disk, want, pdi)


@pytest.mark.parametrize("what, number", [("chunk temporaries", 3), ("device array", 1), ("host buffer", 2)])
def test_back_projection_discards_the_failed_attempts_sums(backend, what, number):
    """A back projection whose 3rd chunk fails (after two chunks were added in), or whose
    accumulation image or a slot buffer cannot be had: the result equals the failure-free one
    to float32 summation order, and a failure-free run over the plan the retry completed with
    (the engine's own ``run``) -- partial sums were discarded, not added twice."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    want = _projector(BackProjector, backend, pdi, info).back_project(None, data)
    bp = _projector(BackProjector, backend, pdi, info)  # (a new engine: it holds no buffers yet)
    with hooked(bp, FailAllocations(what, numbers={number}, delay=0.3)) as hook:
        got = bp.back_project(None, data)
    assert len(hook.failed) == 1 and bp.last_stats.memory_retries == 1
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(want.max()))
    engine = bp.session.engine
    again = engine.run(
        BackProgram(bp.session.kernel_geometry), bp.last_plan, pdi, {"data": data}, {}, image_shape=info.shape
    )
    assert again.stats.memory_retries == 0
    assert_same_back(got, again.image, backend)


def test_fused_subset_step_retries_from_scratch(backend):
    """OSEM's fused forward-back step of one subset, its 2nd chunk failing: the image agrees with
    the failure-free one to float32 summation order, the log-likelihood to float64's."""
    pdi, info = small_geometry()
    img = phantom(info)
    y = random_proj_data(pdi, low=0.5)
    pp = _projector(ProjectorPair, backend, pdi, info)
    want, want_ll = pp.forward_back_ratio(img, y, subset_num=1, num_subsets=3, return_loglik=True)
    with hooked(pp, FailAllocations("chunk temporaries", numbers={2})):
        got, got_ll = pp.forward_back_ratio(img, y, subset_num=1, num_subsets=3, return_loglik=True)
    assert pp.last_stats.memory_retries == 1
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(want.max()))
    assert got_ll == pytest.approx(want_ll, rel=1e-9)


def test_progress_counts_the_plans_chunks_across_attempts():
    """Engine.run's progress callback: each chunk of the plan given once, however the retries
    cut them (a retried back projection recomputes chunks already counted)."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    bp = _projector(BackProjector, "cpu", pdi, info)
    bp.back_project(None, data)
    engine, plan = bp.session.engine, bp.last_plan
    counted: list[int] = []
    engine.allocation_hook = FailAllocations("chunk temporaries", numbers={4})
    try:
        result = engine.run(
            BackProgram(bp.session.kernel_geometry),
            plan,
            pdi,
            {"data": data},
            {},
            image_shape=info.shape,
            progress=counted.append,
        )
    finally:
        engine.allocation_hook = None
    assert result.stats.memory_retries == 1 and len(result.plan.chunks) > len(plan.chunks)
    assert sum(counted) == len(plan.chunks)


def test_smallest_chunks_failing_is_a_clear_error_and_the_output_is_untouched(backend):
    """Every chunk's temporaries fail: the retries go down to one viewgram per buffer, then
    OutOfMemoryError (a PlanError) names the memory, its budget, what is free and the options;
    an in-memory output keeps its values."""
    pdi, info = small_geometry()
    fp = _projector(ForwardProjector, backend, pdi, info, host_memory_budget="64M")
    out = random_proj_data(pdi, seed=5)
    before = random_proj_data(pdi, seed=5)
    with hooked(fp, FailAllocations("chunk temporaries", above=-1)) as hook:
        with pytest.raises(OutOfMemoryError) as err:
            fp.forward_project(out, phantom(info))
    e = err.value
    assert isinstance(e, PlanError)
    assert len(hook.failed) == 4  # 16, 8 and 4 KiB buffers, then one viewgram (2 KiB)
    msg = str(e)
    assert "forward projection: out of" in msg and "even with the smallest chunks" in msg
    assert "--memory-budget" in msg and "num_slots" in msg and "is free now" in msg
    if backend == "cpu":  # the CPU's chunk temporaries are host memory
        assert e.memory == "host" and e.budget == 64 << 20 and e.option == "host_memory_budget"
        assert "host budget is 64.0 MiB" in msg and "host_memory_budget=" in msg
    assert e.free is not None and e.free > 0 and f"({e.free} bytes) is free now" in msg
    assert same_data(out, before, pdi)


def test_smallest_chunks_failing_aborts_a_new_disk_store(backend, tmp_path):
    """The same failure into a new disk store: no header, no data file, no temporary file."""
    pdi, info = small_geometry()
    fp = _projector(ForwardProjector, backend, pdi, info)
    store = ProjDataOnDisk.create(tmp_path / "out.hs", pdi)
    with hooked(fp, FailAllocations("chunk temporaries", above=-1)):
        with pytest.raises(OutOfMemoryError):
            fp.forward_project(store, phantom(info))
    store.close()  # what a user's ``with`` block would do; must not commit an aborted store
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_errors_other_than_memory_are_not_retried():
    """A hook raising something else than MemoryError fails the call as before (PipelineError
    chaining it), with no retry."""
    from stirgpu.errors import PipelineError

    class Boom(RuntimeError):
        pass

    def boom(lane, what, nbytes):
        if what == "chunk temporaries":
            raise Boom("not a memory error")

    pdi, info = small_geometry()
    fp = _projector(ForwardProjector, "cpu", pdi, info)
    with hooked(fp, boom):
        with pytest.raises(PipelineError) as err:
            fp.forward_project(ProjDataInMemory(pdi), phantom(info))
    assert isinstance(err.value.__cause__, Boom)


# -- GPU: cupy's allocator fails ----------------------------------------------------------------
class FailingCupyAllocator:
    """A cupy allocator (``cupy.cuda.set_allocator``) over the default memory pool that raises
    cupy's ``OutOfMemoryError`` for the allocations numbered in ``numbers`` (1-based), and every
    one from ``all_from`` on."""

    def __init__(self, cp, numbers=(), all_from: int | None = None):
        self.cp = cp
        self.malloc = cp.get_default_memory_pool().malloc
        self.numbers, self.all_from = set(numbers), all_from
        self.seen = 0
        self.failed = 0
        self._lock = threading.Lock()

    def __call__(self, size: int):
        with self._lock:
            self.seen += 1
            fail = self.seen in self.numbers or (self.all_from is not None and self.seen >= self.all_from)
            if fail:
                self.failed += 1
        if fail:
            raise self.cp.cuda.memory.OutOfMemoryError(size, 0)
        return self.malloc(size)


@contextlib.contextmanager
def cupy_allocator(cp, allocator):
    previous = cp.cuda.get_allocator()
    cp.cuda.set_allocator(allocator)  # (the current allocator of every thread: the lanes' too)
    try:
        yield allocator
    finally:
        cp.cuda.set_allocator(previous)


@pytest.mark.gpu
def test_gpu_allocation_failing_in_a_chunk_is_retried(cp):
    """A forward projection with correction factors (its element-wise step allocates cupy
    temporaries per chunk): the 5th device allocation of the call fails; the call is retried
    with smaller chunks and its output equals the failure-free one bit for bit; a back
    projection with factors agrees to float32 summation order."""
    pdi, info = small_geometry()
    img = phantom(info)
    f = random_proj_data(pdi, seed=3, low=0.5)
    data = random_proj_data(pdi)
    pair = _projector(ProjectorPair, "cuda", pdi, info)
    pair.set_input(img)  # (uploaded and prepared now: the calls below allocate only their own memory)
    want = pair.forward_project(ProjDataInMemory(pdi), None, multiplicative=f)
    want_back = pair.back_project(None, data, multiplicative=f)
    out = ProjDataInMemory(pdi)
    with cupy_allocator(cp, FailingCupyAllocator(cp, numbers={5})) as allocator:
        pair.forward_project(out, None, multiplicative=f)
    assert allocator.failed == 1 and pair.last_stats.memory_retries == 1
    assert same_data(out, want, pdi)
    with cupy_allocator(cp, FailingCupyAllocator(cp, numbers={3})) as allocator:
        got_back = pair.back_project(None, data, multiplicative=f)
    assert allocator.failed == 1 and pair.last_stats.memory_retries == 1
    np.testing.assert_allclose(got_back, want_back, rtol=0, atol=BACK_RTOL * float(want_back.max()))


@pytest.mark.gpu
def test_gpu_out_of_memory_with_the_smallest_chunks_names_the_gpu_budget(cp):
    """Every device allocation fails from the call's first on: OutOfMemoryError says GPU memory
    ran out, with the plan's GPU budget and the GPU's free memory, and the output is untouched."""
    pdi, info = small_geometry()
    img = phantom(info)
    f = random_proj_data(pdi, seed=3, low=0.5)
    fp = _projector(ForwardProjector, "cuda", pdi, info, gpu_memory_budget="256M")
    fp.set_input(img)  # (uploaded and prepared now: the call below allocates only its own memory)
    fp.forward_project(ProjDataInMemory(pdi), None, multiplicative=f)
    out = random_proj_data(pdi, seed=5)
    with cupy_allocator(cp, FailingCupyAllocator(cp, all_from=1)):
        with pytest.raises(OutOfMemoryError) as err:
            fp.forward_project(out, None, multiplicative=f)
    e = err.value
    assert e.memory == "GPU" and e.budget == 256 << 20 and e.option == "gpu_memory_budget"
    assert "GPU budget is 256.0 MiB" in str(e) and "gpu_memory_budget=" in str(e)
    assert same_data(out, random_proj_data(pdi, seed=5), pdi)
