"""OSEM's fused operations: ``forward_back_ratio`` and ``sensitivity``.

The element-wise rule is checked bin by bin against a plain-Python transcription of STIR's
``divide_and_truncate`` / ``accumulate_loglikelihood`` (recon_array_functions.cxx), and the
fused chunk programs against the unfused composition (forward project into a store, divide
with numpy, back project).  The fused and unfused paths compute identical bins; the back
projections may group bins differently, so images agree to float32 summation order (2e-6
of the maximum).  Log-likelihoods are float64 sums of ~10^5 terms in different orders
(1e-9 relative).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import BACK_RTOL, all_views, phantom, random_proj_data, small_geometry

from stirgpu.formats import ProjDataInMemory
from stirgpu.projectors import BackProjector, ProjectorPair
from stirgpu.projectors.poisson import MAX_QUOTIENT, poisson_quotient


def stir_divide_and_truncate(y, ybar):
    """STIR's rule, bin by bin, for one viewgram (Python floats rounded to float32)."""
    f32 = np.float32
    small = max(f32(y.max()) * f32(1e-6), f32(0))
    out = np.zeros_like(y)
    for idx in np.ndindex(y.shape):
        num, den = f32(y[idx]), f32(ybar[idx])
        if num <= small:
            out[idx] = 0
        elif num > f32(10000) * den:
            out[idx] = 10000
        else:
            out[idx] = num / den
    return out


def stir_loglik(y, ybar):
    """STIR's accumulate_loglikelihood for one viewgram (float64 sum)."""
    f32 = np.float32
    small = max(f32(y.max()) * f32(1e-6), f32(0))
    total = 0.0
    for idx in np.ndindex(y.shape):
        num = f32(y[idx])
        est = max(f32(ybar[idx]), num / f32(10000))
        total += -float(est) if num <= small else float(num) * math.log(float(est)) - float(est)
    return total


def test_quotient_follows_stirs_rule_bin_by_bin():
    """poisson_quotient equals STIR's divide_and_truncate per viewgram, including 0/0 -> 0,
    y > 0 over ybar = 0 -> 10000, negative y -> 0, tiny ybar capped at 10000, an all-zero
    viewgram -> 0, y below 1e-6 of the viewgram's maximum -> 0; and the log-likelihood equals
    STIR's accumulate_loglikelihood."""
    rng = np.random.default_rng(0)
    y = rng.poisson(5, size=(3, 4, 6)).astype(np.float32)
    fwd = rng.random((3, 4, 6)).astype(np.float32) * 4
    y[0, 0, :3] = [0, 3, -1]
    fwd[0, 0, :3] = [0, 0, 2]
    fwd[0, 1, 0] = 1e-7  # -> capped quotient
    y[1] = 0  # whole viewgram zero
    y[2, 0, 0] = 1e-7  # below 1e-6 of the viewgram max -> 0
    ll = np.zeros(1)
    q = poisson_quotient(np, fwd, y, loglik=ll)
    ref = np.stack([stir_divide_and_truncate(y[i], fwd[i]) for i in range(3)])
    assert np.array_equal(q, ref)
    assert q[0, 0, 1] == MAX_QUOTIENT and q[0, 0, 0] == 0 and q[0, 0, 2] == 0 and q[0, 1, 0] == MAX_QUOTIENT
    assert q[2, 0, 0] == 0 and np.all(q[1] == 0)
    assert ll[0] == pytest.approx(sum(stir_loglik(y[i], fwd[i]) for i in range(3)), rel=1e-12)


def test_quotient_with_background_and_factors():
    """With f and the background b: ybar = fwd/f + b (float32), quotient divided by f again;
    bins with f == 0 are left out (quotient and log-likelihood term 0)."""
    rng = np.random.default_rng(1)
    shape = (2, 3, 5)
    y = rng.poisson(4, size=shape).astype(np.float32) + 1
    fwd = (rng.random(shape) * 3).astype(np.float32)
    b = (rng.random(shape) * 0.5).astype(np.float32)
    f = (1 + rng.random(shape)).astype(np.float32)
    f[0, 0, 0] = 0
    ll = np.zeros(1)
    q = poisson_quotient(np, fwd, y, b, f, loglik=ll)
    ok = f != 0
    ybar = np.where(ok, fwd / np.where(ok, f, 1), 0).astype(np.float32) + b
    ref = np.stack([stir_divide_and_truncate(y[i], ybar[i]) for i in range(2)])
    ref = np.where(ok, ref / np.where(ok, f, 1), 0)
    assert np.array_equal(q, ref)
    ybar_ll = ybar.copy()
    ybar_ll[0, 0, 0] = 1.0  # any positive value: that term is excluded below
    manual = sum(stir_loglik(y[i], ybar_ll[i]) for i in range(2))
    num, est = float(y[0, 0, 0]), max(float(ybar_ll[0, 0, 0]), float(y[0, 0, 0]) / 10000)
    manual -= num * math.log(est) - est
    assert ll[0] == pytest.approx(manual, rel=1e-9)


@pytest.fixture
def osem_case():
    pdi, info = small_geometry()
    img = phantom(info)
    measured = random_proj_data(pdi, seed=11)
    background = random_proj_data(pdi, seed=12)
    factors = random_proj_data(pdi, seed=13, low=1.0)
    for s in pdi.segment_nums:  # Poisson-like counts, some zero; factors >= 1
        m = all_views(measured, s)
        measured.write_views(np.floor(m * 6).astype(np.float32), s, range(pdi.get_num_views()))
        b = all_views(background, s)
        background.write_views((0.2 * b).astype(np.float32), s, range(pdi.get_num_views()))
    return pdi, info, img, measured, background, factors


@pytest.mark.parametrize("with_b, with_f", [(False, False), (True, False), (False, True), (True, True)])
def test_fused_ratio_equals_unfused_composition(backend, osem_case, with_b, with_f):
    """forward_back_ratio(x, y, s, K, b, f) == back_project(quotient(y, forward(x)/f + b) / f)
    over subset s, computed unfused through full-size stores; the log-likelihood equals the
    numpy sum over the subset's views."""
    pdi, info, img, y, b, f = osem_case
    b = b if with_b else None
    f = f if with_f else None
    pp = ProjectorPair(backend=backend, max_views_per_chunk=3)
    pp.set_up(pdi, info)
    fused, ll = pp.forward_back_ratio(
        img, y, subset_num=1, num_subsets=3, background=b, multiplicative=f, return_loglik=True
    )
    views = pdi.subset_views(1, 3)
    fwd = ProjDataInMemory(pdi)
    pp.get_forward_projector().forward_project(fwd, img, subset_num=1, num_subsets=3)
    ratio = ProjDataInMemory(pdi)
    ll_ref = np.zeros(1)
    for s in pdi.segment_nums:
        q = poisson_quotient(
            np,
            fwd.read_views(s, views),
            y.read_views(s, views),
            None if b is None else b.read_views(s, views),
            None if f is None else f.read_views(s, views),
            loglik=ll_ref,
        )
        ratio.write_views(q, s, views)
    unfused = pp.get_back_projector().back_project(None, ratio, subset_num=1, num_subsets=3)
    np.testing.assert_allclose(fused, unfused, rtol=0, atol=BACK_RTOL * unfused.max())
    assert ll == pytest.approx(ll_ref[0], rel=1e-9 if backend == "cpu" else 1e-6)
    assert fused.max() > 0


def test_fused_ratio_output_modes(osem_case):
    """out_image receives the result (replaced, or added with accumulate); without out_image a
    new array is returned; image=None uses set_input's image.  One CPU worker, so repeated calls
    sum in the same order (bitwise comparisons)."""
    pdi, info, img, y, _, _ = osem_case
    pp = ProjectorPair(backend="cpu", devices=[0])
    pp.set_up(pdi, info)
    ref = pp.forward_back_ratio(img, y)
    out = np.full(info.shape, 2.0, np.float32)
    pp.forward_back_ratio(img, y, out_image=out)
    assert np.array_equal(out, ref)
    pp.forward_back_ratio(img, y, out_image=out, accumulate=True)
    np.testing.assert_allclose(out, 2 * ref, rtol=1e-6)
    pp.set_input(img)
    assert np.array_equal(pp.forward_back_ratio(None, y), ref)


def test_sensitivity_is_back_projection_of_inverse_factors(backend, osem_case):
    """sensitivity(s, K, f) == back_project(1/f) over subset s (bins with f == 0 contribute 0);
    sensitivity without factors == back_project(ones)."""
    pdi, info, _, _, _, f = osem_case
    f0 = ProjDataInMemory(pdi, fill=f)
    v = all_views(f0, 0)
    v[3, 2, 5] = 0
    f0.write_views(v, 0, range(pdi.get_num_views()))
    inv, ones = ProjDataInMemory(pdi), ProjDataInMemory(pdi, fill=1.0)
    for s in pdi.segment_nums:
        x = all_views(f0, s)
        inv.write_views(
            np.where(x != 0, np.float32(1) / np.where(x != 0, x, 1), 0).astype(np.float32),
            s,
            range(pdi.get_num_views()),
        )
    pp = ProjectorPair(backend=backend, max_views_per_chunk=4)
    pp.set_up(pdi, info)
    bp = BackProjector(backend=backend, max_views_per_chunk=4)
    bp.set_up(pdi, info)
    sens = pp.sensitivity(None, 2, 4, multiplicative=f0)
    ref = bp.back_project(None, inv, 2, 4)
    np.testing.assert_allclose(sens, ref, rtol=0, atol=BACK_RTOL * ref.max())
    plain = pp.sensitivity(None, 2, 4)
    ref1 = bp.back_project(None, ones, 2, 4)
    np.testing.assert_allclose(plain, ref1, rtol=0, atol=BACK_RTOL * ref1.max())
    assert pp.last_stats.bytes_read == 0  # no factors: nothing is read, ones are made on the device


def test_fused_ratio_reads_only_the_subset(osem_case):
    """The fused call reads exactly the subset's bins of each input (cost follows the data
    touched) and writes nothing."""
    pdi, info, img, y, b, f = osem_case
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    pp.forward_back_ratio(img, y, 0, 4, background=b, multiplicative=f)
    st = pp.last_stats
    assert st.bins == pdi.total_num_bins // 4
    assert st.bytes_read == 3 * 4 * st.bins and st.bytes_written == 0


def test_old_name_of_the_background_is_refused_naming_the_new_one(osem_case):
    """``additive=`` (the old name of the measured-units ``background``) stops with a TypeError
    that names both and says how STIR's additive sinogram maps onto it, rather than being taken
    for STIR's additive sinogram (normalised units) or failing with Python's bare message."""
    pdi, info, img, y, b, f = osem_case
    pp = ProjectorPair(backend="cpu")
    pp.set_up(pdi, info)
    with pytest.raises(TypeError, match=r"ProjectorPair\.forward_back_ratio\(\).*'additive'.*'background'.*a / f"):
        pp.forward_back_ratio(img, y, 0, 4, additive=b, multiplicative=f)
    assert pp.last_stats is None  # refused before any work
    fwd = np.ones((2, 3, 5), np.float32)
    with pytest.raises(TypeError, match=r"poisson_quotient\(\).*'additive'.*'background'"):
        poisson_quotient(np, fwd, fwd, additive=fwd)
