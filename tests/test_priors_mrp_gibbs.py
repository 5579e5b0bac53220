"""STIR's median root prior (FilterRootPrior + Median) and STIR 6.3's Gibbs penalties
(stirgpu.priors), without STIR: their formulas from STIR's sources, checked on small images.
tests/stir_differential/test_osmaposl_mrp_gibbs_vs_stir.py compares them with STIR itself."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.errors import StirGpuError
from stirgpu.geometry import ImageInfo
from stirgpu.kernels.priors.median import stir_median_filter
from stirgpu.priors import (
    FilterRootPrior,
    GibbsQuadraticPenalty,
    GibbsRelativeDifferencePenalty,
    QuadraticPrior,
    RelativeDifferencePrior,
    make_prior,
)

INFO = ImageInfo((5, 7, 6), (2.5, 2.0, 2.0))


def _image(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random(INFO.shape) + 0.1).astype(np.float32)


def _true_median(x: np.ndarray, radius) -> np.ndarray:
    rz, ry, rx = radius
    out = np.empty_like(x)
    for z, y, i in np.ndindex(x.shape):
        out[z, y, i] = np.median(
            x[max(z - rz, 0) : z + rz + 1, max(y - ry, 0) : y + ry + 1, max(i - rx, 0) : i + rx + 1]
        )
    return out


def test_the_median_is_the_true_one_inside_the_image():
    """Where the whole box lies in the image (an odd number of voxels) STIR's median is the median."""
    x = _image()
    for radius in ((1, 1, 1), (0, 1, 2), (1, 0, 0)):
        got, true = stir_median_filter(x, radius), _true_median(x, radius)
        rz, ry, rx = radius
        inner = (slice(rz, x.shape[0] - rz), slice(ry, x.shape[1] - ry), slice(rx, x.shape[2] - rx))
        assert np.array_equal(got[inner], true[inner]), radius
    assert np.array_equal(stir_median_filter(x, (0, 0, 0)), x)


def test_the_median_keeps_stirs_stale_buffer_at_the_edges():
    """STIR runs nth_element over its whole buffer (3 places for a radius of 1 in x), zeros at first
    and then what the last voxel left: for [3, 1] the first voxel's 2 values and a 0 sort to
    [0, 1, 3], and the mean of places 1 and 0 is 0.5 (a true median: 2); the second voxel's
    values overwrite places 0 and 1 of [0, 1, 3]: [3, 1, 3] -> [1, 3, 3], giving 2."""
    x = np.array([[[3.0, 1.0]]], dtype=np.float32)
    assert stir_median_filter(x, (0, 0, 1)).tolist() == [[[0.5, 2.0]]]


def test_mrp_gradient_is_stirs_formula():
    """beta (x / median(x) - 1) in float32, the quotient bounded by +-1000 (sign of x times sign
    of the median, 0 counting positive); a zero factor or no filter gives a zero gradient; no
    penalty value (STIR's is 0)."""
    x = _image(1)
    x[2, 3, 3] = 5000.0  # a spike far above its neighbours' median: the bound
    x[0, 0, 0] = -2.0  # a negative voxel (the sign rule)
    prior = make_prior("FilterRootPrior", penalisation_factor=0.5, median_mask_radius=(1, 1, 1))
    prior.set_up(INFO)
    g = prior.get_gradient(x)
    m = stir_median_filter(x, (1, 1, 1))
    inside = np.abs(x) < 1000 * np.abs(m)  # (a median of 0 at an edge: outside)
    q = np.where(
        inside, np.divide(x, m, where=inside, out=np.ones_like(x)), 1000 * np.sign(x) * np.where(m >= 0, 1, -1)
    )
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 0.5 * (q - 1), rtol=1e-6, atol=1e-6)
    assert g[2, 3, 3] == np.float32(0.5) * (np.float32(1000) - np.float32(1))
    assert prior.get_value(x) == 0.0 and not prior.is_convex()
    for zero in (FilterRootPrior(0.0, median_mask_radius=(1, 1, 1)), FilterRootPrior(1.0)):
        zero.set_up(INFO)
        assert not zero.get_gradient(x).any()
    with pytest.raises(StirGpuError, match="set_up"):
        FilterRootPrior(1.0).get_gradient(x)
    with pytest.raises(StirGpuError, match="mask radii"):
        FilterRootPrior(1.0, median_mask_radius=(1, -1, 1))


@pytest.mark.parametrize(
    "gibbs, older",
    [
        (GibbsQuadraticPenalty(0.7), QuadraticPrior(0.7)),
        (GibbsRelativeDifferencePenalty(0.7, gamma=1.5), RelativeDifferencePrior(0.7, gamma=1.5, epsilon=1e-7)),
    ],
    ids=["quadratic", "relative-difference"],
)
def test_gibbs_penalties_are_the_older_priors_potentials(gibbs, older, tmp_path):
    """STIR's GibbsPenalty sums beta w phi(x_j, x_k) over ordered pairs and its gradient is
    2 beta sum w d/dx_j phi: the Quadratic and RDP potentials of STIR's older priors (per ordered
    pair), so the same values and gradients -- with the Gibbs RDP's default epsilon 1e-7.  A
    gradient filename prefix writes nothing (STIR's Gibbs penalties write no gradient files)."""
    x = _image(2)
    for p in (gibbs, older):
        p.set_up(INFO)
    assert gibbs.get_value(x) == pytest.approx(older.get_value(x), rel=1e-6)
    np.testing.assert_allclose(gibbs.get_gradient(x), older.get_gradient(x), rtol=1e-6, atol=1e-7)
    gibbs.set_gradient_filename_prefix(tmp_path / "grad_")
    gibbs.get_gradient(x)
    assert gibbs.get_gradient_filename_prefix() is None and not list(tmp_path.iterdir())


def test_the_gibbs_rdp_needs_a_positive_epsilon():
    assert GibbsRelativeDifferencePenalty().get_epsilon() == np.float32(1e-7)
    with pytest.raises(StirGpuError, match="must be > 0"):
        GibbsRelativeDifferencePenalty(1.0, epsilon=0.0)
