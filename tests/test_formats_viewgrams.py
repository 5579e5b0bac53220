"""ProjDataViewgrams: the store contract with every viewgram held, and what it does with the
viewgrams it does not hold."""

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.formats import ProjDataViewgrams
from stirgpu.formats.testing import ProjDataContract, small_proj_data_info, small_tof_proj_data_info


def _all_viewgrams(pdi, value=0.0):
    timing_poss = range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1)
    return {
        (s, v, t): np.full((pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss()), value, np.float32)
        for s in pdi.segment_nums
        for v in range(pdi.get_num_views())
        for t in timing_poss
    }


class TestAllViewgramsHeld(ProjDataContract):
    """Every viewgram (every timing position of TOF data) held: the contract of every store."""

    def make_store(self, proj_data_info, tmp_path):
        return ProjDataViewgrams(proj_data_info, _all_viewgrams(proj_data_info))


def test_reads_and_writes_the_callers_arrays_in_place():
    pdi = small_proj_data_info()
    held = {
        (0, 3): np.zeros((pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()), np.float32),
        (1, 3): np.zeros((pdi.get_num_axial_poss(1), pdi.get_num_tangential_poss()), np.float32),
    }
    store = ProjDataViewgrams(pdi, held)
    data = np.arange(held[(1, 3)].size, dtype=np.float32).reshape(1, *held[(1, 3)].shape)
    store.write_views(data, 1, [3])
    assert np.array_equal(held[(1, 3)], data[0])
    held[(0, 3)][2, 5] = 7.0
    assert store.read_views(0, [3])[0, 2, 5] == 7.0
    assert store.holds(0, 3) and not store.holds(0, 4)


def test_unheld_viewgrams_are_zeros_only_when_asked_and_never_writable():
    pdi = small_proj_data_info()
    held = {(0, 3): np.ones((pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()), np.float32)}
    with pytest.raises(GeometryError, match=r"segment 0, view 4\) is not held"):
        ProjDataViewgrams(pdi, held).read_views(0, [3, 4])
    got = ProjDataViewgrams(pdi, held, missing_as_zeros=True).read_views(0, [3, 4])
    assert np.all(got[0] == 1.0) and np.all(got[1] == 0.0)
    with pytest.raises(GeometryError, match="not held"):
        ProjDataViewgrams(pdi, held, missing_as_zeros=True).write_views(np.zeros((1,) + held[(0, 3)].shape), 0, [4])


@pytest.mark.parametrize(
    "bad, match",
    [
        ({(0, 99): np.zeros((31, 16), np.float32)}, "view 99 out of range"),
        ({(5, 0): np.zeros((31, 16), np.float32)}, "segment"),
        ({(0, 0): np.zeros((31, 16), np.float64)}, "float32 array of shape"),
        ({(0, 0): np.zeros((30, 16), np.float32)}, "float32 array of shape"),
        ({(0, 0): np.zeros((16, 31), np.float32).T}, "C-contiguous"),
    ],
)
def test_refuses_arrays_that_do_not_fit(bad, match):
    with pytest.raises(GeometryError, match=match):
        ProjDataViewgrams(small_proj_data_info(), bad)


def test_tof_viewgrams_are_one_array_per_timing_position():
    """TOF data: keys (segment, view, timing_pos) with STIR's timing position numbers; each
    timing position reads and writes its own array, unheld ones read as zeros on request."""
    pdi = small_tof_proj_data_info()
    shape = (pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss())
    lo, hi = pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num()
    held = {(0, 2, t): np.full(shape, 10.0 * t, np.float32) for t in (lo, hi)}
    store = ProjDataViewgrams(pdi, held, missing_as_zeros=True)
    assert store.read_views(0, [2], timing_pos=hi)[0, 0, 0] == 10.0 * hi
    assert store.read_views(0, [2], timing_pos=lo)[0, 0, 0] == 10.0 * lo
    assert np.all(store.read_views(0, [2], timing_pos=lo + 1) == 0.0)
    store.write_views(np.full((1, *shape), 3.0, np.float32), 0, [2], timing_pos=hi)
    assert np.all(held[(0, 2, hi)] == 3.0) and np.all(held[(0, 2, lo)] == 10.0 * lo)
    assert store.holds(0, 2, hi) and not store.holds(0, 2, lo + 1)
    with pytest.raises(GeometryError, match=r"timing position 0\) is not held"):
        store.write_views(np.zeros((1, *shape), np.float32), 0, [2], timing_pos=0)


@pytest.mark.parametrize(
    "key, match",
    [((0, 2), r"must be \(segment, view, timing_pos\)$"), ((0, 2, 5), r"timing_pos 5 out of range \[-1, 1\]")],
)
def test_tof_keys_name_a_timing_position_of_the_data(key, match):
    pdi = small_tof_proj_data_info()
    arr = np.zeros((pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()), np.float32)
    with pytest.raises(GeometryError, match=match):
        ProjDataViewgrams(pdi, {key: arr})
