"""The pieces of STIR's scatter upsampling and tail fit on their definitions (the whole is
compared with STIR's utility in ``tests/stir_differential/test_scatter_fit_vs_stir.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.scatter import FitSettings, interpolate_segment_zero, inverse_ssrb, upsample_and_fit
from stirgpu.scatter.fit import _smoothed, scale_factors_per_sinogram
from stirgpu.scatter.interpolate import non_interleaved


def _pdi(max_ring_diff=0):
    return ProjDataInfo.construct(Scanner.from_name("ECAT 931"), 1, max_ring_diff, 32, 21)


def test_smoothing_repeats_edge_values():
    np.testing.assert_allclose(_smoothed(np.array([3.0, 0.0, 0.0, 6.0]), 1), [2.0, 1.0, 2.0, 4.0])
    np.testing.assert_array_equal(_smoothed(np.array([1.0, 5.0]), 0), [1.0, 5.0])


def test_constant_data_interpolate_to_the_same_constant():
    pdi = _pdi()
    segment = np.full((pdi.get_num_axial_poss(0), pdi.get_num_views(), pdi.get_num_tangential_poss()), 2.5, np.float32)
    out = interpolate_segment_zero(segment, pdi, pdi, remove_interleaving=False)
    np.testing.assert_allclose(out, 2.5, rtol=1e-6)


def test_same_geometry_without_interleaving_is_the_identity():
    pdi = _pdi()
    rng = np.random.default_rng(1)
    segment = rng.random((pdi.get_num_axial_poss(0), pdi.get_num_views(), pdi.get_num_tangential_poss()), np.float32)
    out = interpolate_segment_zero(segment, pdi, pdi, remove_interleaving=False)
    np.testing.assert_allclose(out, segment, rtol=1e-6)


def test_non_interleaved_keeps_bins_and_averages_neighbours():
    sino = np.arange(4 * 5, dtype=np.float32).reshape(4, 5)  # tangential -2..2
    out = non_interleaved(sino, -2)
    assert out.shape == (8, 5)
    assert (out[:, 0] == 0).all() and (out[:, -1] == 0).all()
    assert out[0, 2] == sino[0, 2]  # view 0, s 0: even parity, the old bin
    assert out[1, 2] == pytest.approx((sino[0, 2] + sino[1, 2] + sino[1, 1] + sino[1, 3]) / 4)
    assert out[7, 1] == sino[0, 3]  # view 7, s -1: past the last view, view 0 with s mirrored


def test_inverse_ssrb_interpolates_between_direct_sinograms():
    pdi = _pdi(1)
    direct = np.arange(pdi.get_num_axial_poss(0), dtype=np.float32)[:, None, None] * np.ones(
        (1, pdi.get_num_views(), pdi.get_num_tangential_poss()), np.float32
    )
    out = inverse_ssrb(direct, pdi)
    np.testing.assert_allclose(out.get_segment_by_sinogram(0), direct)
    # segment 1 sits half a ring between direct sinograms 0 and 1, 1 and 2, ...
    np.testing.assert_allclose(out.get_segment_by_sinogram(1)[:, 0, 0], np.arange(pdi.get_num_axial_poss(1)) + 0.5)


def test_fit_scales_to_the_data_in_the_tails():
    pdi = _pdi()
    estimate = ProjDataInMemory(pdi, fill=1.0)
    data = ProjDataInMemory(pdi, fill=3.0)
    mask = ProjDataInMemory(pdi)
    segment = mask.get_segment_by_view(0)
    segment[:, :, :3] = 1
    mask.set_segment_by_view(segment, 0)
    fit = upsample_and_fit(data, estimate, mask, FitSettings(max_scale_factor=2.5, remove_interleaving=False))
    np.testing.assert_allclose(fit.scale_factors[0], 2.5)
    np.testing.assert_allclose(fit.scatter.as_array(), 2.5, rtol=1e-6)


def test_empty_tails_fall_back_to_one():
    pdi = _pdi()
    estimate = ProjDataInMemory(pdi, fill=1.0)
    factors, defaulted = scale_factors_per_sinogram(ProjDataInMemory(pdi, fill=3.0), estimate, ProjDataInMemory(pdi))
    np.testing.assert_array_equal(factors[0], 1.0)
    assert len(defaulted) == pdi.get_num_axial_poss(0)


def test_inverse_ssrb_from_rebinned_direct_sinograms():
    """From STIR's SSRB geometry (one segment, half-ring axial steps) back to span-1 segments: each
    sinogram is the direct sinogram at its own m."""
    from stirgpu.sirf.rebin import ssrb_geometry

    pdi = _pdi(1)
    direct_pdi = ssrb_geometry(pdi, 3)
    n = direct_pdi.get_num_axial_poss(0)
    assert n == 2 * pdi.get_num_axial_poss(0) - 1
    direct = np.arange(n, dtype=np.float32)[:, None, None] * np.ones(
        (1, pdi.get_num_views(), pdi.get_num_tangential_poss()), np.float32
    )
    out = inverse_ssrb(direct, pdi, direct_pdi)
    np.testing.assert_array_equal(out.get_segment_by_sinogram(0)[:, 0, 0], np.arange(0, n, 2))
    np.testing.assert_array_equal(out.get_segment_by_sinogram(-1)[:, 0, 0], np.arange(1, n, 2))
