"""The contract every :class:`~stirgpu.formats.ProjData` store passes (zarr's habit).

Use it from a pytest module::

    from stirgpu.formats.testing import ProjDataContract

    class TestMyStore(ProjDataContract):
        def make_store(self, proj_data_info, tmp_path):
            return MyStore(proj_data_info)          # writable, values 0

Every test checks a store against a plain numpy model of the data in STIR's
``as_array()`` order, so a store that mixes up views, axial positions, segments,
timing positions or orders fails with the bin that is wrong.  Values are exact
(float32 in, float32 out): tolerances are zero.  The contract includes the abilities
contract (:mod:`.testing_abilities`: the store's declared abilities match what it does), which
stores that are not writable pass on their own.  Needs pytest (imported here, so
``import stirgpu.formats`` never imports it).
"""

from __future__ import annotations

import numpy as np
import pytest

from ..errors import GeometryError
from ..geometry import ProjDataInfo, Scanner
from .projdata import ProjData
from .projdata_memory import ProjDataInMemory
from .testing_abilities import StoreAbilitiesContract

__all__ = ["ProjDataContract", "small_proj_data_info", "small_tof_proj_data_info", "reference_segment"]


def small_proj_data_info() -> ProjDataInfo:
    """ECAT 953, span 3 (segments -1, 0, +1 with 27/31/27 axial positions), 12 views
    (mashed), 16 tangential positions: small, but with unequal segments."""
    return ProjDataInfo.construct(
        Scanner.from_name("ECAT 953"), span=3, max_ring_diff=4, num_views=12, num_tangential_poss=16
    )


def small_tof_proj_data_info() -> ProjDataInfo:
    """A 4-ring user-defined TOF scanner, span 1 (5 segments), 8 views, 9 tangential
    positions, 3 timing positions."""
    sc = Scanner(
        name="contract TOF",
        num_rings=4,
        num_detectors_per_ring=32,
        inner_ring_radius=100.0,
        average_depth_of_interaction=5.0,
        ring_spacing=4.0,
        max_num_timing_poss=3,
        size_of_timing_pos=100.0,
        timing_resolution=300.0,
    )
    return ProjDataInfo(
        sc,
        [-2, -1, 0, 1, 2],
        [-2, -1, 0, 1, 2],
        num_views=8,
        num_tangential_poss=9,
        arc_corrected=False,
        num_tof_poss=3,
    )


def reference_segment(ref: np.ndarray, pdi: ProjDataInfo, segment: int, timing_pos: int = 0) -> np.ndarray:
    """(axial, view, tangential) block of ``segment`` inside an ``as_array()``-ordered array
    (segments 0, +1, -1, +2, -2, ... stacked along the sinogram axis; TOF axis first when
    there is more than one timing position, numbered from -(n // 2))."""
    order = [0]
    k = 1
    while len(order) < pdi.get_num_segments():
        order += [s for s in (k, -k) if pdi.get_min_segment_num() <= s <= pdi.get_max_segment_num()]
        k += 1
    start = sum(pdi.get_num_axial_poss(s) for s in order[: order.index(segment)])
    block = ref if pdi.get_num_tof_poss() == 1 else ref[timing_pos + pdi.get_num_tof_poss() // 2]
    return block[start : start + pdi.get_num_axial_poss(segment)]


def _random_like(store: ProjData, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(store.shape).astype(np.float32)


class ProjDataContract(StoreAbilitiesContract):
    """Tests every writable store must pass; subclass (named ``Test...``) and define
    :meth:`make_store`.  Fixtures ``pdi`` (non-TOF and TOF; override it for a non-TOF store)
    and ``store`` come from :class:`~.testing_abilities.StoreAbilitiesContract`."""

    def make_store(self, proj_data_info: ProjDataInfo, tmp_path) -> ProjData:  # pragma: no cover
        """A new, writable store of that geometry whose values are all 0."""
        raise NotImplementedError

    @pytest.fixture
    def filled(self, store):
        """(store filled with random values, the same values as an as_array()-ordered array)."""
        ref = _random_like(store, 1)
        store.fill(ref)
        return store, ref

    @staticmethod
    def _timing_poss(pdi):
        n = pdi.get_num_tof_poss()
        return range(-(n // 2), -(n // 2) + n)

    # -- geometry ------------------------------------------------------------------------
    def test_geometry_accessors(self, store, pdi):
        """The STIR-named accessors report the geometry the store was made with."""
        assert store.get_proj_data_info() == pdi
        assert store.get_min_segment_num() == pdi.get_min_segment_num()
        assert store.get_max_segment_num() == pdi.get_max_segment_num()
        assert store.get_num_segments() == pdi.get_num_segments()
        assert store.get_num_views() == pdi.get_num_views()
        assert (store.get_min_view_num(), store.get_max_view_num()) == (0, pdi.get_num_views() - 1)
        assert store.get_num_tangential_poss() == pdi.get_num_tangential_poss()
        assert store.get_min_tangential_pos_num() == pdi.get_min_tangential_pos_num()
        assert store.get_max_tangential_pos_num() == pdi.get_max_tangential_pos_num()
        assert store.get_num_tof_poss() == pdi.get_num_tof_poss()
        for s in pdi.segment_nums:
            assert store.get_num_axial_poss(s) == pdi.get_num_axial_poss(s)

    def test_new_store_is_zero(self, store):
        """A new store holds zeros (STIR's ProjDataInMemory / a new file)."""
        a = store.as_array()
        assert a.shape == store.shape and a.dtype == np.float32
        assert not np.any(a)

    def test_as_array_shape_drops_tof_axis_like_stir(self, store, pdi):
        """as_array is (sinograms, views, tangential), with a leading TOF axis only for TOF data."""
        sino = (pdi.get_num_axial_poss_total(), pdi.get_num_views(), pdi.get_num_tangential_poss())
        expected = sino if pdi.get_num_tof_poss() == 1 else (pdi.get_num_tof_poss(),) + sino
        assert store.as_array().shape == expected

    # -- whole-data round trips ----------------------------------------------------------
    def test_fill_array_then_as_array_is_identity(self, filled):
        """fill(array) then as_array() gives the array back bit for bit."""
        store, ref = filled
        np.testing.assert_array_equal(store.as_array(), ref)

    def test_fill_scalar(self, store):
        store.fill(2.5)
        assert np.all(store.as_array() == np.float32(2.5))

    def test_fill_from_other_proj_data(self, filled, pdi):
        """fill(other ProjData) copies every bin (through read_views/write_views chunks)."""
        store, ref = filled
        mem = ProjDataInMemory(pdi)
        mem.fill(store)
        np.testing.assert_array_equal(mem.as_array(), ref)
        other = ProjDataInMemory(pdi, fill=-ref)
        store.fill(other)
        np.testing.assert_array_equal(store.as_array(), -ref)

    # -- STIR getters against the model --------------------------------------------------
    def test_segments_match_model(self, filled, pdi):
        """get_segment_by_sinogram / _by_view are the model's segment blocks (and transposes)."""
        store, ref = filled
        for t in self._timing_poss(pdi):
            for s in pdi.segment_nums:
                blk = reference_segment(ref, pdi, s, t)
                np.testing.assert_array_equal(store.get_segment_by_sinogram(s, timing_pos=t), blk)
                np.testing.assert_array_equal(store.get_segment_by_view(s, timing_pos=t), blk.transpose(1, 0, 2))

    def test_viewgrams_and_sinograms_match_model(self, filled, pdi):
        """Every viewgram is blk[:, v, :] and every sinogram blk[a] of the model."""
        store, ref = filled
        for t in self._timing_poss(pdi):
            for s in pdi.segment_nums:
                blk = reference_segment(ref, pdi, s, t)
                for v in range(pdi.get_num_views()):
                    g = store.get_viewgram(v, s, timing_pos=t)
                    assert g.dtype == np.float32
                    np.testing.assert_array_equal(g, blk[:, v, :])
                for a in range(pdi.get_num_axial_poss(s)):
                    np.testing.assert_array_equal(store.get_sinogram(a, s, timing_pos=t), blk[a])

    # -- setters -------------------------------------------------------------------------
    def test_set_viewgram_changes_only_that_view(self, filled, pdi):
        store, ref = filled
        s, v = pdi.get_max_segment_num(), pdi.get_num_views() - 2
        t = self._timing_poss(pdi)[-1]
        g = np.full((pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss()), 7.0, np.float32)
        store.set_viewgram(g, v, s, timing_pos=t)
        reference_segment(ref, pdi, s, t)[:, v, :] = g
        np.testing.assert_array_equal(store.as_array(), ref)

    def test_set_sinogram_changes_only_that_sinogram(self, filled, pdi):
        store, ref = filled
        s, a = pdi.get_min_segment_num(), 1
        t = self._timing_poss(pdi)[0]
        g = np.arange(pdi.get_num_views() * pdi.get_num_tangential_poss(), dtype=np.float32).reshape(
            pdi.get_num_views(), pdi.get_num_tangential_poss()
        )
        store.set_sinogram(g, a, s, timing_pos=t)
        reference_segment(ref, pdi, s, t)[a] = g
        np.testing.assert_array_equal(store.as_array(), ref)

    def test_set_segment_by_view_and_by_sinogram(self, filled, pdi):
        store, ref = filled
        rng = np.random.default_rng(7)
        for s in pdi.segment_nums:
            blk = reference_segment(ref, pdi, s, 0)
            new = rng.standard_normal(blk.shape).astype(np.float32)
            if s % 2:
                store.set_segment_by_sinogram(new, s)
            else:
                store.set_segment_by_view(new.transpose(1, 0, 2).copy(), s)
            blk[...] = new
        np.testing.assert_array_equal(store.as_array(), ref)

    # -- chunk access --------------------------------------------------------------------
    def test_read_views_any_order_and_subsets(self, filled, pdi):
        """read_views returns exactly the listed views, in the listed order: STIR subsets
        (strided), unsorted lists, runs, a single view, no view."""
        store, ref = filled
        nv = pdi.get_num_views()
        view_sets = [pdi.subset_views(1, 4), [nv - 1, 0, 1, 2, 5], range(2, nv), [3], []]
        for t in self._timing_poss(pdi):
            for s in pdi.segment_nums:
                blk = reference_segment(ref, pdi, s, t)
                for views in view_sets:
                    got = store.read_views(s, views, timing_pos=t)
                    np.testing.assert_array_equal(got, blk[:, list(views), :].transpose(1, 0, 2))

    def test_prefetch_views_is_only_a_hint(self, filled, pdi):
        """prefetch_views changes no value, and checks its arguments as read_views does."""
        store, ref = filled
        for t in self._timing_poss(pdi):
            for s in pdi.segment_nums:
                store.prefetch_views(s, pdi.subset_views(1, 3), timing_pos=t)
        np.testing.assert_array_equal(store.as_array(), ref)
        with pytest.raises(GeometryError):
            store.prefetch_views(0, [pdi.get_num_views()])
        with pytest.raises(GeometryError):
            store.prefetch_views(pdi.get_max_segment_num() + 1, [0])

    def test_read_views_fills_out_in_place(self, filled, pdi):
        """A caller's buffer (e.g. pinned memory) is filled and returned, not replaced."""
        store, ref = filled
        s = 0
        views = pdi.subset_views(0, 3)
        out = np.full((len(views), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss()), np.nan, dtype=np.float32)
        got = store.read_views(s, views, out=out)
        assert got is out
        np.testing.assert_array_equal(out, reference_segment(ref, pdi, s)[:, views, :].transpose(1, 0, 2))

    def test_write_views_subset(self, filled, pdi):
        """write_views stores exactly the listed views and leaves the others: an unsorted
        short list, and a STIR subset (strided: every view its own run)."""
        store, ref = filled
        t = self._timing_poss(pdi)[-1]
        rng = np.random.default_rng(3)
        for s, views in ((pdi.get_max_segment_num(), [4, 1, 2]), (pdi.get_min_segment_num(), pdi.subset_views(2, 3))):
            data = rng.standard_normal((len(views), pdi.get_num_axial_poss(s), pdi.get_num_tangential_poss())).astype(
                np.float32
            )
            store.write_views(data, s, views, timing_pos=t)
            reference_segment(ref, pdi, s, t)[:, list(views), :] = data.transpose(1, 0, 2)
            np.testing.assert_array_equal(store.as_array(), ref)

    def test_timing_positions_are_independent(self, store, pdi):
        """Writing one timing position leaves the others untouched."""
        for t in self._timing_poss(pdi):
            store.set_segment_by_view(
                np.full(
                    (pdi.get_num_views(), pdi.get_num_axial_poss(0), pdi.get_num_tangential_poss()), t + 10, np.float32
                ),
                0,
                t,
            )
        for t in self._timing_poss(pdi):
            assert np.all(store.get_segment_by_sinogram(0, timing_pos=t) == t + 10)

    # -- bad requests --------------------------------------------------------------------
    def test_out_of_range_requests_are_geometry_errors(self, store, pdi):
        """Asking outside the geometry raises GeometryError naming what is wrong."""
        bad_seg = pdi.get_max_segment_num() + 1
        with pytest.raises(GeometryError, match="segment"):
            store.get_viewgram(0, bad_seg)
        with pytest.raises(GeometryError, match="views"):
            store.read_views(0, [pdi.get_num_views()])
        with pytest.raises(GeometryError, match="views"):
            store.read_views(0, [-1])
        with pytest.raises(GeometryError, match="timing_pos"):
            store.get_viewgram(0, 0, timing_pos=store.get_max_tof_pos_num() + 1)
        with pytest.raises(GeometryError, match="axial"):
            store.get_sinogram(pdi.get_num_axial_poss(0), 0)

    def test_wrong_shapes_are_geometry_errors(self, store, pdi):
        na, nv, nt = pdi.get_num_axial_poss(0), pdi.get_num_views(), pdi.get_num_tangential_poss()
        with pytest.raises(GeometryError, match="shape"):
            store.set_viewgram(np.zeros((na, nt + 1), np.float32), 0, 0)
        with pytest.raises(GeometryError, match="shape"):
            store.write_views(np.zeros((2, na, nt), np.float32), 0, [1])
        with pytest.raises(GeometryError, match="out"):
            store.read_views(0, [1], out=np.zeros((1, na, nt), np.float64))
        with pytest.raises(GeometryError, match="shape"):
            store.fill(np.zeros((nv, nt), np.float32))
        assert not np.any(store.as_array())  # nothing was written by the refused calls
