"""STIR's image filters: ``Separable Cartesian Metz`` and ``Separable Gaussian``, and the image
processors files select with the same keys: ``Truncate To Cylindrical FOV`` and ``Chained Data
Processor`` (:mod:`.processors`).

Filter objects hold STIR's parameters (frozen, comparable, picklable) and build STIR's 1-D
kernels for a voxel size; the convolutions are :mod:`stirgpu.kernels.convolution`'s::

    from stirgpu.filters import SeparableGaussianFilter
    smooth = SeparableGaussianFilter(fwhm=(6.0, 4.0, 4.0))
    out = smooth.apply(image)                    # a VoxelsOnCartesianGrid, or
    out = smooth.apply(array, voxel_size=(vz, vy, vx))
    prepared = smooth.prepare((vz, vy, vx))      # kernels built once
    prepared.apply_in_place(array)               # numpy (numba) or cupy (on its GPU)

What STIR computes, and the quirks found against it: ``docs/filters.md``.  Importing this
package compiles nothing; numba is loaded when a kernel is first built or applied.
"""

from .gaussian import SeparableGaussianFilter, gaussian_kernel
from .metz import SeparableCartesianMetzFilter, metz_kernel
from .processors import ChainedProcessor, TruncateToCylindricalFOV
from .separable import AxisKernel, PreparedFilter, SeparableImageFilter

__all__ = [
    "SeparableImageFilter",
    "SeparableCartesianMetzFilter",
    "SeparableGaussianFilter",
    "PreparedFilter",
    "AxisKernel",
    "metz_kernel",
    "gaussian_kernel",
    "TruncateToCylindricalFOV",
    "ChainedProcessor",
    "FILTER_TYPES",
]

#: STIR's registered names of the filters stirgpu implements
FILTER_TYPES = {
    f.registered_name: f
    for f in (SeparableCartesianMetzFilter, SeparableGaussianFilter, TruncateToCylindricalFOV, ChainedProcessor)
}
