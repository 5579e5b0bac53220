"""ProjDataViewgrams: the store contract with every viewgram held, and what it does with the
viewgrams it does not hold."""

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.formats import ProjDataViewgrams
from stirgpu.formats.testing import ProjDataContract, small_proj_data_info


def _all_viewgrams(pdi, value=0.0):
    return {
        (s, v): np.full((pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss()), value, np.float32)
        for s in pdi.segment_nums
        for v in range(pdi.get_num_views())
    }


class TestAllViewgramsHeld(ProjDataContract):
    @pytest.fixture
    def pdi(self):  # non-TOF only
        return small_proj_data_info()

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
