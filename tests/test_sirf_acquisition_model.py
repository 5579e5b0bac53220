"""SIRF's acquisition model on stirgpu: y = S (G x + a) + b forward, G' S y backward.

Each identity is checked against the projector pair used directly (the same float32 operations
in the same order, so to float32 rounding of the element-wise steps: 1e-6 relative); the
adjointness test compares two float64-summed inner products of float32 projections (1e-5).
Subsets follow SIRF's rule, read from its source (``PETAcquisitionModel::forward``): the
projection of subset k (views ``v % n == k``) into data zeroed first, then a, S and b applied to
all views, so the other views hold ``S a + b``; ``tests/test_sirf_stir.py`` checks the same
against STIR's own subset projection.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.kernels import cylindrical_fov_mask
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import PoissonLogLikelihood
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate
from stirgpu.sirf.errors import ConstModelError, InputError, NotSupported


@pytest.fixture(scope="module")
def setup():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    ph = demo_phantom(info)
    pp = ProjectorPair(backend="cpu")
    sim = simulate(pp, pdi, info, ph.activity(info), ph.mu_map(info), counts=5e5, seed=11)
    rng = np.random.default_rng(0)
    shape = sim.prompts.shape
    eff = (1.0 / sim.normalisation.as_array()).astype(np.float32)
    a = rng.random(shape, dtype=np.float32)
    b = rng.random(shape, dtype=np.float32)
    return dict(pdi=pdi, info=info, pp=pp, sim=sim, eff=eff, a=a, b=b, mu=ph.mu_map(info), truth=sim.truth)


def _acq(setup, values) -> pet.AcquisitionData:
    return pet.AcquisitionData(ProjDataInMemory(setup["pdi"], fill=values))


def _img(setup, values) -> pet.ImageData:
    return pet.ImageData.from_array(np.ascontiguousarray(values, dtype=np.float32), setup["info"])


def _model(setup, additive=True, background=True, sensitivity=True):
    am = pet.AcquisitionModelUsingParallelproj(backend="cpu")
    if additive:
        am.set_additive_term(_acq(setup, setup["a"]))
    if background:
        am.set_background_term(_acq(setup, setup["b"]))
    if sensitivity:
        am.set_acquisition_sensitivity(pet.AcquisitionSensitivityModel(_acq(setup, setup["eff"])))
    am.set_up(_acq(setup, setup["sim"].prompts.as_array()), _img(setup, setup["truth"]))
    return am


def _gx(setup, x, subset=(0, 1)) -> np.ndarray:
    pp = setup["pp"]
    pp.set_up(setup["pdi"], setup["info"])
    out = ProjDataInMemory(setup["pdi"])
    pp.forward_project(out, x, subset_num=subset[0], num_subsets=subset[1])
    return out.as_array()[None]


def _f(setup) -> np.ndarray:
    """SIRF's normalisation factors f = 1 / max(e, 1e-20) (float64, then float32): S = 1 / f."""
    f = (1.0 / np.maximum(setup["eff"], np.float32(1e-20)).astype(np.float64)).astype(np.float32)
    return f[None]


def test_forward_is_S_times_Gx_plus_a_plus_b(setup):
    """forward(x) = (G x + a) / f + b, bin by bin, in SIRF's order of operations."""
    y = _model(setup).forward(_img(setup, setup["truth"])).as_array()
    expected = (_gx(setup, setup["truth"]) + setup["a"][None]) / _f(setup) + setup["b"][None]
    np.testing.assert_array_equal(y, expected)


def test_backward_is_Gt_S_y(setup):
    """backward(y) = G' (y / f)."""
    y = setup["sim"].prompts.as_array()
    got = _model(setup).backward(_acq(setup, y)).as_array()
    pp = setup["pp"]
    pp.set_up(setup["pdi"], setup["info"])
    expected = pp.back_project(None, ProjDataInMemory(setup["pdi"], fill=y / _f(setup)[0]))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * expected.max())


def test_linear_part_and_its_adjoint(setup):
    """<S G x, y> = <x, G' S y> for the linear part (float32 projections: 1e-5); direct and adjoint
    are refused on the affine model, as in SIRF."""
    am = _model(setup)
    lin = am.get_linear_acquisition_model()
    assert lin.is_linear() and not am.is_linear() and am.is_affine()
    rng = np.random.default_rng(4)
    x = _img(setup, rng.random(setup["info"].shape, dtype=np.float32))
    y = _acq(setup, rng.random(setup["sim"].prompts.shape, dtype=np.float32))
    lhs = lin.direct(x).dot(y)
    xm = x.get_uniform_copy(0).fill(x.as_array() * cylindrical_fov_mask(setup["info"]))  # the FOV restriction
    rhs = xm.dot(lin.adjoint(y))
    assert abs(float(lhs) - float(rhs)) <= 1e-5 * abs(float(lhs))
    with pytest.raises(pet.error, match="not linear"):
        am.direct(x)
    with pytest.raises(pet.error, match="not linear"):
        am.adjoint(y)
    with pytest.raises(ConstModelError):
        lin.set_additive_term(y)
    with pytest.raises(RuntimeError):
        lin.set_up(y, x)
    # zero terms make a model linear again (SIRF tests their norms)
    zero = _model(setup, sensitivity=False)
    zero.set_additive_term(y * 0)
    zero.set_background_term(y * 0)
    assert zero.is_linear()


def test_subsets_follow_sirf(setup):
    """Subset k of n: the projected views are v % n == k and hold S (G x + a) + b; the others hold
    S a + b (new data, or ``out``: overwritten there too); a subset backward projection reads its
    views only, and subsets add up to the whole."""
    am = _model(setup)
    x = _img(setup, setup["truth"])
    k, n = 1, 3
    views = np.arange(setup["pdi"].get_num_views()) % n == k
    full = am.forward(x).as_array()
    sub = am.forward(x, subset_num=k, num_subsets=n).as_array()
    np.testing.assert_array_equal(sub[:, :, views], full[:, :, views])
    constant = am.get_constant_term().as_array()
    np.testing.assert_allclose(sub[:, :, ~views], constant[:, :, ~views], rtol=1e-6)
    np.testing.assert_array_equal(constant, setup["a"][None] / _f(setup) + setup["b"][None])
    out = am.forward(x).get_uniform_copy(-5.0)
    assert am.forward(x, k, n, out=out) is None
    np.testing.assert_array_equal(out.as_array(), sub)
    # without terms the other views are 0 (STIR zeroes them)
    plain = _model(setup, additive=False, background=False, sensitivity=False)
    p = plain.forward(x, k, n).as_array()
    assert not p[:, :, ~views].any() and p[:, :, views].any()
    y = _acq(setup, setup["sim"].prompts.as_array())
    total = am.backward(y, 0, n) + am.backward(y, 1, n) + am.backward(y, 2, n)
    whole = am.backward(y)
    assert (total - whole).abs().max() <= 1e-5 * whole.max()
    masked = y.get_uniform_copy(0)
    masked.fill(np.where(views[None, None, :, None], y.as_array(), np.float32(1e6)))
    np.testing.assert_array_equal(am.backward(masked, k, n).as_array(), am.backward(y, k, n).as_array())


def test_subset_members(setup):
    """num_subsets / subset_num: SIRF's checks; num_subsets resets subset_num; they are the defaults
    of forward, backward, direct and adjoint."""
    am = _model(setup)
    am.num_subsets = 4
    am.subset_num = 3
    x = _img(setup, setup["truth"])
    np.testing.assert_array_equal(am.forward(x).as_array(), am.forward(x, 3, 4).as_array())
    lin = am.get_linear_acquisition_model()
    lin.num_subsets, lin.subset_num = 4, 2
    np.testing.assert_array_equal(lin.direct(x).as_array(), lin.forward(x, 2, 4).as_array())
    am.num_subsets = 2
    assert am.subset_num == 0
    for bad in ({"subset_num": 2}, {"subset_num": 1.0}, {"num_subsets": 0}):
        with pytest.raises(ValueError):
            setattr(am, *bad.popitem())
    with pytest.raises(pet.error, match="subset"):
        am.forward(x, subset_num=5, num_subsets=3)


def test_terms_and_geometries(setup):
    am = _model(setup)
    assert (am.get_additive_term().as_array() == setup["a"][None]).all()
    bare = _model(setup, additive=False, background=False)
    assert bare.get_additive_term().norm() == 0 and bare.get_background_term().norm() == 0
    assert bare.range_geometry().dimensions() == am.acq_templ.dimensions()
    assert bare.domain_geometry().dimensions() == setup["info"].shape
    with pytest.raises(pet.error, match="expected an ImageDataProcessor, not object"):
        am.set_image_data_processor(object())
    with pytest.raises(pet.error, match="set_up"):
        pet.AcquisitionModelUsingParallelproj().forward(_img(setup, setup["truth"]))
    with pytest.raises(InputError):
        am.forward(pet.ImageData.from_array(np.zeros((3, 4, 5), np.float32), setup["info"].replace(shape=(3, 4, 5))))
    with pytest.raises(TypeError):
        am.set_acquisition_sensitivity(_acq(setup, setup["eff"]))
    assert pet.AcquisitionModel is pet.AcquisitionModelUsingStirgpu is pet.AcquisitionModelUsingParallelproj


def test_norm_estimate(setup):
    """norm() approaches ||S G|| from below: it grows with iterations, and its square is at least
    the Rayleigh quotient of any image."""
    am = _model(setup)
    n2, n6 = am.norm(num_iter=2), am.norm(num_iter=6)
    assert 0 < n2 <= n6 * (1 + 1e-6)
    lin = am.get_linear_acquisition_model()
    x = _img(setup, setup["truth"])
    assert lin.forward(x).norm() / x.norm() <= n6 * (1 + 1e-4)
    assert am.norm(0, 3) < n6  # a subset's part is smaller


# -- the sensitivity model -------------------------------------------------------------------------
def test_sensitivity_from_bin_efficiencies(setup):
    """forward / invert / unnormalise / normalise multiply and divide by S = 1 / f, f = 1 / max(e, 1e-20)."""
    e = setup["eff"].copy()
    e.flat[:5] = 0  # SIRF's MIN_BIN_EFFICIENCY keeps these finite
    asm = pet.AcquisitionSensitivityModel(_acq(setup, e))
    y = _acq(setup, setup["a"])
    asm.set_up(y)
    f = (1.0 / np.maximum(e, np.float32(1e-20)).astype(np.float64)).astype(np.float32)[None]
    np.testing.assert_array_equal(asm.forward(y).as_array(), setup["a"][None] / f)
    np.testing.assert_array_equal(asm.invert(y).as_array(), setup["a"][None] * f)
    z = y.clone()
    asm.unnormalise(z)
    np.testing.assert_array_equal(z.as_array(), setup["a"][None] / f)
    asm.normalise(z)
    np.testing.assert_allclose(z.as_array(), setup["a"][None], rtol=1e-6)
    assert np.isfinite(asm.normalisation_factors().as_array()).all()


def test_sensitivity_from_attenuation_and_chained(setup, tmp_path):
    """From an attenuation image in 1/cm: f = exp(line integrals of mu in cm) with the model's
    projector (STIR's BinNormalisationFromAttenuationImage; tests/test_sirf_regressions.py checks
    it against STIR's own); two models chained: their product."""
    y = _acq(setup, setup["sim"].prompts.as_array())
    mu_per_cm = setup["mu"] * np.float32(10)  # simulate's mu is in 1/mm
    am = pet.AcquisitionModelUsingParallelproj(backend="cpu")
    attn = pet.AcquisitionSensitivityModel(_img(setup, mu_per_cm), am)
    with pytest.raises(pet.error, match="set_up"):
        attn.normalisation_factors()
    attn.set_up(y)
    acf = setup["sim"].normalisation.as_array()  # simulate's exp(G mu vx), mu in 1/mm
    np.testing.assert_allclose(attn.normalisation_factors().as_array(), acf, rtol=1e-5)
    af, acf2 = pet.AcquisitionSensitivityModel.compute_attenuation_factors(y, _img(setup, mu_per_cm))
    np.testing.assert_allclose(acf2.as_array()[0], acf, rtol=1e-5)
    np.testing.assert_allclose(af.as_array()[0], 1 / acf, rtol=1e-5)
    eff = pet.AcquisitionSensitivityModel(_acq(setup, setup["eff"]))
    chained = pet.AcquisitionSensitivityModel(attn, eff)
    chained.set_up(y)
    np.testing.assert_allclose(chained.normalisation_factors().as_array(), acf * _f(setup)[0], rtol=1e-6)
    with pytest.raises(pet.error, match="second argument"):
        pet.AcquisitionSensitivityModel(_img(setup, mu_per_cm))
    with pytest.raises(pet.error, match=r"norm\.n\.hdr: file not found"):
        pet.AcquisitionSensitivityModel(str(tmp_path / "norm.n.hdr"))
    with pytest.raises(NotSupported, match="GE HDF5 normalisation files"):
        pet.AcquisitionSensitivityModel(str(tmp_path / "norm.h5"))
    readonly = pet.AcquisitionData(str(_write(setup, tmp_path)))
    with pytest.raises(pet.error, match="read-only"):
        eff.unnormalise(readonly)


def _write(setup, tmp_path):
    from stirgpu.formats import ProjDataFromFile

    with ProjDataFromFile.create(tmp_path / "ro", setup["pdi"], fill=1.0) as store:
        return store.path


def test_the_old_stirgpu_calls_still_work_with_a_warning(setup):
    """The stirgpu 0.1 forms (ProjData, VoxelsOnCartesianGrid, ImageInfo, arrays; the model as
    second positional argument of make_Poisson_loglikelihood) warn and give the same numbers."""
    from stirgpu.formats import VoxelsOnCartesianGrid

    sim, info = setup["sim"], setup["info"]
    new = _model(setup, additive=True, background=False, sensitivity=True)
    old = pet.AcquisitionModel(backend="cpu")
    with pytest.warns(DeprecationWarning):
        old.set_additive_term(ProjDataInMemory(setup["pdi"], fill=setup["a"]))
    with pytest.warns(DeprecationWarning):
        old.set_acquisition_sensitivity(
            pet.AcquisitionSensitivityModel(ProjDataInMemory(setup["pdi"], fill=setup["eff"]))
        )
    with pytest.warns(DeprecationWarning):
        old.set_up(sim.prompts, info)
    x = VoxelsOnCartesianGrid(info, fill=sim.truth)
    with pytest.warns(DeprecationWarning):
        y_old = old.forward(x)
    np.testing.assert_array_equal(y_old.as_array(), new.forward(_img(setup, sim.truth)).as_array())
    with pytest.warns(DeprecationWarning):
        b_old = old.backward(sim.prompts.as_array())
    np.testing.assert_array_equal(b_old.as_array(), new.backward(_acq(setup, sim.prompts.as_array())).as_array())
    with pytest.warns(DeprecationWarning):
        objective = pet.make_Poisson_loglikelihood(sim.prompts, old)
    assert isinstance(objective, PoissonLogLikelihood)


def test_errors_are_sirf_errors_and_stirgpu_errors(setup):
    """What SIRF scripts catch (``except error``) catches every error here, with its message as
    ``value``; stirgpu's own classes still match."""
    from stirgpu.errors import GeometryError, StirGpuError

    am = _model(setup)
    with pytest.raises(GeometryError) as exc:
        am.forward(_img(setup, setup["truth"]), subset_num=0, num_subsets=99)
    assert isinstance(exc.value, pet.error) and isinstance(exc.value, StirGpuError) and "99" in exc.value.value
    assert issubclass(pet.error, StirGpuError) and pet.error is pet.errors.error
