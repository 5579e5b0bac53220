"""Separable 3-D convolution in STIR's float32 arithmetic, what ``stirgpu.filters`` applies
(:mod:`.api`; :mod:`.cpu`: the numba kernel).  Importing it compiles nothing."""

from .api import GENERAL, SYMMETRIC, convolve_axis, convolve_axis_numba, convolve_axis_xp

__all__ = ["SYMMETRIC", "GENERAL", "convolve_axis", "convolve_axis_numba", "convolve_axis_xp"]
