"""STIR's kernelised image of KOSMAPOSL (the kernel method, hybrid or anatomical alone):
:mod:`.api` (validation, the distance table, standard deviations), :mod:`.cpu` (numba).
Importing it compiles nothing."""

from .api import distance_table, kernelised_image, standard_deviation

__all__ = ["distance_table", "kernelised_image", "standard_deviation"]
