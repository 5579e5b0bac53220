"""STIR's kernelised image of KOSMAPOSL (the kernel method, hybrid or anatomical alone):
:mod:`.api` (validation, dispatch, the distance table, standard deviations), :mod:`.cpu` (numba),
:mod:`.cuda` (``cuda/kernelised.cu``).
Importing it compiles nothing."""

from .api import anatomical_stack, distance_table, feature_norms, kernelised_image, standard_deviation

__all__ = ["anatomical_stack", "distance_table", "feature_norms", "kernelised_image", "standard_deviation"]
