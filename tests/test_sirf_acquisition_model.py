"""The SIRF-style acquisition model: y = S (G x + a) + b forward, G' S y backward.

Each identity is checked against the projector pair used directly (the same float32
operations in the same order), so agreement is to float32 rounding of the extra
element-wise steps (1e-6 relative); the adjointness test compares two float64-summed inner
products of float32 projections (1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.formats import ProjDataInMemory, VoxelsOnCartesianGrid
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSEM, PoissonLogLikelihood
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate
from stirgpu.sirf import (
    AcquisitionModel,
    AcquisitionModelUsingParallelproj,
    AcquisitionSensitivityModel,
    make_Poisson_loglikelihood,
)


@pytest.fixture(scope="module")
def setup():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    ph = demo_phantom(info)
    pp = ProjectorPair(backend="cpu")
    sim = simulate(pp, pdi, info, ph.activity(info), ph.mu_map(info), counts=5e5, seed=11)
    rng = np.random.default_rng(0)
    eff = ProjDataInMemory(pdi, fill=(1.0 / sim.normalisation.as_array()).astype(np.float32))
    a = ProjDataInMemory(pdi, fill=rng.random(sim.prompts.shape, dtype=np.float32))
    b = ProjDataInMemory(pdi, fill=rng.random(sim.prompts.shape, dtype=np.float32))
    x = VoxelsOnCartesianGrid(info, fill=sim.truth)
    return pdi, info, pp, sim, eff, a, b, x


def _model(setup, additive=True, background=True, sensitivity=True) -> AcquisitionModelUsingParallelproj:
    pdi, info, pp, sim, eff, a, b, x = setup
    am = AcquisitionModel(backend="cpu")
    if additive:
        am.set_additive_term(a)
    if background:
        am.set_background_term(b)
    if sensitivity:
        am.set_acquisition_sensitivity(AcquisitionSensitivityModel(eff))
    am.set_up(sim.prompts, x)
    return am


def _gx(setup, subset=(0, 1)) -> np.ndarray:
    pdi, info, pp, sim, eff, a, b, x = setup
    pp.set_up(pdi, info)
    out = ProjDataInMemory(pdi)
    pp.forward_project(out, x.array, subset_num=subset[0], num_subsets=subset[1])
    return out.as_array()


def test_forward_is_S_times_Gx_plus_a_plus_b(setup):
    """forward(x) = S (G x + a) + b, bin by bin."""
    pdi, info, pp, sim, eff, a, b, x = setup
    y = _model(setup).forward(x).as_array()
    expected = eff.as_array() * (_gx(setup) + a.as_array()) + b.as_array()
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6 * expected.max())


def test_backward_is_Gt_S_y(setup):
    """backward(y) = G' (S y)."""
    pdi, info, pp, sim, eff, a, b, x = setup
    got = _model(setup).backward(sim.prompts).array
    pp.set_up(pdi, info)
    sy = ProjDataInMemory(pdi, fill=eff.as_array() * sim.prompts.as_array())
    expected = pp.back_project(None, sy)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * expected.max())


def test_linear_part_and_backward_are_adjoint(setup):
    """<S G x, y> = <x, G' S y> for the linear part (float32 projections: 1e-5)."""
    pdi, info, pp, sim, eff, a, b, x = setup
    am = _model(setup)
    lin = am.get_linear_acquisition_model()
    assert lin.is_linear() and not am.is_linear()
    rng = np.random.default_rng(4)
    xr = VoxelsOnCartesianGrid(info, fill=rng.random(info.shape, dtype=np.float32))
    yr = ProjDataInMemory(pdi, fill=rng.random(sim.prompts.shape, dtype=np.float32))
    lhs = float(np.dot(lin.direct(xr).as_array().ravel().astype(np.float64), yr.as_array().ravel()))
    bty = am.adjoint(yr).array
    # the projector restricts images to STIR's cylindrical FOV in both directions
    from stirgpu.kernels import cylindrical_fov_mask

    xm = xr.array * cylindrical_fov_mask(info)
    rhs = float(np.dot(xm.ravel().astype(np.float64), bty.ravel()))
    assert abs(lhs - rhs) <= 1e-5 * abs(lhs)


def test_subsets(setup):
    """A subset forward projection holds the full one's values on the subset's views and 0
    elsewhere; subset backward projections add up to the full one (float32 sums: 1e-5)."""
    pdi, info, pp, sim, eff, a, b, x = setup
    am = _model(setup)
    full = am.forward(x).as_array()
    views = pdi.subset_views(1, 3)
    sub = am.forward(x, subset_num=1, num_subsets=3).as_array()
    np.testing.assert_allclose(sub[:, views, :], full[:, views, :], rtol=1e-6, atol=1e-6 * full.max())
    others = np.setdiff1d(np.arange(pdi.get_num_views()), views)
    assert not np.any(sub[:, others, :])
    am.num_subsets = 3
    total = sum(am.backward(sim.prompts, subset_num=k).array for k in range(3))
    whole = am.backward(sim.prompts, num_subsets=1).array
    assert np.abs(total - whole).max() <= 1e-5 * whole.max()
    am.subset_num = 2  # the defaults of later calls (chunks may be summed in another order: 1e-6)
    np.testing.assert_allclose(
        am.backward(sim.prompts).array,
        am.backward(sim.prompts, subset_num=2, num_subsets=3).array,
        rtol=1e-6,
        atol=1e-6 * whole.max(),
    )


def test_constant_term_and_linearity(setup):
    """get_constant_term() = S a + b; a model without a and b is linear."""
    pdi, info, pp, sim, eff, a, b, x = setup
    am = _model(setup)
    np.testing.assert_allclose(
        am.get_constant_term().as_array(), eff.as_array() * a.as_array() + b.as_array(), rtol=1e-6
    )
    assert _model(setup, additive=False, background=False).is_linear()
    assert not _model(setup, additive=False, background=True).is_linear()


def test_poisson_loglikelihood_of_the_model_matches_stir_convention(setup):
    """OSEM on make_Poisson_loglikelihood(y, am) with S = 1/f and a = STIR's additive sinogram is
    OSMAPOSL's reconstruction with those files (equal to float32 rounding of 1/(1/f): 1e-5); a
    background b is the same as STIR's additive a + b / S."""
    pdi, info, pp, sim, eff, a, b, x = setup
    am = AcquisitionModel(backend="cpu")
    am.set_acquisition_sensitivity(AcquisitionSensitivityModel(eff))
    am.set_additive_term(sim.additive)
    am.set_up(sim.prompts, x)
    stir = PoissonLogLikelihood(sim.prompts, additive=sim.additive, normalisation=sim.normalisation)
    x1 = (
        OSEM(
            make_Poisson_loglikelihood(sim.prompts, am),
            ProjectorPair(backend="cpu"),
            info,
            num_subsets=3,
            num_subiterations=3,
        )
        .reconstruct()
        .image
    )
    x2 = OSEM(stir, ProjectorPair(backend="cpu"), info, num_subsets=3, num_subiterations=3).reconstruct().image
    assert np.abs(x1 - x2).max() <= 1e-5 * x2.max()
    # background b (measured units): same as STIR's additive a + b f
    bg = ProjDataInMemory(pdi, fill=(sim.additive.as_array() / sim.normalisation.as_array()).astype(np.float32))
    am2 = AcquisitionModel(backend="cpu")
    am2.set_acquisition_sensitivity(AcquisitionSensitivityModel(eff))
    am2.set_background_term(bg)
    am2.set_up(sim.prompts, x)
    x3 = (
        OSEM(
            make_Poisson_loglikelihood(sim.prompts, am2),
            ProjectorPair(backend="cpu"),
            info,
            num_subsets=3,
            num_subiterations=3,
        )
        .reconstruct()
        .image
    )
    assert np.abs(x3 - x2).max() <= 1e-4 * x2.max()


def test_bad_use_is_refused(setup):
    """Calls before set_up, wrong shapes and wrong subset numbers raise stirgpu errors."""
    from stirgpu.errors import GeometryError, StirGpuError

    pdi, info, pp, sim, eff, a, b, x = setup
    with pytest.raises(StirGpuError, match="set_up"):
        AcquisitionModel().forward(x)
    am = _model(setup)
    with pytest.raises(GeometryError):
        am.forward(np.zeros((3, 4, 5), np.float32))
    with pytest.raises(StirGpuError, match="subset"):
        am.forward(x, subset_num=3, num_subsets=3)
    with pytest.raises(StirGpuError):
        am.set_acquisition_sensitivity(eff)
