"""OSMAPOSL as SIRF drives it: make_Poisson_loglikelihood, OSMAPOSLReconstructor, priors, messages.

The reference is STIR's own OSMAPOSL run ``stir_reference_lpp2.0.7/osem953*`` (the run
``tests/test_recon_stir_reference.py`` reproduces from its ``.par``): the same reconstruction
written as a SIRF user writes it -- prompts, ``AcquisitionSensitivityModel(1 / norm)``, the
additive term, ``create_uniform_image(1, xy=95)``, 4 subsets, 8 subiterations, estimates saved
every 4 -- reproduces STIR's subset sensitivities and estimates to 1e-4 of their maximum
(measured on the CPU: sensitivities <= 8.9e-7, estimates <= 1.4e-6 of the maximum; the bins'
efficiencies go through SIRF's float32 1 / (1 / f), which is f to an ulp).  Elsewhere the reconstructor is held
to stirgpu's OSEM (the same operations: equal), the objective's gradient to its definition and to
finite differences of its value, and OSL with a prior to stirgpu's OSMAPOSL with that prior.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from helpers import reference_results

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory, read_image
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSEM
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

OSEM953_TOL = 1e-4


def _rel_max(mine: np.ndarray, stir: np.ndarray) -> float:
    return float(np.abs(mine.astype(np.float64) - stir).max() / np.abs(stir).max())


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_osem953_through_the_sirf_reconstructor_is_stirs(stir_fixtures, tmp_path, backend):
    ref = reference_results(stir_fixtures)
    with stirgpu.config(backend=backend), pet.storage_scheme("file"):
        acq_data = pet.AcquisitionData(str(ref / "osem953_prompts.hs"))
        norm = pet.AcquisitionData(str(ref / "osem953_norm.hs"))  # STIR's normalisation factors f
        additive = pet.AcquisitionData(str(ref / "osem953_additive.hs"))
        acq_model = pet.AcquisitionModelUsingParallelproj()
        acq_model.set_acquisition_sensitivity(pet.AcquisitionSensitivityModel(1 / norm))  # bin efficiencies
        acq_model.set_additive_term(additive)
        image = acq_data.create_uniform_image(1.0, xy=95)
        acq_model.set_up(acq_data, image)
        obj_fun = pet.make_Poisson_loglikelihood(acq_data)
        obj_fun.set_acquisition_model(acq_model)
        recon = pet.OSMAPOSLReconstructor()
        recon.set_objective_function(obj_fun)
        recon.set_num_subsets(4)
        recon.set_num_subiterations(8)
        recon.set_save_interval(4)
        recon.set_output_filename_prefix(str(tmp_path / "osem953_osem"))
        recon.set_up(image)
        recon.reconstruct(image)
    assert recon.get_subiteration_num() == 9
    for k in range(4):
        stir_sens = read_image(ref / f"osem953_sens_{k}.hv")
        mine = obj_fun.get_subset_sensitivity(k)
        assert mine.image_info == stir_sens.info
        assert _rel_max(mine.as_array(), stir_sens.array) <= OSEM953_TOL, f"sensitivity {k}"
    for n in (4, 8):
        stir_est = read_image(ref / f"osem953_osem_{n}.hv").array
        assert _rel_max(read_image(tmp_path / f"osem953_osem_{n}.hv").array, stir_est) <= OSEM953_TOL, n
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"osem953_osem_{n}.{e}" for n in (4, 8) for e in ("hv", "v")]
    np.testing.assert_array_equal(image.as_array(), read_image(tmp_path / "osem953_osem_8.hv").array)


@pytest.fixture(scope="module")
def sim():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    ph = demo_phantom(info)
    pp = ProjectorPair(backend="cpu")
    data = simulate(pp, pdi, info, ph.activity(info), ph.mu_map(info), counts=5e5, seed=5)
    return pdi, info, data


def _objective(sim, background=False, num_subsets=3, backend="cpu"):
    """The SIRF objective function of the simulated data: S = 1 / f and the additive term, or the
    same model with the additive term as a background term b = a / f (measured units)."""
    pdi, info, data = sim
    f = data.normalisation.as_array()
    am = pet.AcquisitionModelUsingParallelproj(backend=backend)
    am.set_acquisition_sensitivity(
        pet.AcquisitionSensitivityModel(pet.AcquisitionData(ProjDataInMemory(pdi, fill=1 / f)))
    )
    term = data.additive.as_array() / f if background else data.additive.as_array()
    (am.set_background_term if background else am.set_additive_term)(
        pet.AcquisitionData(ProjDataInMemory(pdi, fill=term))
    )
    obj = pet.make_Poisson_loglikelihood(pet.AcquisitionData(data.prompts), acq_model=am)
    obj.set_num_subsets(num_subsets)
    image = pet.ImageData.from_array(np.ones(info.shape, np.float32), info)
    return obj, am, image


def _reconstructor(obj, num_subsets=3, num_subiterations=5):
    recon = pet.OSMAPOSLReconstructor()
    recon.set_objective_function(obj)
    recon.set_num_subsets(num_subsets)
    recon.set_num_subiterations(num_subiterations)
    return recon


def test_reconstruct_is_stirgpus_osem(sim):
    """reconstruct(image) updates ``image`` in place with exactly stirgpu's OSEM (same sensitivities,
    same subiterations); the background form gives STIR's additive a + b f to float32 rounding."""
    pdi, info, data = sim
    obj, am, image = _objective(sim)
    recon = _reconstructor(obj)
    with pet.storage_scheme("memory"):
        recon.set_up(image)
        before = image.array
        recon.reconstruct(image)
    assert image.array is before and recon.get_subiteration_num() == 6
    osem = OSEM(obj.stirgpu_objective(), ProjectorPair(backend="cpu"), info, num_subsets=3, num_subiterations=5)
    expected = osem.reconstruct().image
    np.testing.assert_array_equal(image.as_array(), expected)
    np.testing.assert_array_equal(recon.get_output().as_array(), expected)
    obj_b, _, image_b = _objective(sim, background=True)
    recon_b = _reconstructor(obj_b)
    recon_b.set_up(image_b)
    recon_b.reconstruct(image_b)
    assert np.abs(image_b.as_array() - expected).max() <= 1e-4 * expected.max()


def test_update_sequence(sim, tmp_path):
    """set_up sets subiteration 1; update(image) applies it in place and counts on; the same
    subiterations as reconstruct; current-estimate calls copy; saves at multiples of the interval
    and the last subiteration."""
    obj, am, image = _objective(sim)
    recon = _reconstructor(obj, num_subiterations=4)
    recon.set_save_interval(3)
    recon.set_output_filename_prefix(str(tmp_path / "est"))
    recon.set_up(image)
    assert recon.get_subiteration_num() == 1
    x = image.clone()
    for n in range(1, 5):
        assert recon.update(x) is x and recon.get_subiteration_num() == n + 1
    assert sorted(p.name for p in tmp_path.glob("*.hv")) == ["est_3.hv", "est_4.hv"]
    y = image.clone()
    recon.reconstruct(y)
    np.testing.assert_array_equal(x.as_array(), y.as_array())
    np.testing.assert_array_equal(read_image(tmp_path / "est_4.hv").array, y.as_array())
    recon.set_current_estimate(image)
    recon.set_up(image)
    recon.update_current_estimate()
    assert recon.get_current_estimate().norm() != image.norm()  # the copy moved, image did not
    recon.process()
    assert recon.get_output().norm() > 0 and recon.get_subiteration_num() == 5
    recon.set_current_subset_num(2)
    np.testing.assert_array_equal(recon.get_subset_sensitivity().as_array(), obj.get_subset_sensitivity(2).as_array())


def test_reconstructor_refusals(sim):
    obj, am, image = _objective(sim)
    with pytest.raises(pet.error, match="objective function"):
        pet.OSMAPOSLReconstructor().set_up(image)
    recon = _reconstructor(obj, num_subiterations=2)
    recon.set_save_interval(1)
    with pytest.raises(pet.error, match="prefix"):
        recon.set_up(image)
    recon.set_output_filename_prefix("x")
    recon.set_save_interval(5)
    with pytest.raises(pet.error, match="save interval"):
        recon.set_up(image)
    with pytest.raises(pet.error, match="set_up"):
        _reconstructor(obj).update(image)
    with pytest.raises(pet.error, match="parameter file"):
        pet.OSMAPOSLReconstructor("osem.par")
    with pytest.raises(TypeError):
        pet.OSMAPOSLReconstructor().set_objective_function(am)


def test_objective_function(sim):
    """gradient(x, k) = B_k(y / (G x + a)) - s_k; gradient(x) the sum over subsets; value the
    log-likelihood; both need set_up; the gradient agrees with finite differences of the value."""
    pdi, info, data = sim
    obj, am, image = _objective(sim)
    with pytest.raises(pet.error, match="set_up"):
        obj.value(image)
    obj.set_up(image)
    rng = np.random.default_rng(1)
    x = pet.ImageData.from_array((0.5 + rng.random(info.shape, dtype=np.float32)) * np.float32(data.scale), info)
    ratio = obj.get_backprojection_of_acquisition_ratio(x, 1)
    sens = obj.get_subset_sensitivity(1)
    np.testing.assert_array_equal(obj.get_subset_gradient(x, 1).as_array(), (ratio - sens).as_array())
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    np.testing.assert_allclose(
        sens.as_array(), pp.sensitivity(None, 1, 3, multiplicative=obj.stirgpu_objective().multiplicative), rtol=1e-6
    )
    total = sum((obj.get_subset_gradient(x, k) for k in range(3)), x.get_uniform_copy(0))
    np.testing.assert_allclose(obj.gradient(x).as_array(), total.as_array(), rtol=1e-5, atol=1e-5 * total.max())
    out = x.get_uniform_copy(0)
    assert obj.get_gradient(x, out=out) is out and (out - obj.gradient(x)).norm() == 0
    value = obj.value(x)
    assert (
        value
        == obj(x)
        == obj.get_value(x)
        == pytest.approx(obj.stirgpu_objective().log_likelihood(pp, x.array), rel=1e-12)
    )
    d = x.get_uniform_copy(0).fill(rng.standard_normal(info.shape).astype(np.float32))
    eps = 1e-3 * float(x.max()) / float(d.abs().max())
    slope = (obj.value(x + d * eps) - obj.value(x - d * eps)) / (2 * eps)
    assert slope == pytest.approx(float(obj.gradient(x).dot(d)), rel=2e-2)
    with pytest.raises(pet.error, match="subset"):
        obj.get_subset_gradient(x, 3)
    assert obj.get_num_subsets() == 3 and obj.get_prior() is None


def test_make_poisson_loglikelihood_forms(sim):
    pdi, info, data = sim
    acq = pet.AcquisitionData(data.prompts)
    assert isinstance(pet.make_Poisson_loglikelihood(acq), pet.PoissonLogLikelihoodWithLinearModelForMeanAndProjData)
    with pytest.raises(pet.error, match="requires acquisition data"):
        pet.make_Poisson_loglikelihood()
    with pytest.raises(pet.error, match="list-mode"):
        pet.make_Poisson_loglikelihood(acq, "LinearModelForMeanAndListModeDataWithProjMatrixByBin")
    with pytest.raises(pet.error, match="not implemented"):
        pet.make_Poisson_loglikelihood(acq, "Gaussian")
    obj = pet.make_Poisson_loglikelihood(acq)
    with pytest.raises(pet.error, match="set_acquisition_model"):
        obj.set_up(pet.ImageData.from_array(np.ones(info.shape, np.float32), info))


# -- priors ---------------------------------------------------------------------------------------------
def test_prior_settings(sim):
    """SIRF's setters on stirgpu's priors, with STIR 6.5's defaults (factor 0, RDP gamma 2, epsilon 0);
    values, gradients and Hessian products are stirgpu's prior's on the image's array."""
    import stirgpu.priors as sp

    obj, am, image = _objective(sim)
    q, r = pet.QuadraticPrior(), pet.RelativeDifferencePrior()
    assert q.get_penalisation_factor() == 0 and q.is_zero() and (r.get_gamma(), r.get_epsilon()) == (2, 0)
    assert q.set_penalisation_factor(0.5) is q and q.get_penalisation_factor() == 0.5
    r.set_gamma(1.5)
    r.set_epsilon(1e-3)
    assert r.get_gamma() == 1.5 and r.get_epsilon() == pytest.approx(1e-3)
    rng = np.random.default_rng(2)
    x = image.get_uniform_copy(0).fill(rng.random(image.dimensions(), dtype=np.float32) + np.float32(0.5))
    kappa = image.get_uniform_copy(0).fill(rng.random(image.dimensions(), dtype=np.float32))
    q.set_kappa(kappa)
    assert (q.get_kappa() - kappa).norm() == 0
    for prior, reference in (
        (q, sp.QuadraticPrior(0.5, kappa=kappa.as_array())),
        (r, sp.RelativeDifferencePrior(0, gamma=1.5, epsilon=1e-3)),
    ):
        prior.set_up(x)
        reference.set_up(x.image_info)
        assert prior.value(x) == prior(x) == prior.get_value(x) == reference.get_value(x.array)
        np.testing.assert_array_equal(prior.gradient(x).as_array(), reference.get_gradient(x.array))
        out = x.get_uniform_copy(7.0)
        assert prior.get_gradient(x, out=out) is out and (out - prior.gradient(x)).norm() == 0
        np.testing.assert_array_equal(
            prior.multiply_with_Hessian(x, kappa).as_array(), reference.multiply_with_Hessian(x.array, kappa.array)
        )
        acc = prior.accumulate_Hessian_times_input(x, kappa, x.get_uniform_copy(1.0))
        np.testing.assert_allclose(
            acc.as_array(), 1 + reference.multiply_with_Hessian(x.array, kappa.array), rtol=1e-6, atol=1e-6
        )
    assert r.value(x) == 0 and r.gradient(x).norm() == 0  # a zero factor: STIR's prior_is_zero
    assert r.compute_Hessian_diagonal(x).norm() == 0  # STIR's compute_Hessian_diagonal with a zero factor
    with pytest.raises(pet.error, match="set_up"):
        pet.QuadraticPrior().set_penalisation_factor(1).value(x)
    with pytest.raises(TypeError):
        obj.set_prior(image)
    with pytest.raises(pet.error, match="kappa"):
        pet.RelativeDifferencePrior().get_kappa()


def test_osl_is_stirgpus_osmaposl_with_the_prior(sim):
    """With a prior the reconstructor is stirgpu's OSMAPOSL with the same stirgpu prior (STIR's OSL
    step), bit for bit; the objective function subtracts the penalty and its gradient / K; a zero
    factor is OSEM."""
    import stirgpu.priors as sp

    pdi, info, data = sim
    obj, am, image = _objective(sim)
    prior = pet.QuadraticPrior()
    prior.set_penalisation_factor(0.05)
    obj.set_prior(prior)
    recon = _reconstructor(obj, num_subiterations=4)
    x = image.clone()
    recon.set_up(x)
    recon.reconstruct(x)
    reference = sp.QuadraticPrior(0.05)
    osem = OSEM(
        obj.stirgpu_objective(), ProjectorPair(backend="cpu"), info, num_subsets=3, num_subiterations=4, prior=reference
    )
    np.testing.assert_array_equal(x.as_array(), osem.reconstruct().image)
    ll = obj.stirgpu_objective().log_likelihood(am.projector, x.array)
    assert obj.value(x) == pytest.approx(ll - reference.get_value(x.array), rel=1e-12)
    g = obj.get_subset_gradient(x, 1).as_array()
    plain = (obj.get_backprojection_of_acquisition_ratio(x, 1) - obj.get_subset_sensitivity(1)).as_array()
    np.testing.assert_allclose(g, plain - reference.get_gradient(x.array) / np.float32(3), rtol=1e-6, atol=1e-6)
    prior.set_penalisation_factor(0)
    y = image.clone()
    recon.set_up(y)
    recon.reconstruct(y)
    plain_obj, _, z = _objective(sim)
    plain_recon = _reconstructor(plain_obj, num_subiterations=4)
    plain_recon.set_up(z)
    plain_recon.reconstruct(z)
    np.testing.assert_array_equal(y.as_array(), z.as_array())


# -- messages ---------------------------------------------------------------------------------------------
def test_message_redirector(sim, tmp_path):
    """Engine messages (each subiteration) go to the info file while a redirector is alive; none
    are written after it is closed; SIRF's argument check."""
    obj, am, image = _objective(sim)
    recon = _reconstructor(obj, num_subiterations=2)
    logger = logging.getLogger("stirgpu")
    level, handlers = logger.level, list(logger.handlers)
    with pet.MessageRedirector(str(tmp_path / "info.txt"), str(tmp_path / "warn.txt"), None):
        recon.set_up(image)
        recon.reconstruct(image)
        logging.getLogger("stirgpu.sirf").warning("a warning")
    info = (tmp_path / "info.txt").read_text()
    assert "subiteration #1 completed" in info and "subiteration #2 completed" in info and "a warning" not in info
    assert (tmp_path / "warn.txt").read_text() == "a warning\n"
    assert logger.level == level and logger.handlers == handlers
    recon.reconstruct(image)
    assert (tmp_path / "info.txt").read_text() == info
    with pytest.raises(pet.error, match="wrong info argument"):
        pet.MessageRedirector(3)


@pytest.mark.gpu
def test_reconstruction_on_a_gpu_is_the_cpus(sim):
    """The same reconstruction on the CUDA backend (estimate kept on the GPU, written back into the
    host image at the end) equals the CPU's to float32 rounding."""
    pdi, info, data = sim
    results = []
    for backend in ("cpu", "cuda"):
        with stirgpu.config(backend=backend):
            obj, am, image = _objective(sim, backend=backend)
            recon = _reconstructor(obj)
            recon.set_up(image)
            recon.reconstruct(image)
            results.append(image.as_array())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-4 * results[0].max())


def test_remaining_settings(sim, tmp_path, capsys):
    """The objective function read from its file name; the relative-change limits (from
    subiteration 2 on: a maximum of 1 makes the estimate non-increasing); output switched on and
    off; the getters; messages to stdout."""
    pdi, info, data = sim
    obj, am, image = _objective(sim)
    path = tmp_path / "prompts"
    pet.AcquisitionData(data.prompts).write(str(path))
    from_file = pet.PoissonLogLikelihoodWithLinearModelForMeanAndProjData()
    from_file.set_input_filename(str(path) + ".hs")
    from_file.set_acquisition_model(am)
    from_file.set_num_subsets(3)
    from_file.set_recompute_sensitivity(True)
    from_file.set_up(image)
    obj.set_up(image)
    assert from_file.value(image) == obj.value(image)
    recon = _reconstructor(obj, num_subiterations=3)
    assert (recon.get_num_subsets(), recon.get_num_subiterations()) == (3, 3)
    assert recon.get_objective_function() is obj
    recon.set_maximum_relative_change(1.0)
    recon.set_minimum_relative_change(0.0)
    recon.set_output_filename_prefix(str(tmp_path / "est"))
    recon.enable_output()
    recon.disable_output()
    x = image.clone()
    recon.set_up(x)
    recon.update(x)
    after_1 = x.as_array()
    with pet.MessageRedirector("stdout", None, None):
        recon.update(x)
    assert (x.as_array() <= after_1).all() and "subiteration #2 completed" in capsys.readouterr().out
    assert not list(tmp_path.glob("est_*"))
    recon.enable_output()
    recon.update(x)
    assert [p.name for p in tmp_path.glob("est_*.hv")] == ["est_3.hv"]
