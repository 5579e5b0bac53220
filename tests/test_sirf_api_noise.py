"""``PoissonNoiseGenerator`` (STIR's ``GeneralisedPoissonNoiseGenerator`` as SIRF drives it).

The random streams differ from STIR's (Boost's generators), so the comparison with the reference
STIR is of distributions: 40000 draws from each at means below and above STIR's switch to a
rounded normal at 60; means, variances and the frequencies of small counts must agree within 5
standard errors (a wrong scaling, a missing rounding or another switch point moves them by tens
of standard errors).  SIRF's protocol and argument checks are tested exactly."""

from __future__ import annotations

import numpy as np
import pytest

import stirgpu.sirf as pet
from stirgpu.formats import ProjDataInMemory
from stirgpu.recon.simulate import demo_geometry
from stirgpu.sirf.noise import stir_poisson_counts

N = 40000


def _agree(a: np.ndarray, b: np.ndarray, mu: float):
    """Means, variances and (for small means) P(0..3) within 5 standard errors."""
    assert abs(a.mean() - b.mean()) <= 5 * np.sqrt(2 * max(mu, 1e-3) / N)
    var_se = np.sqrt(2 * (mu + 2 * mu * mu) / N)
    assert abs(a.var() - b.var()) <= 5 * var_se + 1e-12
    if mu < 10:
        for k in range(4):
            p = max((b == k).mean(), 1 / N)
            assert abs((a == k).mean() - p) <= 5 * np.sqrt(2 * p * (1 - p) / N)


@pytest.mark.stir
@pytest.mark.parametrize("mu", [0.3, 2.5, 17.0, 59.9, 60.5, 300.0])
def test_counts_follow_stirs_distribution(stir, mu):
    gen = stir.GeneralisedPoissonNoiseGenerator(1.0, False)
    theirs = np.array([gen.generate_random(mu) for _ in range(N)])
    mine = stir_poisson_counts(np.full(N, mu, np.float32), np.float32(1), np.random.default_rng(int(mu * 10)))
    assert np.array_equal(mine, np.round(mine)) and mine.min() >= 0
    _agree(mine.astype(np.float64), theirs, mu)


@pytest.mark.stir
def test_scaling_and_preserve_mean_follow_stir(stir):
    """scaling 4 on mean 3: counts of mean 12; with preserve_mean, those counts / 4."""
    for preserve in (False, True):
        gen = stir.GeneralisedPoissonNoiseGenerator(4.0, preserve)
        theirs = np.array([gen.generate_random(3.0) for _ in range(N)])
        counts = stir_poisson_counts(np.full(N, 3.0, np.float32), np.float32(4), np.random.default_rng(5))
        mine = counts / np.float32(4) if preserve else counts.astype(np.float64)
        scale = 4.0 if preserve else 1.0
        _agree(mine * scale, theirs * scale, 12.0)


def _data(value_of_bin):
    pdi, _ = demo_geometry(num_views=6, num_tangential_poss=10)
    data = pet.AcquisitionData(ProjDataInMemory(pdi))
    data.fill(value_of_bin(data.dimensions()))
    return data


def test_sirf_protocol_seeds_and_input_untouched():
    data = _data(lambda shape: np.random.default_rng(0).uniform(0, 90, shape).astype(np.float32))
    before = data.as_array()
    png = pet.PoissonNoiseGenerator()
    with pytest.raises(pet.error, match="Noise generating not done"):
        png.get_output()
    png.set_seed(7)
    assert png.process(data) is None
    noisy = png.get_output()
    assert isinstance(noisy, pet.AcquisitionData) and noisy.dimensions() == data.dimensions()
    np.testing.assert_array_equal(data.as_array(), before)
    values = noisy.as_array()
    assert np.array_equal(values, np.round(values)) and values.min() >= 0 and values.max() > 60
    again = pet.PoissonNoiseGenerator()
    again.set_seed(7)
    np.testing.assert_array_equal(again.generate_noisy_data(data).as_array(), values)
    other = pet.PoissonNoiseGenerator()
    other.set_seed(8)
    assert not np.array_equal(other.generate_noisy_data(data).as_array(), values)
    # the default seed (STIR's 43) gives the same noise in every fresh generator
    np.testing.assert_array_equal(
        pet.PoissonNoiseGenerator().generate_noisy_data(data).as_array(),
        pet.PoissonNoiseGenerator().generate_noisy_data(data).as_array(),
    )
    # a generator's stream goes on: its second draw differs from its first
    assert not np.array_equal(png.generate_noisy_data(data).as_array(), values)


def test_preserve_mean_divides_the_counts_and_zero_or_negative_give_zero():
    data = _data(lambda shape: np.where(np.arange(np.prod(shape)).reshape(shape) % 2, 5.0, -3.0).astype(np.float32))
    values = pet.PoissonNoiseGenerator(2.0, True).generate_noisy_data(data).as_array()
    negative = data.as_array() < 0
    assert (values[negative] == 0).all()
    np.testing.assert_array_equal(values * 2, np.round(values * 2))
    # counts ~ Poisson(2 * 5) halved: the mean is 5, with standard error sqrt(10 / M) / 2
    m = int((~negative).sum())
    assert abs(values[~negative].mean() - 5.0) < 5 * np.sqrt(10 / m) / 2


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: pet.PoissonNoiseGenerator(0.0), "scaling_factor must be positive"),
        (lambda: pet.PoissonNoiseGenerator("2"), "scaling_factor must be a number"),
        (lambda: pet.PoissonNoiseGenerator().set_seed(0), "the seed must be positive"),
        (lambda: pet.PoissonNoiseGenerator().set_seed(1.5), "the seed must be an integer"),
        (lambda: pet.PoissonNoiseGenerator().process(np.ones(3)), "expected AcquisitionData"),
    ],
)
def test_bad_arguments_are_one_line_errors(call, match):
    with pytest.raises(pet.error, match=match) as info:
        call()
    assert "\n" not in str(info.value)
