"""OSMAPOSL's objective function with TOF data and non-TOF inputs (STIR 6.5's rules, checked
against STIR's OSMAPOSL in ``stir_differential/test_osmaposl_tof_mixed_vs_stir.py``): a non-TOF
normalisation applies to every timing position, the sensitivity is then back projected without
TOF unless asked otherwise, and additive sinograms must have the data's TOF sampling."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import GeometryError
from stirgpu.formats import ProjDataInMemory
from stirgpu.geometry import ProjDataInfo, Scanner
from stirgpu.kernels.joseph.lors import stir_default_image_info
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import PoissonLogLikelihood
from stirgpu.recon.objective import geometry_problem, sensitivity_uses_same_projector
from stirgpu.recon.views import EndPlanes, TofBroadcast


@pytest.fixture(scope="module")
def case():
    pdi = ProjDataInfo.construct(Scanner.from_name("GE Discovery MI 4 rings"), 1, 1, 4, 21, tof_mash_factor=29)
    info = stir_default_image_info(pdi)
    rng = np.random.default_rng(3)
    non_tof = pdi.create_non_tof_clone()
    y = ProjDataInMemory(pdi)
    y.fill(rng.poisson(2.0, y.shape).astype(np.float32))
    norm = ProjDataInMemory(non_tof)
    norm.fill(rng.uniform(1.0, 3.0, norm.shape).astype(np.float32))
    return pdi, info, y, norm


def _pair(pdi, info):
    pair = ProjectorPair(backend="cpu", max_views_per_chunk=2)
    pair.set_up(pdi, info)
    return pair


def test_tof_broadcast_reads_the_non_tof_bin_at_every_timing_position(case):
    pdi, _, _, norm = case
    view = TofBroadcast(norm, pdi)
    assert view.get_proj_data_info() == pdi
    for s in pdi.segment_nums:
        expected = norm.read_views(s, range(4))
        for t in range(pdi.get_min_tof_pos_num(), pdi.get_max_tof_pos_num() + 1):
            assert np.array_equal(view.read_views(s, range(4), timing_pos=t), expected)
    with pytest.raises(GeometryError, match="non-TOF geometry"):
        TofBroadcast(ProjDataInMemory(pdi), pdi)
    with pytest.raises(GeometryError, match="non-TOF geometry"):
        TofBroadcast(norm, pdi.reduce_segment_range(0, 0))


def test_which_inputs_stir_takes_with_tof_data(case):
    """Only a non-TOF normalisation may differ from TOF data; every other TOF mismatch is a
    problem naming what STIR 6.5 does with it."""
    pdi = case[0]
    non_tof = pdi.create_non_tof_clone()
    other_mash = pdi.replace(tof_mash_factor=13)
    assert geometry_problem("normalisation", pdi, pdi) is None
    assert geometry_problem("normalisation", non_tof, pdi) is None
    assert "Viewgram constructed with out-of-range indices" in geometry_problem("additive", non_tof, pdi)
    assert "timing position 0 alone" in geometry_problem("additive", pdi, non_tof)
    assert "incompatible projection data" in geometry_problem("normalisation", pdi, non_tof)
    for name in ("additive", "normalisation"):
        assert "TOF mashing factor 13" in geometry_problem(name, other_mash, pdi)
        assert "geometry differs" in geometry_problem(name, non_tof.reduce_segment_range(0, 0), pdi)


def test_sensitivity_projector_rule(case):
    pdi, _, _, _ = case
    non_tof = pdi.create_non_tof_clone()
    assert sensitivity_uses_same_projector(non_tof, None, False)
    assert not sensitivity_uses_same_projector(pdi, None, False)
    assert not sensitivity_uses_same_projector(pdi, non_tof, False)
    assert sensitivity_uses_same_projector(pdi, pdi, False)  # a TOF normalisation: STIR sets use_tofsens
    assert sensitivity_uses_same_projector(pdi, non_tof, True)


def test_non_tof_normalisation_with_tof_data(case):
    """The factors of every timing position are the non-TOF ones; the sensitivity is the non-TOF
    back projection of 1/f (bit for bit that of a non-TOF projector), after which the projector is
    set up on the TOF data again."""
    pdi, info, y, norm = case
    objective = PoissonLogLikelihood(y, normalisation=norm)
    assert not objective.sensitivity_uses_same_projector
    assert objective.multiplicative.get_proj_data_info() == pdi
    assert objective.sensitivity_proj_data_info == pdi.create_non_tof_clone()
    pair = _pair(pdi, info)
    objective.set_up(pair, info)
    got = np.asarray(objective.subset_sensitivity(pair, np.zeros(info.shape, np.float32), 1, 2))
    assert pair.get_proj_data_info() == pdi
    expected = _pair(pdi.create_non_tof_clone(), info).sensitivity(None, 1, 2, multiplicative=norm)
    assert np.array_equal(got, np.asarray(expected))


def test_tof_sensitivities_when_asked(case):
    """``use_tof_sensitivities``: the back projection over all timing positions of the broadcast
    factors, which differs from the non-TOF one by more than float32 rounding."""
    pdi, info, y, norm = case
    objective = PoissonLogLikelihood(y, normalisation=norm, use_tof_sensitivities=True)
    assert objective.sensitivity_uses_same_projector
    pair = _pair(pdi, info)
    objective.set_up(pair, info)
    got = np.asarray(objective.subset_sensitivity(pair, np.zeros(info.shape, np.float32), 0, 1))
    expected = np.asarray(_pair(pdi, info).sensitivity(None, 0, 1, multiplicative=TofBroadcast(norm, pdi)))
    assert np.array_equal(got, expected)
    non_tof = np.asarray(_pair(pdi.create_non_tof_clone(), info).sensitivity(None, 0, 1, multiplicative=norm))
    assert np.abs(got - non_tof).max() > 1e-6 * non_tof.max()


def test_zero_end_planes_and_segments_with_a_non_tof_sensitivity(case):
    """``zero end planes of segment 0`` and ``maximum absolute segment number`` reach the non-TOF
    factors of the sensitivity as they reach the TOF ones."""
    pdi, info, y, norm = case
    objective = PoissonLogLikelihood(
        y, normalisation=norm, zero_end_planes_of_segment_0=True, max_segment_num_to_process=0
    )
    f = objective.sensitivity_multiplicative
    assert isinstance(f, EndPlanes)
    assert f.get_proj_data_info() == pdi.create_non_tof_clone().reduce_segment_range(0, 0)
    assert not np.any(f.read_views(0, range(4))[:, [0, -1], :])
    pair = _pair(pdi.reduce_segment_range(0, 0), info)
    objective.set_up(pair, info)
    got = np.asarray(objective.subset_sensitivity(pair, np.zeros(info.shape, np.float32), 0, 1))
    assert np.array_equal(
        got, np.asarray(_pair(f.get_proj_data_info(), info).sensitivity(None, 0, 1, multiplicative=f))
    )


def test_refused_inputs(case):
    pdi, _, y, norm = case
    with pytest.raises(GeometryError, match="additive: the additive sinogram is non-TOF"):
        PoissonLogLikelihood(y, additive=norm)
    y_non_tof = ProjDataInMemory(pdi.create_non_tof_clone())
    with pytest.raises(GeometryError, match="additive: the additive sinogram has 13 TOF timing positions"):
        PoissonLogLikelihood(y_non_tof, additive=y)
    with pytest.raises(GeometryError, match="normalisation: the normalisation has 13"):
        PoissonLogLikelihood(y_non_tof, normalisation=y)
