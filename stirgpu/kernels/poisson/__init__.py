"""STIR's OSEM quotient and log-likelihood of one chunk, one kernel per chunk (:mod:`.api`: the
rules; :mod:`.cpu`: numba; :mod:`.cuda`: cupy kernels).  Importing it compiles nothing."""

from .api import MAX_QUOTIENT, SMALL_FRACTION, poisson_quotient, viewgram_rows

__all__ = ["SMALL_FRACTION", "MAX_QUOTIENT", "poisson_quotient", "viewgram_rows"]
