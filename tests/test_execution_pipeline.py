"""The pipeline under failure, and its bookkeeping.

A reader, worker or writer that raises must end the call promptly with PipelineError
chaining the original exception -- never a hang (every test is also bounded by pytest's
faulthandler timeout) -- and a new output file must not be committed.  Timing bounds here
are generous (10 s) against a call that normally takes well under a second.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
from helpers import assert_same_back, phantom, random_proj_data, same_data, small_geometry

from stirgpu.errors import PipelineError
from stirgpu.execution import ChunkProgram, Engine
from stirgpu.formats import ProjData, ProjDataInMemory, ProjDataOnDisk, read_from_file
from stirgpu.projectors import BackProjector, ForwardProjector, ProjectorPair


class Boom(RuntimeError):
    pass


class FailingStore(ProjData):
    """Delegates to ``inner`` but raises Boom on the ``after``-th read_views / write_views; its
    abilities are the inner store's, less host memory (so every chunk goes through read_views /
    write_views, staged, where it fails)."""

    def __init__(self, inner, fail_read_after=None, fail_write_after=None):
        self._inner = inner
        self._reads = self._writes = 0
        self._fail_read_after = fail_read_after
        self._fail_write_after = fail_write_after

    proj_data_info = property(lambda self: self._inner.proj_data_info)
    storage_order = property(lambda self: self._inner.storage_order)
    abilities = property(lambda self: dataclasses.replace(self._inner.abilities, host_memory=False))

    def read_views(self, *args, **kw):
        self._reads += 1
        if self._fail_read_after is not None and self._reads > self._fail_read_after:
            raise Boom(f"read number {self._reads} failed")
        return self._inner.read_views(*args, **kw)

    def write_views(self, *args, **kw):
        self._writes += 1
        if self._fail_write_after is not None and self._writes > self._fail_write_after:
            raise Boom(f"write number {self._writes} failed")
        return self._inner.write_views(*args, **kw)

    def _read_box(self, *args) -> None:
        self._inner._read_box(*args)

    def _write_box(self, *args) -> None:
        self._inner._write_box(*args)

    def abort(self) -> None:
        self._inner.abort()


def _timed(fn):
    t0 = time.monotonic()
    with pytest.raises(PipelineError) as info:
        fn()
    return info.value, time.monotonic() - t0


def test_failing_reader_ends_back_projection(backend):
    """A store that fails on its 3rd read ends back_project with PipelineError from the reader,
    the original error chained, within seconds; the projector works again afterwards."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    bp = BackProjector(backend=backend, max_views_per_chunk=2, restrict_to_cylindrical_fov=False)
    bp.set_up(pdi, info)
    err, seconds = _timed(lambda: bp.back_project(None, FailingStore(data, fail_read_after=2)))
    assert isinstance(err.__cause__, Boom) and "reader" in str(err)
    assert seconds < 10
    ok = bp.back_project(None, data)
    assert ok.max() > 0


def test_failing_writer_ends_forward_projection_and_new_file_is_not_committed(backend, tmp_path):
    """A new disk store that fails on its 4th write: PipelineError from the writer, and neither
    the header nor the data file appears (no partial output mistaken for complete), and no
    temporary file is left behind."""
    pdi, info = small_geometry()
    path = tmp_path / "out.hs"
    store = ProjDataOnDisk.create(path, pdi)
    fp = ForwardProjector(backend=backend, max_views_per_chunk=2)
    fp.set_up(pdi, info)
    err, seconds = _timed(lambda: fp.forward_project(FailingStore(store, fail_write_after=3), phantom(info)))
    assert isinstance(err.__cause__, Boom) and "writer" in str(err)
    assert seconds < 10
    store.close()  # what a user's ``with`` block would do; must not commit an aborted store
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_failing_fused_input_ends_call(backend):
    """The fused OSEM step fails cleanly when one of its three inputs fails mid-way."""
    pdi, info = small_geometry()
    y, b, f = random_proj_data(pdi, 1), random_proj_data(pdi, 2), random_proj_data(pdi, 3, low=1)
    pp = ProjectorPair(backend=backend, max_views_per_chunk=1)
    pp.set_up(pdi, info)
    err, seconds = _timed(
        lambda: pp.forward_back_ratio(phantom(info), y, background=FailingStore(b, 5), multiplicative=f)
    )
    assert isinstance(err.__cause__, Boom) and seconds < 10


class _Failing(ChunkProgram):
    name = "failing program"
    inputs = ("data",)
    accumulates_image = True

    def __init__(self, fail_at):
        self.fail_at = fail_at

    def compute(self, d):
        if d.chunk.index == self.fail_at:
            raise Boom(f"chunk {d.chunk.index}")


def test_failing_worker_ends_call():
    """An exception in a program's device step is reported as the worker's failure, and the
    engine runs the next call normally."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    eng = Engine("cpu", (0, 1))
    prog = _Failing(fail_at=3)
    plan = eng.make_plan(
        prog, pdi, pdi.segment_nums, range(24), info.shape, host_budget=1 << 26, gpu_budget=None, max_views_per_chunk=2
    )
    err, seconds = _timed(lambda: eng.run(prog, plan, pdi, {"data": data}, {}, image_shape=info.shape))
    assert isinstance(err.__cause__, Boom) and "worker" in str(err) and seconds < 10
    res = eng.run(_Failing(fail_at=-1), plan, pdi, {"data": data}, {}, image_shape=info.shape)
    assert res.stats.chunks == len(plan.chunks)


def test_statistics_add_up(backend):
    """Bytes read/written and bins equal what the plan says; every chunk has its stages in
    order in the event list; progress is reported once per chunk."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    pp = ProjectorPair(backend=backend, max_views_per_chunk=5)
    pp.set_up(pdi, info)
    out = ProjDataInMemory(pdi)
    pp.forward_project(out, phantom(info))
    st = pp.last_stats
    assert st.bins == pdi.total_num_bins and st.bytes_written == 4 * pdi.total_num_bins and st.bytes_read == 0
    assert st.chunks == len(pp.last_plan.chunks) == sum(st.chunks_per_lane.values())
    pp.back_project(None, data)
    st = pp.last_stats
    assert st.bytes_read == 4 * pdi.total_num_bins and st.bytes_written == 0
    stages = {}
    for e in st.events:
        stages.setdefault((e.lane, e.chunk), []).append(e)
        assert 0 <= e.start <= e.end <= st.wall_seconds + 1e-3
    assert len(stages) == st.chunks
    for evs in stages.values():
        names = [e.stage for e in sorted(evs, key=lambda e: e.start)]
        # a page-locked memory store (GPUs) is read by the upload itself
        assert names[0] == ("h2d" if st.direct else "read") and names[-1] == "compute"
    assert 0 < st.overlap_efficiency <= 1.0 + 1e-9
    assert st.peak_rss_bytes > 0 and "chunks" in st.summary()


def test_progress_callback_counts_chunks():
    """Engine.run calls progress(1) once per finished chunk."""
    from stirgpu.kernels import kernel_geometry
    from stirgpu.projectors.programs import ForwardProgram

    pdi, info = small_geometry()
    eng = Engine("cpu", (0, 1))
    eng.set_image(phantom(info), None)
    prog = ForwardProgram(kernel_geometry(info, pdi))
    plan = eng.make_plan(
        prog, pdi, pdi.segment_nums, range(24), info.shape, host_budget=1 << 26, gpu_budget=None, max_views_per_chunk=4
    )
    ticks = []
    out = ProjDataInMemory(pdi)
    eng.run(prog, plan, pdi, {}, {"out": out}, progress=ticks.append)
    assert len(ticks) == len(plan.chunks) and set(ticks) == {1}


def test_forward_into_disk_then_back_from_disk_equals_memory(backend, tmp_path):
    """Disk stores stream like memory stores: forward into a new file, commit, read back, back
    project: the same numbers as through ProjDataInMemory (back projection: bitwise on the CPU,
    to atomics' summation order on CUDA)."""
    pdi, info = small_geometry()
    img = phantom(info)
    pp = ProjectorPair(backend=backend, devices=[0], max_views_per_chunk=4)
    pp.set_up(pdi, info)
    mem = ProjDataInMemory(pdi)
    pp.forward_project(mem, img)
    with ProjDataOnDisk.create(tmp_path / "f.hs", pdi) as disk:
        pp.forward_project(disk, img)
    with read_from_file(tmp_path / "f.hs") as disk:
        assert same_data(disk, mem, pdi)
        assert_same_back(pp.back_project(None, disk), pp.back_project(None, mem), backend)


def test_engine_builds_each_parts_tables_once_per_geometry_object(monkeypatch):
    """Repeated calls over the same plan (OSEM's subsets) reuse the parts' geometry tables; a
    geometry that is equal but another object gets its own (equality tolerates header
    rounding, the tables must not)."""
    import numpy as np

    from stirgpu.geometry import ProjDataInfo

    made = []
    original = ProjDataInfo.chunk_tables

    def counting(self, segment_num, views=None, *args, **kw):
        made.append((id(self), segment_num))
        return original(self, segment_num, views, *args, **kw)

    monkeypatch.setattr(ProjDataInfo, "chunk_tables", counting)

    class Fill(ChunkProgram):
        name = "fill"
        outputs = ("out",)

        def compute(self, d):
            d.outputs["out"][...] = np.float32(1.0)

    pdi, info = small_geometry()
    eng = Engine("cpu", (0,))
    plan = eng.make_plan(
        Fill(), pdi, pdi.segment_nums, pdi.subset_views(1, 4), info.shape, host_budget=1 << 28, gpu_budget=None
    )
    parts = sum(len(c.parts) for c in plan.chunks)
    for _ in range(3):
        eng.run(Fill(), plan, pdi, {}, {"out": ProjDataInMemory(pdi)})
    assert len(made) == parts
    other = ProjDataInfo(
        pdi.get_scanner(),
        [pdi.get_min_ring_difference(s) for s in pdi.segment_nums],
        [pdi.get_max_ring_difference(s) for s in pdi.segment_nums],
        pdi.get_num_views(),
        pdi.get_num_tangential_poss(),
        pdi.is_arc_corrected(),
    )
    assert other == pdi and other is not pdi
    eng.run(Fill(), plan, other, {}, {"out": ProjDataInMemory(other)})
    assert len(made) == 2 * parts and {i for i, _ in made[parts:]} == {id(other)}


def test_programs_get_each_lanes_kernels_once_per_call_and_cpu_lanes_keep_nothing():
    """``start_lane`` and ``finish_lane`` run once per lane and call, each with that lane (whose
    kernel backend, ``lane.kernels``, a program uses); a CPU lane's kernels keep nothing between
    calls, and neither does the engine for it (its accumulation image is the result)."""
    import numpy as np

    from stirgpu.kernels.backends import CpuLaneKernels

    seen = []

    class Recording(ChunkProgram):
        name = "recording"
        outputs = ("out",)
        accumulates_image = True

        def start_lane(self, lane, image, accum):
            seen.append(("start", lane.index, type(lane.kernels), accum is not None))

        def finish_lane(self, lane, accum):
            seen.append(("finish", lane.index))

        def compute(self, d):
            d.outputs["out"][...] = np.float32(1.0)

    pdi, info = small_geometry()
    eng = Engine("cpu", (0, 1))
    assert not eng.kept_workspaces(0)
    plan = eng.make_plan(Recording(), pdi, pdi.segment_nums, range(24), info.shape, host_budget=1 << 26)
    for _ in range(2):
        eng.run(Recording(), plan, pdi, {}, {"out": ProjDataInMemory(pdi)}, image_shape=info.shape)
    starts = [e for e in seen if e[0] == "start"]
    assert sorted(starts) == sorted([("start", k, CpuLaneKernels, True) for k in range(2)] * 2)
    assert sorted(e for e in seen if e[0] == "finish") == sorted([("finish", k) for k in range(2)] * 2)
    assert not any(eng.kept_workspaces(k) for k in range(2))
    assert all(lane.kernels.kept is None and lane.kernels.kept_bytes() == 0 for lane in eng.lanes)


def test_kept_kernel_memory_is_typed_and_counted():
    """What a GPU lane's kernels keep is a typed record (no string keys): its device bytes are
    the transaxial tables' packings (host arrays stand in for a device's here), and a record
    with nothing in it counts as nothing kept; the engine's accumulation image alone counts as
    something kept."""
    import numpy as np

    from stirgpu.execution import KeptWorkspaces
    from stirgpu.kernels.backends import CudaKept
    from stirgpu.kernels.joseph.cuda import host_transaxial, part_tables

    empty = CudaKept()
    assert empty.is_empty() and empty.device_bytes() == 0
    assert not KeptWorkspaces(None, empty) and not KeptWorkspaces(None, None)
    pdi, _ = small_geometry()
    kept = CudaKept()
    transaxial = kept.transaxial_of(pdi)
    assert kept.transaxial_of(pdi) is transaxial and not kept.is_empty() and kept.device_bytes() == 0
    packing = host_transaxial(transaxial, [part_tables(pdi, pdi.chunk_tables(0))])
    transaxial.device_packings[0] = packing
    assert kept.device_bytes() == packing.X.nbytes + packing.H.nbytes > 0 and KeptWorkspaces(None, kept)
    assert KeptWorkspaces(np.zeros(3), None)


def test_kept_chunks_follow_the_engines_chunk_tables():
    """A GPU lane's kernels keep a chunk's JosephChunk (its float32 tables, uploaded once per
    device) by the engine's kept tables of the chunk (a ChunkParts, held weakly): the same
    object while they live, with the geometry's one set of transaxial tables; it goes when they
    go, every chunk goes with another geometry object (even an equal one), and tables that
    cannot be held weakly (a tuple) are not kept.  Plain Python: no GPU needed.  Guards against a
    ChunkParts that cannot be a weak key (a plain list is unhashable: every call then made and
    uploaded every chunk's tables again)."""
    import gc

    from stirgpu.execution.chunk_tables import ChunkParts
    from stirgpu.geometry import ProjDataInfo
    from stirgpu.kernels.backends import CudaKept

    pdi, _ = small_geometry()
    kept = CudaKept()
    transaxial = kept.transaxial_of(pdi)
    parts = [ChunkParts([pdi.chunk_tables(s, views=[v, v + 1]) for s in (-1, 1)]) for v in (0, 10)]
    chunks = [kept.chunk_of(p, pdi, transaxial) for p in parts]
    assert all(c.transaxial is transaxial for c in chunks)
    assert [kept.chunk_of(p, pdi, transaxial) for p in parts] == chunks  # (JosephChunk: equal is identical)
    assert len(kept.chunks) == 2
    as_tuple = tuple(parts[0])
    assert kept.chunk_of(as_tuple, pdi, transaxial) is not kept.chunk_of(as_tuple, pdi, transaxial)
    del parts[1], chunks[1]
    gc.collect()
    assert len(kept.chunks) == 1
    other = ProjDataInfo.construct(
        pdi.get_scanner(), span=1, max_ring_diff=2, num_views=pdi.get_num_views(), num_tangential_poss=32
    )
    assert other == pdi and other is not pdi
    assert kept.transaxial_of(other) is not transaxial and len(kept.chunks) == 0
