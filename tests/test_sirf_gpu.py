"""The SIRF layer's GPU paths against its CPU paths: the same calls with ``backend="cuda"`` and
cupy-backed images give the CPU's numbers to float32 rounding (projections summed in another
order: 1e-5 of the maximum; a reconstruction of several subiterations: 1e-4).

Covered: the acquisition model (forward, backward, subsets, the linear part's direct and
adjoint, with additive, background and sensitivity terms), the objective function (value,
gradient, subset gradients and sensitivities), the priors (value, gradient, Hessian products,
with kappa), an OSL reconstruction, the sensitivity model from an attenuation image, and the
image container's arithmetic, copies and writing on cupy arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu
import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory, read_image
from stirgpu.projectors import ProjectorPair
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate

pytestmark = pytest.mark.gpu

PROJECTION_TOL = 1e-5
RECONSTRUCTION_TOL = 1e-4


@pytest.fixture(scope="module")
def sim():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    ph = demo_phantom(info)
    data = simulate(ProjectorPair(backend="cpu"), pdi, info, ph.activity(info), ph.mu_map(info), counts=5e5, seed=7)
    rng = np.random.default_rng(3)
    return dict(
        pdi=pdi,
        info=info,
        data=data,
        mu=ph.mu_map(info) * np.float32(10),  # 1/cm, as SIRF's attenuation images
        x=(0.5 + rng.random(info.shape, dtype=np.float32)) * np.float32(data.scale),
        kappa=rng.random(info.shape, dtype=np.float32),
        b=rng.random(data.prompts.shape, dtype=np.float32),
    )


def _image(sim, values, backend):
    """An ImageData on the backend's device: a cupy array for CUDA."""
    if backend == "cuda":
        import cupy

        values = cupy.asarray(values)
    return pet.ImageData.from_array(values, sim["info"])


def _acq(sim, values) -> pet.AcquisitionData:
    return pet.AcquisitionData(ProjDataInMemory(sim["pdi"], fill=values))


def _model(sim, backend) -> pet.AcquisitionModelUsingParallelproj:
    data = sim["data"]
    f = data.normalisation.as_array()
    am = pet.AcquisitionModelUsingParallelproj(backend=backend)
    am.set_acquisition_sensitivity(pet.AcquisitionSensitivityModel(_acq(sim, 1 / f)))
    am.set_additive_term(_acq(sim, data.additive.as_array()))
    am.set_background_term(_acq(sim, sim["b"]))
    am.set_up(pet.AcquisitionData(data.prompts), _image(sim, np.ones(sim["info"].shape, np.float32), backend))
    return am


def _assert_close(mine, reference, tol=PROJECTION_TOL, what=""):
    mine, reference = np.asarray(mine, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    assert mine.shape == reference.shape, what
    assert np.abs(mine - reference).max() <= tol * np.abs(reference).max(), what


def _both(fn):
    """fn(backend) on the CPU and on the GPU, inside that backend's configuration."""
    results = []
    for backend in ("cpu", "cuda"):
        with stirgpu.config(backend=backend):
            results.append(fn(backend))
    return results


def test_acquisition_model(sim, cp):
    """forward (whole and a subset), backward (whole and a subset), and the linear part's direct
    and adjoint; GPU images stay on the GPU."""

    def run(backend):
        am = _model(sim, backend)
        x = _image(sim, sim["x"], backend)
        y = pet.AcquisitionData(sim["data"].prompts)
        lin = am.get_linear_acquisition_model()
        back = am.backward(y)
        if backend == "cuda":
            assert isinstance(back.array, cp.ndarray)
        return [
            am.forward(x).as_array(),
            am.forward(x, subset_num=1, num_subsets=3).as_array(),
            back.as_array(),
            am.backward(y, 1, 3).as_array(),
            lin.direct(x).as_array(),
            lin.adjoint(y).as_array(),
        ]

    cpu, gpu = _both(run)
    for name, a, b in zip(
        ("forward", "forward 1/3", "backward", "backward 1/3", "direct", "adjoint"), gpu, cpu, strict=True
    ):
        _assert_close(a, b, what=name)


def test_objective_function(sim, cp):
    def run(backend):
        am = _model(sim, backend)
        obj = pet.make_Poisson_loglikelihood(pet.AcquisitionData(sim["data"].prompts), acq_model=am)
        obj.set_num_subsets(3)
        x = _image(sim, sim["x"], backend)
        obj.set_up(x)
        return (
            obj.value(x),
            obj.gradient(x).as_array(),
            obj.get_subset_gradient(x, 1).as_array(),
            obj.get_subset_sensitivity(2).as_array(),
            obj.get_backprojection_of_acquisition_ratio(x, 0).as_array(),
        )

    cpu, gpu = _both(run)
    assert gpu[0] == pytest.approx(cpu[0], rel=1e-6)
    for a, b in zip(gpu[1:], cpu[1:], strict=True):
        _assert_close(a, b)


@pytest.mark.parametrize("kind", ["quadratic with kappa", "relative difference"])
def test_priors(sim, cp, kind):
    def run(backend):
        if kind == "quadratic with kappa":
            prior = pet.QuadraticPrior().set_penalisation_factor(0.5)
            prior.set_kappa(_image(sim, sim["kappa"], backend))
        else:
            prior = pet.RelativeDifferencePrior().set_penalisation_factor(0.5)
            prior.set_gamma(1.5)
            prior.set_epsilon(1e-3)
        x = _image(sim, sim["x"], backend)
        prior.set_up(x)
        gradient = prior.gradient(x)
        if backend == "cuda":
            assert isinstance(gradient.array, cp.ndarray)
        direction = _image(sim, sim["kappa"], backend)
        return prior.value(x), gradient.as_array(), prior.multiply_with_Hessian(x, direction).as_array()

    cpu, gpu = _both(run)
    assert gpu[0] == pytest.approx(cpu[0], rel=1e-5)
    _assert_close(gpu[1], cpu[1])
    _assert_close(gpu[2], cpu[2])


def test_osl_reconstruction(sim, cp):
    """Four OSL subiterations with a Relative Difference Prior."""

    def run(backend):
        am = _model(sim, backend)
        obj = pet.make_Poisson_loglikelihood(pet.AcquisitionData(sim["data"].prompts), acq_model=am)
        prior = pet.RelativeDifferencePrior().set_penalisation_factor(0.01)
        obj.set_prior(prior)
        recon = pet.OSMAPOSLReconstructor()
        recon.set_objective_function(obj)
        recon.set_num_subsets(3)
        recon.set_num_subiterations(4)
        image = _image(sim, np.ones(sim["info"].shape, np.float32), backend)
        recon.set_up(image)
        recon.reconstruct(image)
        return image.as_array()

    cpu, gpu = _both(run)
    _assert_close(gpu, cpu, RECONSTRUCTION_TOL)


def test_sensitivity_from_attenuation(sim, cp):
    def run(backend):
        am = pet.AcquisitionModelUsingParallelproj(backend=backend)
        attn = pet.AcquisitionSensitivityModel(_image(sim, sim["mu"], backend), am)
        attn.set_up(pet.AcquisitionData(sim["data"].prompts))
        return attn.normalisation_factors().as_array()

    cpu, gpu = _both(run)
    _assert_close(gpu, cpu)


def test_image_arithmetic_copies_and_writing(sim, cp, tmp_path):
    """Arithmetic with scalars, GPU and host images; fill, clone and uniform copies stay on the
    GPU; norm and dot; a GPU image written to disk reads back the same."""
    x, k = sim["x"], sim["kappa"]
    with stirgpu.config(backend="cuda"):
        a = _image(sim, x, "cuda")
        host = pet.ImageData.from_array(k.copy(), sim["info"])
        for got, expected in (
            (a + host, x + k),
            (a - 2, x - np.float32(2)),
            (3 * a, np.float32(3) * x),
            (a / (host + 1), x / (k + np.float32(1))),
            (a * a, x * x),
        ):
            np.testing.assert_allclose(got.as_array(), expected, rtol=1e-6)
        for copy in (a.clone(), a.get_uniform_copy(2.0), a.get_uniform_copy(0).fill(cp.asarray(k))):
            assert isinstance(copy.array, cp.ndarray) and copy.array.data.ptr != a.array.data.ptr
        np.testing.assert_array_equal(a.get_uniform_copy(0).fill(cp.asarray(k)).as_array(), k)
        assert a.norm() == pytest.approx(float(np.linalg.norm(x.astype(np.float64))), rel=1e-6)
        assert a.dot(host) == pytest.approx(float(np.dot(x.ravel().astype(np.float64), k.ravel())), rel=1e-6)
        a.write(str(tmp_path / "gpu_image"))
    np.testing.assert_array_equal(read_image(tmp_path / "gpu_image.hv").array, x)
