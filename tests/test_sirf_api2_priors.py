"""SIRF's ``LogcoshPrior`` and ``PLSPrior`` in stirgpu.sirf.

* ``LogcoshPrior`` (scalar, kappa, penalisation factor): value, gradient and Hessian times a
  vector equal to STIR 6.5's ``LogcoshPrior`` through its Python module;
* the checks SIRF's tests_qp_lc_rdp.py makes of every prior: ``grad(x + dx) - grad(x)`` close to
  ``H(x) dx``, and kappa * 2 with a quarter of the penalisation factor giving the same gradient;
* ``PLSPrior``: STIR's Parallel Level Sets prior (value, gradient, anatomical differences, norm).
"""

from __future__ import annotations

import numpy as np
import pytest
from stir_grids import stir_grid

import stirgpu.sirf as pet
from stirgpu.geometry import ImageInfo

SHAPE, VOXEL = (5, 8, 9), (3.27, 2.1, 2.5)


def _images(seed=0):
    rng = np.random.default_rng(seed)
    info = ImageInfo(SHAPE, VOXEL)
    x = rng.uniform(0.0, 4.0, SHAPE).astype(np.float32)
    kappa = rng.uniform(0.2, 2.0, SHAPE).astype(np.float32)
    v = rng.normal(size=SHAPE).astype(np.float32)
    return info, x, kappa, v


def _logcosh(beta, scalar, kappa=None, info=None):
    prior = pet.LogcoshPrior()
    prior.set_scalar(scalar)
    prior.set_penalisation_factor(beta)
    if kappa is not None:
        prior.set_kappa(pet.ImageData.from_array(kappa.copy(), info))
    return prior


def test_logcosh_parameters_and_defaults():
    prior = pet.LogcoshPrior()
    assert prior.get_scalar() == 1.0 and prior.get_penalisation_factor() == 0.0 and prior.is_zero()
    prior.set_scalar(2.5)
    assert prior.get_scalar() == 2.5
    assert isinstance(prior, pet.Prior)
    with pytest.raises(pet.error, match="scalar"):
        prior.set_scalar(0)


@pytest.mark.stir
@pytest.mark.parametrize("with_kappa", [False, True])
def test_logcosh_is_stirs(stir, with_kappa):
    info, x, kappa, v = _images()
    theirs = stir.LogcoshPrior3DFloat(False, 0.6, 2.7)
    sx = stir_grid(stir, x, VOXEL)
    if with_kappa:
        theirs.set_kappa_sptr(stir_grid(stir, kappa, VOXEL))
    theirs.set_up(sx)
    grad = sx.get_empty_copy()
    theirs.compute_gradient(grad, sx)
    hess = sx.get_empty_copy()
    hess.fill(0)
    theirs.accumulate_Hessian_times_input(hess, sx, stir_grid(stir, v, VOXEL))
    G, H = np.asarray(grad.as_array()), np.asarray(hess.as_array())

    mine = _logcosh(0.6, 2.7, kappa if with_kappa else None, info)
    image = pet.ImageData.from_array(x.copy(), info)
    mine.set_up(image)
    assert mine.value(image) == pytest.approx(theirs.compute_value(sx), rel=1e-5)
    assert np.abs(mine.gradient(image).as_array() - G).max() <= 1e-5 * np.abs(G).max()
    h = mine.multiply_with_Hessian(image, pet.ImageData.from_array(v.copy(), info)).as_array()
    assert np.abs(h - H).max() <= 1e-5 * np.abs(H).max()


def test_sirf_prior_checks_hold_for_logcosh():
    """tests_qp_lc_rdp.py's Hessian_test (eps 0.03, relative to |grad(x + dx)|, below 0.01 eps) and
    its kappa check, on a non-uniform image with kappa."""
    info, x, kappa, _ = _images(1)
    prior = _logcosh(4.0, 1.0, kappa, info)
    image = pet.ImageData.from_array(x.copy(), info)
    prior.set_up(image)
    eps = 0.03
    dx = image.clone() * eps + eps / 2
    gy = prior.gradient(image + dx)
    dg = gy - prior.gradient(image)
    assert (dg - prior.multiply_with_Hessian(image, dx)).norm() / gy.norm() < 0.01 * eps
    grad_norm = prior.get_gradient(image).norm()
    prior.set_penalisation_factor(1.0)
    prior.set_kappa(pet.ImageData.from_array(kappa * 2, info))
    prior.set_up(image)
    assert prior.get_gradient(image).norm() == pytest.approx(grad_norm, rel=1e-5)


def _pls(beta, alpha, eta, anatomical, info, kappa=None, only_2d=False):
    prior = pet.PLSPrior()
    prior.set_penalisation_factor(beta)
    prior.set_alpha(alpha)
    prior.set_eta(eta)
    prior.set_only_2D(only_2d)
    prior.set_anatomical_image(pet.ImageData.from_array(anatomical.copy(), info))
    if kappa is not None:
        prior.set_kappa(pet.ImageData.from_array(kappa.copy(), info))
    return prior


@pytest.mark.stir
@pytest.mark.parametrize("with_kappa", [False, True])
@pytest.mark.parametrize("only_2d", [False, True])
def test_pls_is_stirs(stir, with_kappa, only_2d):
    """SIRF's PLSPrior: STIR's PLSPrior value, gradient, anatomical differences and norm (alpha,
    eta, kappa, 2-D or 3-D) to float32 rounding."""
    info, x, kappa, _ = _images(3)
    anatomical = np.random.default_rng(4).uniform(0.0, 10.0, SHAPE).astype(np.float32)
    theirs = stir.PLSPrior3DFloat()
    theirs.set_penalisation_factor(0.7)
    theirs.set_alpha(0.5)
    theirs.set_eta(0.3)
    theirs.set_only_2D(only_2d)
    theirs.set_anatomical_image_sptr(stir_grid(stir, anatomical, VOXEL))
    if with_kappa:
        theirs.set_kappa_sptr(stir_grid(stir, kappa, VOXEL))
    sx = stir_grid(stir, x, VOXEL)
    theirs.set_up(sx)
    grad = sx.get_empty_copy()
    theirs.compute_gradient(grad, sx)
    G = np.asarray(grad.as_array())

    mine = _pls(0.7, 0.5, 0.3, anatomical, info, kappa if with_kappa else None, only_2d)
    image = pet.ImageData.from_array(x.copy(), info)
    mine.set_up(image)
    assert mine.get_alpha() == 0.5 and mine.get_eta() == 0.3 and mine.get_only_2D() == only_2d
    assert mine.value(image) == pytest.approx(theirs.compute_value(sx), rel=1e-6)
    assert np.abs(mine.gradient(image).as_array() - G).max() <= 2e-6 * np.abs(G).max()
    np.testing.assert_allclose(mine.get_norm().as_array(), theirs.get_norm_sptr().as_array(), rtol=1e-6)
    for direction in (1, 2) if only_2d else (0, 1, 2):
        want = theirs.get_anatomical_grad_sptr(direction).as_array()
        np.testing.assert_array_equal(mine.get_anatomical_grad(direction).as_array(), want)


def test_pls_rules():
    """A zero factor gives 0 and a zero gradient (STIR's); set_up needs the anatomical image;
    STIR's PLS has no Hessian, so the Hessian products are refused; the gradient is close to
    finite differences of the value away from the image's last planes (STIR's loop bounds)."""
    info, x, _, _ = _images(5)
    anatomical = np.random.default_rng(6).uniform(0.0, 10.0, SHAPE).astype(np.float32)
    image = pet.ImageData.from_array(x.copy(), info)
    with pytest.raises(pet.error, match="anatomical image"):
        pet.PLSPrior().set_up(image)
    prior = _pls(0.0, 1.0, 1.0, anatomical, info)
    prior.set_up(image)
    assert prior.value(image) == 0 and prior.gradient(image).norm() == 0
    with pytest.raises(pet.error, match="no Hessian"):
        prior.multiply_with_Hessian(image, image)
    prior.set_penalisation_factor(1.0)
    g = prior.gradient(image).as_array()
    for voxel in ((2, 3, 4), (1, 5, 2)):
        step = np.zeros(SHAPE, dtype=np.float64)
        step[voxel] = 1e-2
        up = prior.value(pet.ImageData.from_array((x + step).astype(np.float32), info))
        down = prior.value(pet.ImageData.from_array((x - step).astype(np.float32), info))
        assert (up - down) / 2e-2 == pytest.approx(g[voxel], rel=2e-2, abs=1e-3)


@pytest.mark.gpu
def test_hessian_diagonal_of_a_gpu_image_is_the_hosts(cp):
    """The RDP's Hessian diagonal of an image on a GPU (with a kappa image) stays there and equals
    the host's to float32 rounding."""
    info, x, kappa, _ = _images(2)
    results = []
    for on_gpu in (False, True):
        prior = pet.RelativeDifferencePrior()
        prior.set_penalisation_factor(0.8)
        prior.set_epsilon(0.01)
        arrays = [cp.asarray(a) if on_gpu else a.copy() for a in (x, kappa)]
        prior.set_kappa(pet.ImageData.from_array(arrays[1], info))
        image = pet.ImageData.from_array(arrays[0], info)
        prior.set_up(image)
        diag = prior.compute_Hessian_diagonal(image)
        assert type(diag.array) is type(arrays[0])
        results.append(diag.as_array())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)


@pytest.mark.gpu
def test_pls_of_a_gpu_image_is_the_hosts(cp):
    """PLS's value and gradient of an image on a GPU (anatomical image and kappa on the host)
    equal the host's to float32 rounding; the gradient stays on the GPU."""
    info, x, kappa, _ = _images(7)
    anatomical = np.random.default_rng(8).uniform(0.0, 10.0, SHAPE).astype(np.float32)
    prior = _pls(0.7, 0.5, 0.3, anatomical, info, kappa)
    host = pet.ImageData.from_array(x.copy(), info)
    gpu = pet.ImageData.from_array(cp.asarray(x), info)
    prior.set_up(host)
    g = prior.gradient(gpu)
    assert type(g.array) is type(gpu.array)
    assert prior.value(gpu) == pytest.approx(prior.value(host), rel=1e-6)
    np.testing.assert_allclose(g.as_array(), prior.gradient(host).as_array(), rtol=1e-5, atol=1e-6)
