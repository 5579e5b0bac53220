"""STIR's single scatter simulation kernels (:mod:`.api`: what they compute and take; :mod:`.cpu`:
numba).  Importing it compiles nothing."""

from .api import PHYSICS_FIELDS, line_integral_tables, single_scatter

__all__ = ["PHYSICS_FIELDS", "line_integral_tables", "single_scatter"]
