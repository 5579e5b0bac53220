"""The abilities contract: every store's declared :class:`~stirgpu.formats.StoreAbilities`
match what it does.  Needs pytest (imported here; never imported by the package itself).

Use it from a pytest module::

    from stirgpu.formats.testing_abilities import StoreAbilitiesContract

    class TestMyReadOnlyStore(StoreAbilitiesContract):
        def make_store(self, proj_data_info, folder):
            return MyStore(proj_data_info, values(proj_data_info))

        def expected_values(self, store):
            return values(store.get_proj_data_info())   # None: the store holds no values

Each test checks one declaration both ways: a store that declares an ability is held to it
(writable: writes read back; reads and writes from several threads give the serial numbers,
run at once or, without parallel reads and writes, one at a time;
write-behind: the data survive ``start_writeback`` and the commit; abortable: ``abort()`` leaves
the folder as it was before the store was made), and one that does not refuses the call with
:class:`~stirgpu.errors.StoreAbilityError` and changes nothing (values and files).
:class:`~stirgpu.formats.testing.ProjDataContract` (writable stores) includes this contract.
"""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import numpy as np
import pytest

from ..errors import GeometryError, StoreAbilityError
from ..geometry import ProjDataInfo
from .abilities import Residence, StoreAbilities
from .projdata import ProjData

__all__ = ["StoreAbilitiesContract", "contract_values", "folder_snapshot"]


def contract_values(proj_data_info: ProjDataInfo, seed: int) -> np.ndarray:
    """Random float32 values of that geometry in ``as_array()`` order."""
    pdi = proj_data_info
    shape: tuple[int, ...] = (pdi.get_num_axial_poss_total(), pdi.get_num_views(), pdi.get_num_tangential_poss())
    if pdi.get_num_tof_poss() > 1:
        shape = (pdi.get_num_tof_poss(), *shape)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def folder_snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (the test folders are small)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def _writes(store: ProjData):
    """One of each kind of write call, writing 9.0 (a value no store here holds), with the part
    of the last segment (view, axial, tangential) it writes: {name: (call, index)}."""
    pdi = store.get_proj_data_info()
    s, nv, nt = pdi.get_max_segment_num(), pdi.get_num_views(), pdi.get_num_tangential_poss()
    na = pdi.get_num_axial_poss(s)
    nine = 9.0
    return {
        "write_views": (lambda: store.write_views(np.full((2, na, nt), nine, np.float32), s, [0, nv - 1]), [0, nv - 1]),
        "set_viewgram": (lambda: store.set_viewgram(np.full((na, nt), nine, np.float32), 1, s), 1),
        "set_sinogram": (
            lambda: store.set_sinogram(np.full((nv, nt), nine, np.float32), na - 1, s),
            (slice(None), na - 1),
        ),
        "set_segment_by_view": (lambda: store.set_segment_by_view(np.full((nv, na, nt), nine, np.float32), s), ...),
    }


def _by_view(pdi: ProjDataInfo, values: np.ndarray, timing_pos: int) -> dict[int, np.ndarray]:
    """{segment: (views, axial, tangential)} of one timing position of as_array()-ordered values."""
    from .testing import reference_segment

    return {s: reference_segment(values, pdi, s, timing_pos).transpose(1, 0, 2) for s in pdi.segment_nums}


class StoreAbilitiesContract:
    """Tests every store passes; subclass (named ``Test...``) and define :meth:`make_store`
    (and :meth:`expected_values` when the new store does not hold zeros)."""

    def make_store(self, proj_data_info: ProjDataInfo, folder: Path) -> ProjData:  # pragma: no cover
        """A new store of that geometry, its files (if any) in ``folder``."""
        raise NotImplementedError

    def expected_values(self, store: ProjData) -> np.ndarray | None:
        """What the new store holds, in ``as_array()`` order (None: no values, a template or a
        closed store); zeros unless overridden."""
        return np.zeros(store.shape, np.float32)

    def prepare_folder(self, proj_data_info: ProjDataInfo, folder: Path) -> None:
        """Put what should be there before the store is made (an old file it will replace)."""

    def reopen(self, store: ProjData, folder: Path) -> ProjData | None:
        """After ``store.close()``: a store of what it committed (None: nothing to reopen)."""
        return None

    @pytest.fixture(params=["non_tof", "tof"])
    def pdi(self, request) -> ProjDataInfo:
        from .testing import small_proj_data_info, small_tof_proj_data_info

        return small_proj_data_info() if request.param == "non_tof" else small_tof_proj_data_info()

    @pytest.fixture
    def made(self, pdi, tmp_path):
        """(the new store, the folder's files before it was made)."""
        self.prepare_folder(pdi, tmp_path)
        before = folder_snapshot(tmp_path)
        s = self.make_store(pdi, tmp_path)
        yield s, before
        s.close()

    @pytest.fixture
    def store(self, made):
        return made[0]

    def _unchanged(self, store: ProjData, folder: Path):
        """A check that the store's values and the folder's files are what they are now."""
        values = store.as_array() if store.abilities.readable else None
        files = folder_snapshot(folder)

        def check() -> None:
            if values is not None:
                np.testing.assert_array_equal(store.as_array(), values)
            assert folder_snapshot(folder) == files

        return check

    # -- the declaration itself -------------------------------------------------------------
    def test_abilities_are_declared(self, store, pdi):
        """A StoreAbilities (consistent: its constructor checks), the same when asked twice."""
        a = store.abilities
        assert isinstance(a, StoreAbilities)
        assert store.abilities == a
        assert store.get_proj_data_info().get_num_views() == pdi.get_num_views()  # geometry always there

    # -- readable / template --------------------------------------------------------------
    def test_readable_as_declared(self, store):
        """Readable: check_readable passes and reads give the store's values.  Not: every read
        and check_readable is a StoreAbilityError (saying "template" for a template: geometry
        only, which stays available)."""
        expected = self.expected_values(store)
        pdi = store.get_proj_data_info()
        seg = pdi.get_min_segment_num()
        if store.abilities.readable:
            assert expected is not None
            store.check_readable()
            np.testing.assert_array_equal(store.as_array(), expected)
            ref = store.get_segment_by_sinogram(seg)
            np.testing.assert_array_equal(store.read_views(seg, [2, 0]), ref[:, [2, 0], :].transpose(1, 0, 2))
            return
        assert expected is None
        word = "template" if store.abilities.template else None
        for call in (store.check_readable, store.as_array, lambda: store.read_views(seg, [0])):
            with pytest.raises(StoreAbilityError, match=word):
                call()
        assert store.shape == contract_values(pdi, 0).shape  # the geometry stays

    # -- writable ----------------------------------------------------------------------------
    def test_writable_as_declared(self, store, tmp_path):
        """Writable: check_writable passes and every kind of write reads back.  Not: every write
        and check_writable is a StoreAbilityError, and no value or file changes."""
        pdi = store.get_proj_data_info()
        s = pdi.get_max_segment_num()
        if not store.abilities.writable:
            unchanged = self._unchanged(store, tmp_path)
            for call in [store.check_writable, lambda: store.fill(9.0), *(c for c, _ in _writes(store).values())]:
                with pytest.raises(StoreAbilityError):
                    call()
                unchanged()
            return
        store.check_writable()
        assert store.abilities.readable  # (every writable store here reads back)
        for name, (call, index) in _writes(store).items():
            store.fill(0.0)
            call()
            want = np.zeros_like(store.get_segment_by_view(s))
            want[index] = 9.0
            np.testing.assert_array_equal(store.get_segment_by_view(s), want, err_msg=name)
            assert np.count_nonzero(store.as_array()) == np.count_nonzero(want), f"{name} wrote elsewhere"
        store.fill(contract_values(pdi, 4))
        np.testing.assert_array_equal(store.as_array(), contract_values(pdi, 4))

    # -- parallel reads and writes (every store takes calls from several threads) -------------
    def test_reads_from_several_threads_give_the_serial_numbers(self, store):
        """Eight threads reading every viewgram in a shuffled order get exactly what one thread
        gets: with parallel reads declared they run at once, without it the store runs them one
        at a time; either way the engine's lanes read from threads of their own."""
        if not store.abilities.readable:
            pytest.skip("holds no values")
        pdi = store.get_proj_data_info()
        jobs = [(s, v) for s in pdi.segment_nums for v in range(pdi.get_num_views())]
        np.random.default_rng(0).shuffle(jobs)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda j: store.read_views(j[0], [j[1]]), jobs))
        for (s, v), g in zip(jobs, got, strict=True):
            np.testing.assert_array_equal(g, store.read_views(s, [v]))

    def test_disjoint_writes_from_several_threads(self, store):
        """Eight threads writing disjoint views give the serial result (at once with parallel
        writes declared, one at a time without)."""
        if not store.abilities.writable:
            pytest.skip("not writable")
        pdi = store.get_proj_data_info()
        model = _by_view(pdi, contract_values(pdi, 5), timing_pos=0)
        jobs = [(s, v) for s in pdi.segment_nums for v in range(pdi.get_num_views())]
        np.random.default_rng(1).shuffle(jobs)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda j: store.write_views(model[j[0]][j[1]][None], j[0], [j[1]]), jobs))
        for s in pdi.segment_nums:
            np.testing.assert_array_equal(store.get_segment_by_view(s), model[s])

    # -- write-behind --------------------------------------------------------------------------
    def test_write_behind_as_declared(self, store, tmp_path):
        """Declared write-behind: start_writeback between writes changes no value, and what was
        written is what the committed store holds.  Not: start_writeback is a StoreAbilityError
        and changes nothing."""
        if not store.abilities.write_behind:
            unchanged = self._unchanged(store, tmp_path)
            with pytest.raises(StoreAbilityError):
                store.start_writeback()
            unchanged()
            return
        pdi = store.get_proj_data_info()
        want = contract_values(pdi, 6)
        for t in range(store.get_min_tof_pos_num(), store.get_max_tof_pos_num() + 1):
            for s, block in _by_view(pdi, want, t).items():
                store.set_segment_by_view(block, s, timing_pos=t)
                store.start_writeback()
        np.testing.assert_array_equal(store.as_array(), want)
        store.close()
        again = self.reopen(store, tmp_path)
        if again is not None:
            with again:
                np.testing.assert_array_equal(again.as_array(), want)

    # -- abortable -----------------------------------------------------------------------------
    def test_abort_as_declared(self, made, tmp_path):
        """Declared abortable: after values are written, abort() leaves the folder exactly as it
        was before the store was made (no new file; an old file it was to replace intact), the
        store is no longer readable, and a second abort() does nothing.  Not: abort() is a
        StoreAbilityError and changes no value or file."""
        store, before = made
        if not store.abilities.abortable:
            unchanged = self._unchanged(store, tmp_path)
            with pytest.raises(StoreAbilityError):
                store.abort()
            unchanged()
            return
        store.fill(contract_values(store.get_proj_data_info(), 7))
        store.abort()
        assert folder_snapshot(tmp_path) == before
        assert not store.abilities.readable and not store.abilities.abortable
        with pytest.raises(StoreAbilityError):
            store.read_views(0, [0])
        store.abort()
        assert folder_snapshot(tmp_path) == before

    # -- host memory and residence ---------------------------------------------------------
    def test_host_memory_as_declared(self, store):
        """Declared host memory: host_array of every segment and timing position is the data
        itself (float32, C-contiguous, writable, view order, the same memory each time, equal
        to read_views at that timing position, apart from every other segment's and timing
        position's); a write through it is read back at that timing position alone; a bad
        segment or timing position is a GeometryError.  Not: None."""
        pdi = store.get_proj_data_info()
        timing = range(store.get_min_tof_pos_num(), store.get_max_tof_pos_num() + 1)
        if not store.abilities.host_memory:
            assert all(store.host_array(s, timing_pos=t) is None for s in pdi.segment_nums for t in timing)
            return
        spans = []
        for s in pdi.segment_nums:
            for t in timing:
                a = store.host_array(s, timing_pos=t)
                assert a.shape == (pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())
                assert a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
                assert store.host_array(s, timing_pos=t).ctypes.data == a.ctypes.data
                np.testing.assert_array_equal(a, store.read_views(s, range(pdi.get_num_views()), timing_pos=t))
                spans.append((a.ctypes.data, a.ctypes.data + a.nbytes))
        spans.sort()
        assert all(start >= end for (_, end), (start, _) in zip(spans, spans[1:], strict=False)), "host arrays overlap"
        for t in timing:
            store.host_array(pdi.get_max_segment_num(), timing_pos=t)[1] = 5.0 + t
        for t in timing:
            assert np.all(store.read_views(pdi.get_max_segment_num(), [1], timing_pos=t) == 5.0 + t)
        with pytest.raises(GeometryError, match="segment"):
            store.host_array(pdi.get_max_segment_num() + 1)
        with pytest.raises(GeometryError, match="timing_pos"):
            store.host_array(0, timing_pos=timing.stop)

    def test_residence_as_declared(self, store, tmp_path):
        """In memory: writing puts nothing in the folder.  On disk: a file in the folder holds
        the bins (a template's header, at least).  (Computed and foreign stores make no claim about files.)"""
        where = store.abilities.residence
        assert isinstance(where, Residence)
        if where is Residence.MEMORY:
            files = folder_snapshot(tmp_path)
            if store.abilities.writable:
                store.fill(1.0)
            assert folder_snapshot(tmp_path) == files
        elif where is Residence.DISK:
            sizes = [p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()]
            holds = 0 if store.abilities.template else 4 * store.get_proj_data_info().total_num_bins
            assert sizes and max(sizes) >= holds
        else:
            pytest.skip(f"{where.value}: no claim about files")
