"""stirgpu.distributed without an MPI launcher: the shares of the viewgrams, plans of a share, the
one-process communicator, the refusal to run under a launcher without mpi4py, a new file written by
several processes (one process here, two stores), and what a RankFailure says.  The runs under
mpiexec are in test_mpi.py."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import phantom, plan_of, small_geometry

from stirgpu.distributed import Communicator, share_bins, share_viewgrams, shared_output, world
from stirgpu.distributed import comm as comm_module
from stirgpu.distributed import cuda_aware as cuda_aware_module
from stirgpu.distributed.outputs import _pieces
from stirgpu.errors import RankFailure, StirGpuError
from stirgpu.formats import ProjDataInMemory, ProjDataOnDisk, read_from_file
from stirgpu.formats.projdata_disk import ProjDataFromFile
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.projectors import ForwardProjector


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
@pytest.mark.parametrize("subset", [(0, 1), (1, 3), (5, 8)])
def test_shares_are_disjoint_complete_and_balanced_by_bins(size, subset):
    pdi, _ = small_geometry()
    views = pdi.subset_views(*subset)
    segments = pdi.segment_nums
    shares = [share_viewgrams(pdi, segments, views, r, size) for r in range(size)]
    seen = sorted((s, int(v)) for share in shares for s, vs in share.items() for v in vs)
    assert seen == sorted((s, int(v)) for s in segments for v in views)  # each viewgram once
    bins = [share_bins(pdi, share) for share in shares]
    largest = 4 * max(pdi.get_num_axial_poss(s) for s in segments) * pdi.get_num_tangential_poss()
    assert max(bins) - sum(bins) / size <= largest  # at most one viewgram above the even share
    for share in shares:
        assert all(np.all(np.diff(v) > 0) for v in share.values())


def _tof_geometry():
    """GE Discovery MI, 3 segments of 35 / 36 / 35 axial positions, 6 views, 31 tangential
    positions, 13 TOF bins."""
    return ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 6, 31, tof_mash_factor=29)


def test_shares_of_tof_data_count_every_timing_position():
    """A viewgram of TOF data is all its timing positions: its bins count them, the plan of a
    share holds them (the plan's bins are the share's), and viewgrams of nearly one size are dealt
    out evenly (by their middles: 6 viewgrams, 2 per rank, not 3 / 1 / 2 by their starts)."""
    pdi = _tof_geometry()
    views = pdi.subset_views(2, 3)
    shares = [share_viewgrams(pdi, pdi.segment_nums, views, r, 3) for r in range(3)]
    bins = [share_bins(pdi, share) for share in shares]
    assert sum(bins) == 13 * 31 * len(views) * sum(pdi.get_num_axial_poss(s) for s in pdi.segment_nums)
    assert [sum(len(v) for v in share.values()) for share in shares] == [2, 2, 2]
    for share in shares:
        plan = plan_of(pdi, share, target_chunk_bytes=64 << 10)
        assert plan.num_bins == share_bins(pdi, share)


@pytest.mark.parametrize("limit", [1 << 20, 3 * 4 * 35 * 31, 4 * 35 * 31 - 1])
def test_completing_outputs_sends_bounded_pieces_of_every_timing_position(limit):
    """complete_on_every_rank's pieces (one segment's share of a rank): all timing positions of
    a run of views where one viewgram's fit the staging size, else each timing position alone;
    each piece at most the staging size (or one viewgram of one timing position); every
    (timing position, view) once."""
    timing, views, view_bytes = tuple(range(-6, 7)), np.arange(5), 4 * 35 * 31
    pieces = list(_pieces(timing, views, view_bytes, limit))
    seen = sorted((t, int(v)) for times, piece in pieces for t in times for v in piece)
    assert seen == sorted((t, int(v)) for t in timing for v in views)
    assert all(len(times) * len(piece) * view_bytes <= max(limit, view_bytes) for times, piece in pieces)
    assert all(len(times) == (13 if 13 * view_bytes <= limit else 1) for times, _ in pieces)
    assert list(_pieces((None,), views, view_bytes, limit))[0][0] == (None,)  # non-TOF: no timing_pos


def test_shares_refuse_a_bad_rank():
    pdi, _ = small_geometry()
    with pytest.raises(StirGpuError, match="0 <= rank < size"):
        share_viewgrams(pdi, pdi.segment_nums, [0, 1], 3, 3)


def test_a_plan_of_views_per_segment_covers_exactly_them():
    pdi, _ = small_geometry()
    share = share_viewgrams(pdi, pdi.segment_nums, range(pdi.get_num_views()), 1, 3)
    plan = plan_of(pdi, share, lanes=2, target_chunk_bytes=64 << 10)
    planned = sorted((p.segment, v) for c in plan.chunks for p in c.parts for v in p.views)
    assert planned == sorted((s, int(v)) for s, vs in share.items() for v in vs)
    assert plan.num_bins == share_bins(pdi, share)


def test_one_process_communicator_changes_nothing():
    comm = Communicator(None)
    assert (comm.rank, comm.size, comm.is_root, comm.parallel, comm.describe()) == (0, 1, True, False, "")
    image = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    assert comm.sum_image(image) == 0 and image[0, 1, 2] == 5
    assert comm.sum_scalars({"loglik": 2.5}) == {"loglik": 2.5}
    with pytest.raises(ValueError, match="as it was"):  # one process: the error itself, not a RankFailure
        with comm.together("a step"):
            raise ValueError("as it was")


def test_under_a_launcher_without_mpi4py_is_refused(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "3")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # (import fails)
    with pytest.raises(StirGpuError, match=r"MPI launcher .*3 ranks.*mpi4py is not installed.*stirgpu\[mpi\]"):
        world()
    with pytest.raises(StirGpuError, match="mpi4py is not installed"):
        ForwardProjector(backend="cpu")
    monkeypatch.setenv("PMI_SIZE", "1")  # one rank: nothing to share
    assert world().size == 1


def test_rank_failure_names_the_rank_and_the_cause():
    assert str(RankFailure((1,), 3, "bad.s: truncated", "forward projection")) == (
        "rank 1 of 3 MPI ranks failed (forward projection): bad.s: truncated"
    )
    assert str(RankFailure((0, 2), 3, "x", "")) == "ranks 0, 2 of 3 MPI ranks failed: x"
    assert str(RankFailure((0, 1, 2), 3, "the same everywhere", "checks")) == "the same everywhere"


def test_a_new_file_written_in_parts_commits_once(tmp_path):
    """share_for_writing / open_part: two stores write disjoint views of one new file; the part
    never commits, the creator does (the header last); an abort leaves nothing."""
    pdi, info = small_geometry()
    x = phantom(info)
    whole = ProjDataInMemory(pdi)
    fp = ForwardProjector(backend="cpu")
    fp.set_up(pdi, info)
    fp.forward_project(whole, x)
    creator = ProjDataOnDisk.create(tmp_path / "out.hs", pdi)
    part = ProjDataFromFile.open_part(creator.share_for_writing())
    assert creator.written_by_ranks and part.written_by_ranks and not part.abilities.abortable
    nv = pdi.get_num_views()
    for s in pdi.segment_nums:
        creator.write_views(whole.read_views(s, range(nv // 2)), s, range(nv // 2))
        part.write_views(whole.read_views(s, range(nv // 2, nv)), s, range(nv // 2, nv))
    part.close()
    assert not (tmp_path / "out.hs").exists()
    creator.close()
    with read_from_file(tmp_path / "out.hs") as back:
        assert np.array_equal(back.as_array(), whole.as_array())

    aborted = ProjDataOnDisk.create(tmp_path / "gone.hs", pdi)
    ProjDataFromFile.open_part(aborted.share_for_writing()).close()
    aborted.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.hs", "out.s"]


def test_shared_output_of_one_process_is_a_plain_new_file(tmp_path):
    pdi, _ = small_geometry()
    with pytest.raises(RuntimeError):
        with shared_output(Communicator(None), tmp_path / "a.hs", pdi) as out:
            out.fill(1.0)
            raise RuntimeError("stopped")
    assert list(tmp_path.iterdir()) == []
    with shared_output(Communicator(None), tmp_path / "a.hs", pdi) as out:
        out.fill(2.0)
    with read_from_file(tmp_path / "a.hs") as back:
        assert float(back.as_array().min()) == 2.0


class _Info:
    def __init__(self, kinds):
        self.kinds, self.freed = kinds, False

    def Get(self, key):  # noqa: N802  (mpi4py's names)
        return self.kinds if key == "mpi_memory_alloc_kinds" else None

    def Free(self):  # noqa: N802
        self.freed = True


class _Comm:
    """What cuda_aware asks of an mpi4py communicator: its info."""

    def __init__(self, kinds):
        self.info = _Info(kinds)

    def Get_info(self):  # noqa: N802
        return self.info


@pytest.mark.parametrize(
    "environ, kinds, query, want",
    [
        ({"STIRGPU_MPI_CUDA_AWARE": "1"}, None, 0, (True, "STIRGPU_MPI_CUDA_AWARE=1")),
        ({"STIRGPU_MPI_CUDA_AWARE": "0"}, "mpi,system,cuda:device", 1, (False, "STIRGPU_MPI_CUDA_AWARE=0")),
        ({}, "mpi,system,cuda:device", 0, (True, "mpi_memory_alloc_kinds lists cuda:device")),
        ({}, "mpi,system", 1, (True, "MPIX_Query_cuda_support() = 1")),
        ({}, "mpi,system", 0, (False, "MPIX_Query_cuda_support() = 0")),
        ({}, None, None, (False, "the MPI says nothing of CUDA; set STIRGPU_MPI_CUDA_AWARE=1 if it is CUDA-aware")),
        ({}, "mpi,system", None, (False, "the MPI says nothing of CUDA (mpi_memory_alloc_kinds: mpi,system); "
                                         "set STIRGPU_MPI_CUDA_AWARE=1 if it is CUDA-aware")),
    ],
)  # fmt: skip
def test_cuda_awareness_the_user_then_the_mpis_memory_kinds_then_its_query(monkeypatch, environ, kinds, query, want):
    """STIRGPU_MPI_CUDA_AWARE over anything the MPI says; then MPI 4.1's mpi_memory_alloc_kinds
    (cuda:device); then MPIX_Query_cuda_support() (None: the library has none)."""
    monkeypatch.setattr(cuda_aware_module, "mpix_query_cuda_support", lambda: query)
    comm = _Comm(kinds)
    assert cuda_aware_module.is_cuda_aware(comm, environ) == want
    assert comm.info.freed or "STIRGPU_MPI_CUDA_AWARE" in environ  # (the info object asked is freed)


@pytest.mark.parametrize("value", ["yes", "2", ""])
def test_cuda_awareness_refuses_other_words(value):
    with pytest.raises(StirGpuError, match=rf"STIRGPU_MPI_CUDA_AWARE='{value}': must be 1 .* or 0"):
        cuda_aware_module.is_cuda_aware(_Comm(None), {"STIRGPU_MPI_CUDA_AWARE": value})


def test_one_process_asks_nothing_of_the_mpi(monkeypatch):
    """One rank: sum_image neither sums nor asks whether the MPI is CUDA-aware (not even for a
    device image), and says nothing of a path."""
    monkeypatch.setattr(comm_module, "is_cuda_aware", lambda *a: pytest.fail("asked"))
    comm = Communicator(None)
    image = np.ones((2, 3, 4), np.float32)
    assert comm.sum_image(image) == 0 and comm.last_image_sum == "" and float(image.sum()) == 24.0
