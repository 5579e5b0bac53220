"""SIRF's ``KOSMAPOSLReconstructor`` on stirgpu: every call SIRF's ``hkem_reconstruction.py`` makes.

The identities: a subiteration (``update_current_estimate``) is stirgpu's KOSMAPOSL update (held to
STIR's KOSMAPOSL in tests/stir_differential/test_kosmaposl_vs_stir.py), and equals the kernelised
EM update written out with the reconstructor's ``compute_kernelised_image`` and the acquisition
model (as the example's second half writes it); each setter changes the kernel as STIR's key of
the same name does; the refusals are one line.
"""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.projectors import ProjectorPair
from stirgpu.recon import KOSMAPOSL, KernelSettings
from stirgpu.recon.simulate import demo_geometry, demo_phantom, simulate


@pytest.fixture(scope="module")
def sim():
    pdi, info = demo_geometry(num_views=12, num_tangential_poss=48)
    ph = demo_phantom(info)
    data = simulate(ProjectorPair(backend="cpu"), pdi, info, ph.activity(info), ph.mu_map(info), counts=5e5, seed=5)
    anatomical = ph.activity(info) + np.random.default_rng(1).normal(0, 0.05, info.shape).astype(np.float32)
    return pdi, info, data, anatomical


def _setup(sim, num_subsets=1, backend="cpu", **kernel):
    """The example's objective (data without corrections), and a reconstructor with its kernel
    settings (the example's values unless given)."""
    pdi, info, data, anatomical = sim
    acq_data = pet.AcquisitionData(ProjDataInMemory(pdi, fill=data.prompts.as_array()))
    acq_model = pet.AcquisitionModelUsingParallelproj(backend=backend)
    image = pet.ImageData.from_array(np.ones(info.shape, np.float32), info)
    acq_model.set_up(acq_data, image)
    obj_fun = pet.make_Poisson_loglikelihood(acq_data)
    obj_fun.set_acquisition_model(acq_model)
    recon = pet.KOSMAPOSLReconstructor()
    recon.set_objective_function(obj_fun)
    recon.set_num_subsets(num_subsets)
    recon.set_num_subiterations(3)
    recon.set_input(acq_data)
    recon.set_anatomical_prior(pet.ImageData.from_array(anatomical.copy(), info))
    settings = {"num_neighbours": 5, "num_non_zero_features": 1, "sigma_m": 2.0, "sigma_p": 3.0}
    settings.update({"sigma_dm": 5.0, "sigma_dp": 5.0, "only_2D": True, "hybrid": False, **kernel})
    for name, value in settings.items():
        getattr(recon, f"set_{name}")(value)
    return recon, obj_fun, acq_model, acq_data, image


@pytest.mark.parametrize("hybrid", [False, True])
def test_update_is_the_kernelised_em_update(sim, hybrid):
    """One ``update_current_estimate`` from ones equals the update written with SIRF's calls (the
    example's second half): alpha K(B(y / F K alpha)) / K(B 1), STIR's 1e-6 division rule, with
    the kernel of the current estimate; the kernelised image of the new estimate differs from it
    (the kernel is not the identity)."""
    recon, obj_fun, acq_model, acq_data, image = _setup(sim, hybrid=hybrid)
    alpha = image.get_uniform_copy(1)
    recon.set_up(alpha)
    recon.set_current_estimate(alpha)
    recon.update_current_estimate()
    new_alpha = recon.get_current_estimate()

    kernel_info = image.get_uniform_copy(1)
    k_alpha = recon.compute_kernelised_image(alpha, kernel_info)
    fwd = acq_model.forward(k_alpha).as_array()
    y = acq_data.as_array()
    ratio = np.divide(y, fwd, out=np.zeros_like(y), where=fwd > 0)  # (bins of LORs missing the image: 0)
    back = acq_model.backward(_filled(acq_data, ratio))
    numerator = recon.compute_kernelised_image(back, kernel_info).as_array()
    sens = recon.compute_kernelised_image(acq_model.backward(acq_data.get_uniform_copy(1)), kernel_info).as_array()
    small = numerator.max() * 1e-6
    update = np.where((numerator <= small) & (sens <= small), 0, numerator / np.where(sens == 0, 1, sens))
    expected = alpha.as_array() * update
    assert np.abs(new_alpha.as_array() - expected).max() <= 1e-5 * expected.max()
    emission = recon.compute_kernelised_image(new_alpha, kernel_info).as_array()
    assert np.abs(emission - new_alpha.as_array()).max() > 1e-3 * emission.max()
    sens0 = obj_fun.get_subset_sensitivity(0).as_array()
    np.testing.assert_allclose(sens0, acq_model.backward(acq_data.get_uniform_copy(1)).as_array(), rtol=1e-5, atol=1e-3)


def _filled(template, values):
    out = template.get_uniform_copy(0)
    out.fill(values)
    return out


@pytest.mark.parametrize("features", [1, 2])
def test_update_is_stirgpus_kosmaposl(sim, features):
    """``set_up`` + ``update_current_estimate`` x3 (4 subsets) is stirgpu's KOSMAPOSL on the same
    objective with the settings the setters name, to the last bit (with 2 feature elements too:
    the emission norms added to at each kernelisation of the reconstructor's own)."""
    recon, obj_fun, *_, image = _setup(
        sim, num_subsets=4, hybrid=True, only_2D=False, num_neighbours=3, num_non_zero_features=features
    )
    alpha = image.get_uniform_copy(1)
    recon.set_up(alpha)
    recon.set_current_estimate(alpha)
    for _ in range(3):
        recon.update_current_estimate()
    _, info, _, anatomical = sim
    settings = KernelSettings(
        num_neighbours=3,
        num_non_zero_features=features,
        sigma_m=(2.0,),
        sigma_p=3.0,
        sigma_dm=5.0,
        sigma_dp=5.0,
        hybrid=True,
    )
    run = KOSMAPOSL(
        obj_fun.stirgpu_objective(),
        ProjectorPair(backend="cpu"),
        info,
        num_subsets=4,
        num_subiterations=3,
        kernel=settings,
        anatomical_images=[anatomical],
    )
    np.testing.assert_array_equal(recon.get_current_estimate().as_array(), run.reconstruct().image)


def test_setters_change_the_kernel(sim):
    """Each setter reaches the kernel: the kernelised image of the same image changes with it."""
    recon, *_, image = _setup(sim)
    recon.set_up(image.get_uniform_copy(1))
    rng = np.random.default_rng(0)
    x = image.get_uniform_copy(1)
    x.fill(rng.random(x.shape).astype(np.float32) + 0.5)
    base = recon.compute_kernelised_image(x, x).as_array()
    for name, value in [
        ("sigma_m", 0.5),
        ("sigma_dm", 1.0),
        ("num_neighbours", 3),
        ("only_2D", False),
        ("hybrid", True),
    ]:
        r, *_ = _setup(sim, **{name: value})
        r.set_up(image.get_uniform_copy(1))
        assert not np.allclose(r.compute_kernelised_image(x, x).as_array(), base, rtol=1e-4), name
    hybrid_base, *_ = _setup(sim, hybrid=True)
    hybrid_base.set_up(image.get_uniform_copy(1))
    for name, value in [("sigma_p", 0.3), ("sigma_dp", 1.0)]:
        r, *_ = _setup(sim, hybrid=True, **{name: value})
        r.set_up(image.get_uniform_copy(1))
        assert not np.allclose(
            r.compute_kernelised_image(x, x).as_array(),
            hybrid_base.compute_kernelised_image(x, x).as_array(),
            rtol=1e-4,
        ), name


def test_refusals(sim):
    recon, *_, image = _setup(sim)
    with pytest.raises(pet.error, match="call set_up"):
        recon.compute_kernelised_image(image, image)
    with pytest.raises(pet.error, match="stirgpu stir KOSMAPOSL"):
        pet.KOSMAPOSLReconstructor("recon.par")
    bad, *_ = _setup(sim, num_non_zero_features=0)
    with pytest.raises(pet.error, match="number of non-zero feature elements 0"):
        bad.set_up(image.get_uniform_copy(1))
    none = pet.KOSMAPOSLReconstructor()
    with pytest.raises(pet.error, match="expected ImageData"):
        none.set_anatomical_prior(np.ones(3))


@pytest.mark.gpu
def test_on_a_gpu_is_the_cpus(sim):
    """The same subiterations and kernelised image on the CUDA backend equal the CPU's to float32
    summation order of the projections."""
    import stirgpu

    results = []
    for backend in ("cpu", "cuda"):
        with stirgpu.config(backend=backend):
            recon, *_, image = _setup(sim, num_subsets=4, backend=backend, hybrid=True)
            alpha = image.get_uniform_copy(1)
            recon.set_up(alpha)
            recon.set_current_estimate(alpha)
            for _ in range(3):
                recon.update_current_estimate()
            estimate = recon.get_current_estimate()
            results.append((estimate.as_array(), recon.compute_kernelised_image(estimate, estimate).as_array()))
    for cpu, gpu in zip(results[0], results[1], strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5 * cpu.max())
