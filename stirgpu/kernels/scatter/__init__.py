"""STIR's single scatter simulation kernels (:mod:`.api`: what they compute and take; :mod:`.cpu`:
numba).  Importing it compiles nothing."""

from .api import PHYSICS_FIELDS, activity_table, attenuation_table, single_scatter

__all__ = ["PHYSICS_FIELDS", "activity_table", "attenuation_table", "single_scatter"]
