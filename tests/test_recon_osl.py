"""OSMAPOSL with a prior through the Python API (``OSEM(prior=..., map_model=...)``): the One-Step-Late
update as STIR's ``update_estimate`` computes it, on small simulated data.  (Against STIR's own
OSMAPOSL: tests/stir_differential/test_osmaposl_priors_vs_stir.py.)
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.priors import QuadraticPrior, RelativeDifferencePrior
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import OSEM, PoissonLogLikelihood
from stirgpu.recon.arrays import osl_denominator, stir_divide
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate


@pytest.fixture(scope="module")
def problem():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    phantom = demo_phantom(info)
    sim = simulate(
        ProjectorPair(backend="cpu"), pdi, info, phantom.activity(info), phantom.mu_map(info), counts=1e6, seed=4
    )
    return info, sim


def _osem(problem, backend="cpu", projector_options=None, **kw) -> OSEM:
    info, sim = problem
    objective = PoissonLogLikelihood(sim.prompts, additive=sim.additive, normalisation=sim.normalisation)
    pair = ProjectorPair(backend=backend, **(projector_options or {}))
    return OSEM(objective, pair, info, num_subsets=4, **kw)


def test_osl_denominator_is_stirs_float32_arithmetic():
    """Additive: clamp(g / K + s, s / 10, 10 s); multiplicative: clamp(g + 1, 0.1, 10) s (g not
    divided by K), each step rounded to float32 as STIR's float loop does."""
    rng = np.random.default_rng(0)
    g = rng.normal(scale=5, size=1000).astype(np.float32)
    s = rng.uniform(0, 3, 1000).astype(np.float32)
    f = np.float32
    add = np.array([max(min(a / f(3) + b, b * f(10)), b / f(10)) for a, b in zip(g, s, strict=True)], np.float32)
    mul = np.array([max(min(a + f(1), f(10)), f(1) / f(10)) * b for a, b in zip(g, s, strict=True)], np.float32)
    np.testing.assert_array_equal(osl_denominator(g.copy(), s, 3, "additive"), add)
    np.testing.assert_array_equal(osl_denominator(g.copy(), s, 3, "multiplicative"), mul)
    with pytest.raises(ValueError, match="MAP model"):
        osl_denominator(g.copy(), s, 3, "Additive")


def test_a_zero_penalisation_factor_is_osem_bit_for_bit(problem):
    """STIR's prior_is_zero: a prior with factor 0 leaves the OSEM update (threshold-0 division)."""
    plain = _osem(problem, num_subiterations=3).reconstruct().image
    zero = _osem(problem, num_subiterations=3, prior=QuadraticPrior(0.0), map_model="multiplicative")
    np.testing.assert_array_equal(zero.reconstruct().image, plain)


@pytest.mark.parametrize("model", ["additive", "multiplicative"])
def test_one_subiteration_is_stirs_osl_update(problem, model):
    """x_new = x * B(y / (A x + a)) / denominator(prior gradient at x), STIR's divide with 1e-6
    (the first subiteration: no clipping), computed here from the parts."""
    prior = RelativeDifferencePrior(2.0, epsilon=1e-3)
    osem = _osem(problem, num_subiterations=1, prior=prior, map_model=model)
    osem.set_up()
    x = osem.initial_image(1.0)
    x *= np.random.default_rng(1).uniform(0.5, 1.5, x.shape).astype(np.float32)
    num = osem.zeros()
    osem.objective.gradient_plus_sensitivity(osem.projector, x, num, 2, 4)
    den = osl_denominator(prior.get_gradient(x), osem.sensitivities[2], 4, model)
    want = x * stir_divide(num, den, small_num=1e-6)
    got, _ = osem.update(x.copy(), 3)  # subiteration 3 uses subset 2; limits are the defaults
    np.testing.assert_array_equal(got, want)


def test_penalty_is_reported_with_the_objective(problem):
    """Each report holds STIR's "Penalty": the prior's value at the estimate after the update."""
    prior = QuadraticPrior(0.3)
    osem = _osem(problem, num_subiterations=2, prior=prior, report_objective_interval=1)
    result = osem.reconstruct()
    assert result.records[-1].penalty == pytest.approx(prior.get_value(result.image), rel=1e-12)
    assert all(r.penalty > 0 and r.objective_function_value is not None for r in result.records)


def test_bad_prior_arguments_are_refused(problem):
    with pytest.raises(StirGpuError, match="MAP model"):
        _osem(problem, prior=QuadraticPrior(1.0), map_model="Additive")
    with pytest.raises(StirGpuError, match="has no"):
        _osem(problem, prior=object())


# The penalisation factor per MAP model: multiplicative OSL with a factor of 2 amplifies float32
# summation-order differences (two CPU chunk plans: 1.4e-3 of the maximum after 4 subiterations,
# against 1.5e-6 for the additive model), so it is compared with a factor of 0.1 (3.7e-7).
GPU_OSL_FACTORS = {"additive": 2.0, "multiplicative": 0.1}


@pytest.mark.parametrize("model", ["additive", "multiplicative"])
def test_osl_factors_of_the_gpu_test_are_well_conditioned(problem, model):
    """The gpu test's bar holds between two CPU chunk plans (other summation orders)."""

    def run(projector_options=None):
        prior = RelativeDifferencePrior(GPU_OSL_FACTORS[model], epsilon=1e-3)
        osem = _osem(problem, "cpu", projector_options, num_subiterations=4, prior=prior, map_model=model)
        return osem.reconstruct().image

    one, other = run(), run({"max_views_per_chunk": 1, "devices": [0, 1, 2]})
    assert float(abs(one - other).max()) <= 1e-5 * float(one.max())


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["additive", "multiplicative"])
def test_osl_on_the_gpu_keeps_the_estimate_there_and_matches_the_cpu(problem, model):
    """With a prior on the CUDA backend the estimate stays a cupy array through every subiteration
    (the prior's gradient is computed on the GPU), and after 4 subiterations it equals the CPU
    reconstruction to float32 summation order (1e-5 of the maximum, as plain OSEM)."""
    import cupy

    def run(backend):
        prior = RelativeDifferencePrior(GPU_OSL_FACTORS[model], epsilon=1e-3)
        return _osem(problem, backend, num_subiterations=4, prior=prior, map_model=model).reconstruct().image

    gpu = run("cuda")
    assert isinstance(gpu, cupy.ndarray)
    cpu = run("cpu")
    assert float(abs(gpu.get() - cpu).max()) <= 1e-5 * float(cpu.max())
