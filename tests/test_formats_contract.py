"""Every ProjData store passes the same contract (stirgpu.formats.testing), and its declared
abilities match what it does (stirgpu.formats.testing_abilities): the stores of
stirgpu.formats in every mode and state, the computed views of stirgpu.recon.views, STIR's
ProjData through the adapter (look-alikes here; the real STIR in tests marked ``stir``), and
the STIR plugin's lent ProjData (through a look-alike of the C++ access object; the real one in
tests/stir_differential/test_stir_plugin.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from test_projectors_stir_adapter import FakeStirProjData

from stirgpu.errors import StirGpuError, StoreAbilityError
from stirgpu.formats import (
    ProjDataFromFile,
    ProjDataInMemory,
    ProjDataInOneArray,
    ProjDataViewgrams,
    Residence,
    StorageOrder,
    StoreAbilities,
    format_projdata_header,
)
from stirgpu.formats.testing import ProjDataContract, small_proj_data_info
from stirgpu.formats.testing_abilities import StoreAbilitiesContract, contract_values
from stirgpu.interop import StirProjDataAdapter
from stirgpu.recon.views import Constant, EndPlanes, Quotient, SegmentRange, Sum
from stirgpu.stir_plugin.bridge import _LentProjData


class _ReopensDisk:
    """Disk stores: what a closed store committed can be opened again (the write-behind test)."""

    def reopen(self, store, folder):
        return ProjDataFromFile.open(store.path, "r")


# -- stirgpu.formats ----------------------------------------------------------------------------
class TestMemoryStore(ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataInMemory(proj_data_info)


class TestOneArrayStore(ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataInOneArray(proj_data_info)


class TestDiskViewOrder(_ReopensDisk, ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataFromFile.create(tmp_path / "view.hs", proj_data_info, StorageOrder.VIEW)


class TestDiskSinogramOrder(_ReopensDisk, ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataFromFile.create(tmp_path / "sino.hs", proj_data_info, StorageOrder.SINOGRAM)


class TestDiskReplacingAnOldFile(_ReopensDisk, ProjDataContract):
    """A new file that is to replace an old one (overwrite=True): aborted, the old one is intact."""

    def prepare_folder(self, proj_data_info, folder):
        with ProjDataFromFile.create(folder / "old.hs", proj_data_info, fill=contract_values(proj_data_info, 9)):
            pass

    def make_store(self, proj_data_info, tmp_path):
        return ProjDataFromFile.create(tmp_path / "old.hs", proj_data_info, overwrite=True)


class TestDiskReopenedBigEndianFloat64(_ReopensDisk, ProjDataContract):
    """A committed file, reopened with mode 'r+': the path of existing data on disk, in a
    non-native number format (every access converts); not abortable."""

    def make_store(self, proj_data_info, tmp_path):
        with ProjDataFromFile.create(tmp_path / "be.hs", proj_data_info, StorageOrder.SINOGRAM, dtype=">f8"):
            pass
        return ProjDataFromFile.open(tmp_path / "be.hs", "r+")


class TestDiskReadOnly(StoreAbilitiesContract):
    """mode 'r': readable in parallel, every write refused, the file untouched."""

    def make_store(self, proj_data_info, folder):
        with ProjDataFromFile.create(folder / "ro.hs", proj_data_info, fill=contract_values(proj_data_info, 2)):
            pass
        return ProjDataFromFile.open(folder / "ro.hs", "r")

    def expected_values(self, store):
        return contract_values(store.get_proj_data_info(), 2)


@pytest.mark.parametrize("data", [None, b""], ids=["no_data_file", "empty_data_file"])
class TestDiskTemplate(StoreAbilitiesContract):
    """A header whose data file is absent or empty: geometry only."""

    @pytest.fixture(autouse=True)
    def _data(self, data):
        self.data = data

    def make_store(self, proj_data_info, folder):
        (folder / "t.hs").write_text(format_projdata_header(proj_data_info, "t.s"))
        if self.data is not None:
            (folder / "t.s").write_bytes(self.data)
        return ProjDataFromFile.open(folder / "t.hs")

    def expected_values(self, store):
        return None


class TestDiskClosed(StoreAbilitiesContract):
    """A store after close(): neither readable nor writable (its file stays)."""

    def make_store(self, proj_data_info, folder):
        store = ProjDataFromFile.create(folder / "c.hs", proj_data_info, fill=1.0)
        store.close()
        return store

    def expected_values(self, store):
        return None


class TestViewgramsGivenReadOnly(StoreAbilitiesContract):
    """Viewgrams the caller gave read-only (numpy writeable=False): readable, not writable."""

    @pytest.fixture
    def pdi(self):  # non-TOF only
        return small_proj_data_info()

    def make_store(self, proj_data_info, folder):
        values = ProjDataInMemory(proj_data_info, fill=contract_values(proj_data_info, 3))
        held = {}
        for s in proj_data_info.segment_nums:
            for v in range(proj_data_info.get_num_views()):
                held[(s, v)] = values.get_viewgram(v, s)
                held[(s, v)].flags.writeable = False
        return ProjDataViewgrams(proj_data_info, held)

    def expected_values(self, store):
        return contract_values(store.get_proj_data_info(), 3)


def test_abilities_refuse_inconsistent_declarations():
    """StoreAbilities refuses what no store can be (an ability without what it needs)."""
    ok = dict(
        readable=True,
        writable=True,
        parallel_reads=True,
        parallel_writes=True,
        write_behind=False,
        abortable=False,
        template=False,
        host_memory=True,
        residence=Residence.MEMORY,
    )
    StoreAbilities(**ok)
    for change, match in [
        (dict(writable=False), "needs writable"),
        (dict(readable=False), "needs readable"),
        (dict(template=True), "template"),
        (dict(residence=Residence.DISK), "host_memory needs residence MEMORY"),
        (dict(readable=1), "True or False"),
    ]:
        with pytest.raises(StoreAbilityError, match=match):
            StoreAbilities(**{**ok, **change})


# -- stirgpu.recon.views ------------------------------------------------------------------------
class TestConstantView(StoreAbilitiesContract):
    def make_store(self, proj_data_info, folder):
        return Constant(proj_data_info, 2.5)

    def expected_values(self, store):
        return np.full(store.shape, 2.5, np.float32)


class TestQuotientOfDiskAndMemory(StoreAbilitiesContract):
    """a / f of a file and an array: computed, readable in parallel (both sources are)."""

    def make_store(self, proj_data_info, folder):
        with ProjDataFromFile.create(folder / "a.hs", proj_data_info, fill=contract_values(proj_data_info, 1)):
            pass
        self.a = ProjDataFromFile.open(folder / "a.hs")
        return Quotient(self.a, ProjDataInMemory(proj_data_info, fill=2.0))

    def expected_values(self, store):
        return contract_values(store.get_proj_data_info(), 1) / np.float32(2.0)


class TestSumWithAStirObject(StoreAbilitiesContract):
    """A view of a STIR ProjData reads it one call at a time: no parallel reads declared."""

    @pytest.fixture
    def pdi(self):
        return small_proj_data_info()

    def make_store(self, proj_data_info, folder):
        stir_like = StirProjDataAdapter(FakeStirProjData(proj_data_info), proj_data_info)
        stir_like.fill(contract_values(proj_data_info, 8))
        store = Sum(stir_like, Constant(proj_data_info, 1.0))
        assert not store.abilities.parallel_reads
        return store

    def expected_values(self, store):
        return contract_values(store.get_proj_data_info(), 8) + np.float32(1.0)


class TestEndPlanesOfATemplate(StoreAbilitiesContract):
    """A view of a template is a template's view: not readable, and says why by the file's name."""

    def make_store(self, proj_data_info, folder):
        (folder / "t.hs").write_text(format_projdata_header(proj_data_info, "t.s"))
        return EndPlanes(SegmentRange(ProjDataFromFile.open(folder / "t.hs"), 0))

    def expected_values(self, store):
        return None

    def test_refusal_names_the_template(self, store, tmp_path):
        with pytest.raises(StoreAbilityError, match=r"t\.hs: has no values: it is a template"):
            store.check_readable()


# -- STIR's ProjData through the adapter (look-alikes) ------------------------------------------
class OneCallAtATime(FakeStirProjData):
    """A STIR ProjData look-alike that fails when two threads call it at once (STIR's file-backed
    ProjData share one stream)."""

    def __init__(self, pdi):
        super().__init__(pdi)
        self._inside = threading.Lock()

    def _one(self, fn, *args):
        if not self._inside.acquire(blocking=False):
            raise AssertionError("two threads inside STIR at once")
        try:
            threading.Event().wait(0.0005)  # long enough for another thread to come in
            return fn(*args)
        finally:
            self._inside.release()

    def get_viewgram(self, view, segment, *args):
        return self._one(super().get_viewgram, view, segment)

    def set_viewgram(self, vg):
        return self._one(super().set_viewgram, vg)


class TestStirAdapterOfALookAlike(ProjDataContract):
    """Declares no parallel I/O, and the look-alike checks the adapter calls it one at a time
    (the contract's concurrent test drives it from several threads)."""

    @pytest.fixture
    def pdi(self):  # non-TOF only
        return small_proj_data_info()

    def make_store(self, proj_data_info, tmp_path):
        return StirProjDataAdapter(OneCallAtATime(proj_data_info))


# -- the STIR plugin's lent ProjData (a look-alike of its C++ access object) ---------------------
class FakeAccess:
    """What swig/src/lookalikes.cxx's ProjDataAccess offers: viewgrams (of one timing position,
    STIR's numbers) into C-contiguous float32 buffers of exactly their size; write_viewgram
    refused for data lent read-only; one caller at a time is the store's job."""

    def __init__(self, pdi, values, read_only: bool):
        self._pdi = pdi
        store = ProjDataInMemory(pdi, fill=values)
        times = range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)
        self._data = {
            (s, t): np.ascontiguousarray(store.get_segment_by_view(s, timing_pos=t))
            for s in pdi.segment_nums
            for t in times
        }
        self._read_only = read_only

    def read_viewgram(self, segment, view, out, timing_pos=0):
        stored = self._data[(segment, timing_pos)][view]
        if not (out.flags.c_contiguous and out.dtype == np.float32 and out.shape == stored.shape):
            raise ValueError("read_viewgram: the buffer does not have the viewgram's size")
        out[...] = stored

    def write_viewgram(self, segment, view, array, timing_pos=0):
        if self._read_only:
            raise RuntimeError("write_viewgram: this STIR ProjData is input data (read only)")
        self._data[(segment, timing_pos)][view] = array


class TestLentOutput(ProjDataContract):
    """Lent as output (non-TOF and TOF geometries: the contract's pdi)."""

    def make_store(self, proj_data_info, tmp_path):
        return _LentProjData(FakeAccess(proj_data_info, 0.0, read_only=False), proj_data_info, writable=True)


class TestLentInput(StoreAbilitiesContract):
    """Lent as input: readable, refused before reaching the C++ side's own refusal."""

    def make_store(self, proj_data_info, folder):
        values = contract_values(proj_data_info, 4)
        return _LentProjData(FakeAccess(proj_data_info, values, read_only=True), proj_data_info, writable=False)

    def expected_values(self, store):
        return contract_values(store.get_proj_data_info(), 4)


# -- the real STIR ------------------------------------------------------------------------------
def _stir_pdi(stir, pdi):
    """STIR's ProjDataInfo of small_proj_data_info()."""
    return stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 4, pdi.get_num_views(), pdi.get_num_tangential_poss(), False
    )


@pytest.mark.stir
class TestStirProjDataInMemory(ProjDataContract):
    @pytest.fixture
    def pdi(self):
        return small_proj_data_info()

    @pytest.fixture(autouse=True)
    def _stir(self, stir):
        self.stir = stir

    def make_store(self, proj_data_info, tmp_path):
        stir_pd = self.stir.ProjDataInMemory(self.stir.ExamInfo(), _stir_pdi(self.stir, proj_data_info))
        return StirProjDataAdapter(stir_pd, name="stir in memory")


@pytest.mark.stir
class TestStirProjDataInterfile(TestStirProjDataInMemory):
    """A ProjDataInterfile opened for reading and writing (its new file filled with zeros first)."""

    def make_store(self, proj_data_info, tmp_path):
        stir = self.stir
        mode = stir.ios.trunc | stir.ios.ios_base_in | stir.ios.out
        stir_pd = stir.ProjDataInterfile(
            stir.ExamInfo(), _stir_pdi(stir, proj_data_info), str(tmp_path / "stir.hs"), mode
        )
        stir_pd.fill(0.0)
        return StirProjDataAdapter(stir_pd, name="stir interfile")


@pytest.mark.stir
def test_stir_read_only_file_declared_writable_refuses_first_write_and_changes_nothing(stir, tmp_path):
    """STIR does not say whether a file's stream was opened for writing, so the adapter declares
    it writable (the safe answer: a refusal is a clear error, never lost data): the first write
    to a file opened by read_from_file is a StirGpuError naming the argument, and the file is
    unchanged.  (STIR's stream is left in a failed state: that STIR object reads no more.)"""
    pdi = small_proj_data_info()
    values = contract_values(pdi, 5)
    with ProjDataFromFile.create(tmp_path / "d.hs", pdi, fill=values):
        pass
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    store = StirProjDataAdapter(stir.ProjData.read_from_file(str(tmp_path / "d.hs")), name="measured")
    assert store.abilities.writable and store.abilities.residence is Residence.FOREIGN
    np.testing.assert_array_equal(store.as_array(), values)
    na, nt = pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()
    with pytest.raises(StirGpuError, match="measured.*set_viewgram.*open for writing"):
        store.write_views(np.ones((2, na, nt), np.float32), 0, [3, 4])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    again = StirProjDataAdapter(stir.ProjData.read_from_file(str(tmp_path / "d.hs")))
    np.testing.assert_array_equal(again.as_array(), values)
