"""Projecting into and from objects with the real ``stir`` module's API (fakes here: the tests
must run without STIR).  The fakes follow STIR's Python conventions: viewgrams have
``as_array()`` and ``fill()`` (a numpy array, a scalar or an iterator), ``get_viewgram(view, segment)``, coordinates are
``BasicCoordinate`` s indexed 1..3, and ProjDataInfo exposes ring differences per segment.
Numbers must be those of the stirgpu stores (same plans, same kernels): bitwise, except CUDA
back projections, whose atomic additions vary in order (float32 summation order)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_back, phantom, random_proj_data, small_geometry

from stirgpu.errors import StirGpuError
from stirgpu.formats import ProjDataInMemory
from stirgpu.interop import StirProjDataAdapter, image_info_of, proj_data_info_from_stir
from stirgpu.projectors import ProjectorPair


def stir_fill(target: np.ndarray, arg) -> None:
    """STIR's ``fill``: a scalar, a numpy array of the same size, or an iterator."""
    if np.isscalar(arg):
        target[...] = arg
    elif isinstance(arg, np.ndarray):
        if arg.size != target.size:
            raise RuntimeError("Array.fill needs to be called with numpy array of correct size")
        target[...] = arg.reshape(target.shape)
    else:
        target[...] = np.fromiter(arg, dtype=np.float32).reshape(target.shape)


class Coord:
    """STIR's BasicCoordinate<3>: 1-based indexing."""

    def __init__(self, z, y, x):
        self._v = (z, y, x)

    def __getitem__(self, i):
        if not 1 <= i <= 3:
            raise IndexError(i)
        return self._v[i - 1]


class FakeViewgram:
    def __init__(self, view, segment, values):
        self.view, self.segment = view, segment
        self._a = np.array(values, dtype=np.float32)

    def as_array(self):
        return self._a.copy()

    def fill(self, values):
        stir_fill(self._a, values)

    def get_view_num(self):
        return self.view

    def get_segment_num(self):
        return self.segment


class FakeScanner:
    def __init__(self, sc):
        self._sc = sc

    def __getattr__(self, name):  # get_num_rings, ... as stir.Scanner names them
        return getattr(self._sc, name)


class FakeProjDataInfoCylindricalNoArcCorr:
    def __init__(self, pdi):
        self._p = pdi

    def get_scanner(self):
        return FakeScanner(self._p.get_scanner())

    def get_angular_increment(self):
        return np.pi / self._p.get_scanner().num_detectors_per_ring

    def __getattr__(self, name):
        if name in (
            "get_min_segment_num",
            "get_max_segment_num",
            "get_min_ring_difference",
            "get_max_ring_difference",
            "get_num_views",
            "get_num_tangential_poss",
            "get_min_tangential_pos_num",
            "get_num_tof_poss",
        ):
            return getattr(self._p, name)
        raise AttributeError(name)


class FakeStirProjData:
    """What a ``stir.ProjDataInMemory`` offers to Python (the calls the adapter uses)."""

    def __init__(self, pdi):
        self._pdi = pdi
        self._data = {
            s: np.zeros((pdi.get_num_views(), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss()), np.float32)
            for s in pdi.segment_nums
        }
        self.calls = 0

    def get_proj_data_info(self):
        return FakeProjDataInfoCylindricalNoArcCorr(self._pdi)

    def get_viewgram(self, view, segment, make_num_tangential_poss_odd=False, timing_pos=0):
        self.calls += 1
        return FakeViewgram(view, segment, self._data[segment][view])

    def get_empty_viewgram(self, view, segment):
        return FakeViewgram(view, segment, np.zeros_like(self._data[segment][view]))

    def set_viewgram(self, vg):
        self.calls += 1
        self._data[vg.get_segment_num()][vg.get_view_num()] = vg.as_array()


class FakeStirImage:
    """A ``stir.FloatVoxelsOnCartesianGrid``: values through as_array()/fill(), geometry as
    1-based coordinates."""

    def __init__(self, info, values=None):
        self._info = info
        self._a = np.zeros(info.shape, np.float32) if values is None else np.array(values, np.float32)

    def as_array(self):
        return self._a.copy()

    def fill(self, values):
        stir_fill(self._a, values)

    def get_voxel_size(self):
        return Coord(*self._info.voxel_size)

    def get_origin(self):
        return Coord(*self._info.origin)

    def get_lengths(self):
        return Coord(*self._info.shape)

    def get_min_indices(self):
        return Coord(*self._info.min_indices)


def test_geometry_converts_from_stir_objects():
    """proj_data_info_from_stir and image_info_of read STIR's accessors (1-based coordinates)
    and give geometry equal to the original."""
    pdi, info = small_geometry()
    assert proj_data_info_from_stir(FakeProjDataInfoCylindricalNoArcCorr(pdi)) == pdi
    assert image_info_of(FakeStirImage(info)) == info


def test_forward_into_stir_proj_data(backend):
    """Forward projecting into a STIR ProjData gives exactly the numbers written into a stirgpu
    store, one set_viewgram per (segment, view)."""
    pdi, info = small_geometry()
    img = phantom(info)
    pp = ProjectorPair(backend=backend, devices=[0], restrict_to_cylindrical_fov=False)
    pp.set_up(pdi, info)
    ref = ProjDataInMemory(pdi)
    pp.forward_project(ref, img)
    fake = FakeStirProjData(pdi)
    pp.forward_project(fake, FakeStirImage(info, img))
    assert fake.calls == pdi.get_num_segments() * pdi.get_num_views()
    for s in pdi.segment_nums:
        assert np.array_equal(fake._data[s], ref.read_views(s, range(24)))


def test_back_from_stir_proj_data_into_stir_image(backend):
    """Back projecting a STIR ProjData into a STIR image equals the stirgpu-store result; the
    subset reads only its views; auto set-up works from the STIR objects' geometry."""
    pdi, info = small_geometry()
    data = random_proj_data(pdi)
    fake = FakeStirProjData(pdi)
    for s in pdi.segment_nums:
        fake._data[s][...] = data.read_views(s, range(24))
    pp = ProjectorPair(backend=backend, devices=[0])
    out = FakeStirImage(info)
    pp.back_project(out, StirProjDataAdapter(fake), subset_num=1, num_subsets=3)
    assert fake.calls == pdi.get_num_segments() * 8
    ref = pp.back_project(None, data, subset_num=1, num_subsets=3)
    assert_same_back(out.as_array(), ref, backend)


def test_fused_ratio_with_stir_inputs():
    """forward_back_ratio accepts STIR ProjData for measured data and factors."""
    pdi, info = small_geometry()
    y, f = random_proj_data(pdi, 3), random_proj_data(pdi, 4, low=1.0)
    fy, ff = FakeStirProjData(pdi), FakeStirProjData(pdi)
    for s in pdi.segment_nums:
        fy._data[s][...] = y.read_views(s, range(24))
        ff._data[s][...] = f.read_views(s, range(24))
    pp = ProjectorPair(backend="cpu", devices=[0])
    pp.set_up(pdi, info)
    img = phantom(info)
    assert np.array_equal(
        pp.forward_back_ratio(img, fy, multiplicative=ff), pp.forward_back_ratio(img, y, multiplicative=f)
    )


def test_unknown_objects_are_refused():
    """Something that is neither a store nor STIR-like is refused with the argument's name."""
    pdi, info = small_geometry()
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    with pytest.raises(StirGpuError, match="proj_data_out"):
        pp.forward_project(object(), phantom(info))


def test_adapter_checks_shapes():
    """A STIR object whose viewgrams do not match the geometry is a clear error."""
    pdi, _ = small_geometry()
    fake = FakeStirProjData(pdi)
    fake._data[0] = np.zeros((24, 3, 32), np.float32)
    with pytest.raises(StirGpuError, match="viewgram"):
        StirProjDataAdapter(fake).read_views(0, [1])
    assert StirProjDataAdapter(fake, proj_data_info=pdi).get_proj_data_info() is pdi
