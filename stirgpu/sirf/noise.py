"""SIRF's ``PoissonNoiseGenerator``: STIR's ``GeneralisedPoissonNoiseGenerator`` on acquisition data.

What STIR draws for a bin of value ``v`` (``mu = v * scaling_factor`` in float32):

* ``mu > 60``: a normal deviate of mean ``mu`` and variance ``mu``, rounded to the nearest
  integer, negative results 0 (STIR's approximation of a large Poisson count);
* otherwise the Poisson count at a uniform ``u`` by inversion of the cumulative sums of
  ``mu^k / k!`` against ``exp(mu) u``, with ``u`` at most ``1 - 1e-6`` (so the far tail is cut);
  ``mu <= 0`` gives 0;
* with ``preserve_mean`` the count divided by ``scaling_factor`` (float32), else the count.

The distribution is STIR's; the random numbers are not.  STIR draws from Boost's Mersenne
twister and Ziggurat normal in one process-wide stream (seed 43 at construction); here each
generator has its own :func:`numpy.random.default_rng` stream (seed 43 unless ``set_seed``), drawn
chunk by chunk in the data's order, so a seed gives the same noise every time, but not STIR's.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from .acquisition_data import AcquisitionData
from .errors import InputError, InputTypeError, error, translate_class_errors

__all__ = ["PoissonNoiseGenerator", "stir_poisson_counts"]

_F = np.float32
_NORMAL_ABOVE = _F(60)
_MAX_U = 1 - 1.0e-6


def _inverted_poisson(mu: np.ndarray, u: np.ndarray) -> np.ndarray:
    """STIR's inversion: the smallest n with sum_{k<=n} mu^k / k! >= exp(mu) u (float64)."""
    upper = np.exp(mu) * np.minimum(u, _MAX_U)
    n = np.zeros(mu.shape, dtype=np.int64)
    active = np.flatnonzero(upper > 1)  # the sum starts at 1 (k = 0)
    accum, term = np.ones(active.size), np.ones(active.size)
    k = 1
    while active.size:
        term *= mu[active] / k
        accum += term
        n[active] += 1
        going = accum < upper[active]
        active, accum, term = active[going], accum[going], term[going]
        k += 1
    return n


def stir_poisson_counts(values: np.ndarray, scaling_factor: np.float32, rng: np.random.Generator) -> np.ndarray:
    """Counts drawn as STIR draws them for float32 ``values`` times ``scaling_factor`` (module docstring)."""
    mu = np.asarray(values, dtype=_F) * scaling_factor
    counts = np.zeros(mu.shape, dtype=np.int64)
    large = mu > _NORMAL_ABOVE
    if large.any():
        m = mu[large].astype(np.float64)
        drawn = rng.standard_normal(m.shape) * np.sqrt(m) + m
        counts[large] = np.where(drawn <= 0, 0, np.floor(drawn + 0.5)).astype(np.int64)
    small = ~large
    if small.any():
        counts[small] = _inverted_poisson(mu[small].astype(np.float64), rng.random(int(small.sum())))
    return counts


@translate_class_errors
class PoissonNoiseGenerator:
    """``PoissonNoiseGenerator(scaling_factor=1.0, preserve_mean=False)``: ``set_seed``,
    ``process(acq_data)`` then ``get_output()``, or ``generate_noisy_data(acq_data)``."""

    def __init__(self, scaling_factor=1.0, preserve_mean=False):
        if isinstance(scaling_factor, bool) or not isinstance(scaling_factor, (Real, np.number)):
            raise InputTypeError(f"PoissonNoiseGenerator: scaling_factor must be a number, not {scaling_factor!r}")
        if not float(scaling_factor) > 0:
            raise InputError(f"PoissonNoiseGenerator: scaling_factor must be positive, got {scaling_factor!r}")
        self._scaling = _F(scaling_factor)
        self._preserve_mean = bool(preserve_mean)
        self._rng = np.random.default_rng(43)
        self._output: AcquisitionData | None = None

    def set_seed(self, s) -> None:
        """A new stream from seed ``s`` (a positive integer; STIR refuses 0)."""
        if isinstance(s, bool) or not isinstance(s, (Integral, np.integer)):
            raise InputTypeError(f"PoissonNoiseGenerator.set_seed: the seed must be an integer, not {s!r}")
        if s <= 0:
            raise InputError(f"PoissonNoiseGenerator.set_seed: the seed must be positive, got {s}")
        self._rng = np.random.default_rng(int(s))

    def generate_noisy_data(self, acq_data) -> AcquisitionData:
        """New acquisition data (stored as the storage scheme says) holding a noisy copy of ``acq_data``."""
        if not isinstance(acq_data, AcquisitionData):
            raise InputTypeError(f"PoissonNoiseGenerator: expected AcquisitionData, not {type(acq_data).__name__}")
        return acq_data._apply(self._noisy_piece, (), None, "PoissonNoiseGenerator")

    def _noisy_piece(self, xp, values):
        host = values.get() if xp is not np else values
        counts = stir_poisson_counts(host, self._scaling, self._rng).astype(_F)
        if self._preserve_mean:
            counts /= self._scaling
        return xp.asarray(counts)

    def process(self, acq_data) -> None:
        self._output = self.generate_noisy_data(acq_data)

    def get_output(self) -> AcquisitionData:
        if self._output is None:
            raise error("Noise generating not done")
        return self._output
