"""SIRF's Hessian products of the objective function and the priors, against a real STIR 6.5.

* ``multiply_with_Hessian(x, v, subset)`` / ``accumulate_Hessian_times_input`` of SIRF's Poisson
  log-likelihood are STIR's ``accumulate_(sub_)Hessian_times_input`` of
  ``PoissonLogLikelihoodWithLinearModelForMeanAndProjData`` (Parallelproj's projector pair) set up
  as SIRF sets it from ``S (G x + a) + b`` (normalisation ``1 / S``, additive ``a + b / S``), with
  a quadratic prior subtracted (divided by the number of subsets for one subset);
* ``RelativeDifferencePrior.compute_Hessian_diagonal`` is STIR's
  ``GibbsRelativeDifferencePenalty::compute_Hessian_diagonal`` (SIRF's RDP is that class);
* SIRF's own checks: ``grad(x + dx) - grad(x)`` is close to ``H(x) dx`` (test_ObjectiveFunction's
  test_Hessian) and a negative forward projection of the input is refused as STIR refuses it.
"""

from __future__ import annotations

import numpy as np
import pytest
from stir_grids import stir_grid

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.interop import image_info_from_stir, proj_data_info_from_stir

BETA = 0.7


@pytest.fixture(scope="module")
def problem(stir):
    """STIR's geometry and image, and the terms of ``S (G x + a) + b`` (random, positive)."""
    spdi = stir.ProjDataInfo.construct_proj_data_info(
        stir.Scanner.get_scanner_from_name("ECAT 953"), 3, 4, 12, 32, False
    )
    img = stir.FloatVoxelsOnCartesianGrid(stir.ExamInfo(), spdi, 0.5)
    shape = stir.ProjDataInMemory(stir.ExamInfo(), spdi).to_array().as_array().shape
    rng = np.random.default_rng(11)
    terms = {name: (rng.random(shape, dtype=np.float32) + np.float32(0.5)) for name in ("y", "a", "b", "s")}
    terms["y"] *= np.float32(20.0)
    ishape = img.as_array().shape
    x = (rng.random(ishape, dtype=np.float32) + np.float32(0.2)).astype(np.float32)
    v = (rng.random(ishape, dtype=np.float32) * np.float32(0.3)).astype(np.float32)
    return spdi, img, terms, x, v


def _stir_data(stir, spdi, array):
    pd = stir.ProjDataInMemory(stir.ExamInfo(), spdi)
    pd.fill(np.ascontiguousarray(array, dtype=np.float32).ravel())
    return pd


def _stir_image(img, array):
    out = img.get_empty_copy()
    out.fill(np.ascontiguousarray(array).ravel())
    return out


def _stir_objective(stir, problem, num_subsets):
    spdi, img, t, _, _ = problem
    f = (np.float32(1.0) / t["s"]).astype(np.float32)  # SIRF: the normalisation is 1 / S
    obj = stir.PoissonLogLikelihoodWithLinearModelForMeanAndProjData3DFloat()
    obj.set_proj_data_sptr(_stir_data(stir, spdi, t["y"]))
    obj.set_additive_proj_data_sptr(_stir_data(stir, spdi, t["a"] + t["b"] * f))
    obj.set_normalisation_sptr(stir.BinNormalisationFromProjData(_stir_data(stir, spdi, f)))
    obj.set_projector_pair_sptr(stir.ProjectorByBinPairUsingParallelproj())
    obj.set_num_subsets(num_subsets)
    obj.set_prior_sptr(stir.QuadraticPrior3DFloat(False, BETA))
    obj.set_up(img)
    return obj


def _sirf_objective(problem, num_subsets):
    spdi, img, t, x, _ = problem
    pdi, info = proj_data_info_from_stir(spdi), image_info_from_stir(img)

    def data(name):
        return pet.AcquisitionData(ProjDataInMemory(pdi, fill=t[name][0]))

    am = pet.AcquisitionModelUsingParallelproj()
    am.set_additive_term(data("a"))
    am.set_background_term(data("b"))
    am.set_acquisition_sensitivity(pet.AcquisitionSensitivityModel(data("s")))
    obj = pet.make_Poisson_loglikelihood(data("y"), acq_model=am)
    obj.set_num_subsets(num_subsets)
    prior = pet.QuadraticPrior()
    prior.set_penalisation_factor(BETA)
    obj.set_prior(prior)
    obj.set_up(pet.ImageData.from_array(x.copy(), info))
    return obj, info


def _relative(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.stir
@pytest.mark.parametrize("subset", [-1, 0, 2])
def test_objective_hessian_times_input_is_stirs(stir, problem, subset):
    """Whole objective function and single subsets of 3: STIR's numbers to float32 rounding."""
    _, img, _, x, v = problem
    theirs = _stir_objective(stir, problem, 3)
    want = _stir_image(img, np.zeros_like(x))
    if subset < 0:
        theirs.accumulate_Hessian_times_input(want, _stir_image(img, x), _stir_image(img, v))
    else:
        theirs.accumulate_sub_Hessian_times_input(want, _stir_image(img, x), _stir_image(img, v), subset)
    want = np.asarray(want.as_array())
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        mine, info = _sirf_objective(problem, 3)
        xs, vs = pet.ImageData.from_array(x.copy(), info), pet.ImageData.from_array(v.copy(), info)
        got = mine.multiply_with_Hessian(xs, vs, subset).as_array()
        out = vs.get_uniform_copy(2.0)
        accumulated = mine.accumulate_Hessian_times_input(xs, vs, subset, out=out)
    assert np.abs(want).max() > 0
    assert _relative(got, want) <= 2e-5
    assert accumulated is out
    np.testing.assert_allclose(out.as_array(), got + np.float32(2.0), rtol=1e-6, atol=1e-6 * np.abs(got).max())
    assert (vs.as_array() == v).all() and (xs.as_array() == x).all()  # the inputs are left alone


@pytest.mark.stir
def test_gradient_difference_is_close_to_hessian_times_step(problem):
    """SIRF's test_ObjectiveFunction.test_Hessian: ``|grad(x+dx) - grad(x) - H dx| / |grad(x+dx) -
    grad(x)|`` at most 0.002 for dx = x eps + eps / 2."""
    _, _, _, x, _ = problem
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        obj, info = _sirf_objective(problem, 1)
        xs = pet.ImageData.from_array(x.copy(), info)
        dx = xs * 1e-3 + 0.5e-3
        dg = obj.gradient(xs + dx) - obj.gradient(xs)
        q = (dg - obj.multiply_with_Hessian(xs, dx)).norm() / dg.norm()
    assert q <= 0.002


@pytest.mark.stir
def test_negative_forward_projection_of_the_input_is_refused(problem):
    """STIR stops when ``A v`` has a negative bin (STIR issue #1461); so does stirgpu, in one line."""
    _, _, _, x, _ = problem
    with stirgpu.config(backend="cpu"), pet.storage_scheme("memory"):
        obj, info = _sirf_objective(problem, 1)
        xs = pet.ImageData.from_array(x.copy(), info)
        with pytest.raises(pet.error, match="forward projection of the input has negative values"):
            obj.multiply_with_Hessian(xs, xs * -1.0)


@pytest.mark.stir
@pytest.mark.parametrize("with_kappa", [False, True])
def test_rdp_hessian_diagonal_is_stirs_gibbs_rdp(stir, with_kappa):
    """SIRF's RelativeDifferencePrior is STIR's GibbsRelativeDifferencePenalty: its
    compute_Hessian_diagonal, on non-cubic voxels, with and without kappa, to 1e-5."""
    from stirgpu.geometry import ImageInfo

    shape, voxel = (5, 8, 9), (3.27, 2.1, 2.5)
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 4.0, shape).astype(np.float32)
    x[rng.random(shape) < 0.2] = 0.0
    kappa = rng.uniform(0.2, 2.0, shape).astype(np.float32)
    theirs = stir.GibbsRelativeDifferencePenalty3DFloat()
    theirs.set_penalisation_factor(1.3)
    theirs.set_gamma(1.5)
    theirs.set_epsilon(0.01)
    sx = stir_grid(stir, x, voxel)
    if with_kappa:
        theirs.set_kappa_sptr(stir_grid(stir, kappa, voxel))
    theirs.set_up(sx)
    want = sx.get_empty_copy()
    theirs.compute_Hessian_diagonal(want, sx)
    want = np.asarray(want.as_array())
    info = ImageInfo(shape, voxel)
    mine = pet.RelativeDifferencePrior()
    mine.set_penalisation_factor(1.3)
    mine.set_gamma(1.5)
    mine.set_epsilon(0.01)
    if with_kappa:
        mine.set_kappa(pet.ImageData.from_array(kappa.copy(), info))
    image = pet.ImageData.from_array(x.copy(), info)
    mine.set_up(image)
    got = mine.compute_Hessian_diagonal(image).as_array()
    assert _relative(got, want) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("subset", [-1, 1])
def test_objective_hessian_on_a_gpu_is_the_cpus(cp, subset):
    """The same Hessian products on the CUDA backend with images on the GPU (where the result
    stays) equal the CPU's to float32 rounding."""
    from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner

    pdi = ProjDataInfo.construct(Scanner.from_name("ECAT 953"), 3, 2, num_views=12, num_tangential_poss=32)
    info = ImageInfo((15, 24, 24), (3.375, 4.0, 4.0))
    rng = np.random.default_rng(4)
    x = rng.random(info.shape, dtype=np.float32) + np.float32(0.2)
    v = rng.random(info.shape, dtype=np.float32)
    shape = ProjDataInMemory(pdi).shape
    y, b = (rng.random(shape, dtype=np.float32) * np.float32(scale) + np.float32(0.5) for scale in (20, 1))
    results = []
    for backend in ("cpu", "cuda"):
        with stirgpu.config(backend=backend), pet.storage_scheme("memory"):
            am = pet.AcquisitionModelUsingParallelproj()
            am.set_background_term(pet.AcquisitionData(ProjDataInMemory(pdi, fill=b)))
            obj = pet.make_Poisson_loglikelihood(pet.AcquisitionData(ProjDataInMemory(pdi, fill=y)), acq_model=am)
            obj.set_num_subsets(3)
            prior = pet.RelativeDifferencePrior()
            prior.set_penalisation_factor(0.3)
            prior.set_epsilon(0.01)
            obj.set_prior(prior)
            xs, vs = (pet.ImageData.from_array(cp.asarray(a) if backend == "cuda" else a.copy(), info) for a in (x, v))
            obj.set_up(xs)
            h = obj.multiply_with_Hessian(xs, vs, subset)
            assert type(h.array) is type(xs.array)
            results.append(h.as_array())
    assert np.abs(results[1] - results[0]).max() <= 2e-5 * np.abs(results[0]).max()
