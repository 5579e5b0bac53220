"""SIRF's image data processors: ``TruncateToCylinderProcessor`` and ``SeparableGaussianImageFilter``.

SIRF's ``ImageDataProcessor`` protocol: ``apply(image)`` changes ``image`` in place;
``set_input(image)`` then ``process()`` (or ``process(image)``) changes a copy, returned and kept
for ``get_output()``; ``process()`` without an input is an error.

* ``TruncateToCylinderProcessor`` is STIR's ``TruncateToCylindricalFOVImageProcessor``: every
  plane is zeroed outside the cylinder inscribed in the image's x index range (STIR's
  ``truncate_rim`` with rim 0, in index space: voxel sizes play no part), keeping the voxels
  strictly inside (the default) or also those at the radius
  (``set_strictly_less_than_radius(False)``).  :func:`stirgpu.kernels.fov.cylindrical_fov_mask`
  holds STIR's rule; values outside are set to 0 (a NaN there becomes 0, as in STIR).
* ``SeparableGaussianImageFilter`` is STIR's ``Separable Gaussian`` filter
  (:class:`stirgpu.filters.SeparableGaussianFilter`, STIR's numbers bit for bit): FWHMs in mm
  given as (z, y, x), maximum kernel sizes (-1: automatic), normalisation on by default.  As in
  STIR, the kernels are built once, at ``set_up(image)`` or the first ``apply``, for that image's
  voxel sizes; setters called afterwards do not change them (STIR's ``DataProcessor`` is set up
  once).
"""

from __future__ import annotations

import dataclasses
from numbers import Integral, Real

import numpy as np

from ..filters import PreparedFilter, SeparableGaussianFilter
from ..kernels.fov import apply_cylindrical_fov, cylindrical_fov_mask
from .errors import InputError, InputTypeError, error, translate_class_errors
from .image_data import ImageData

__all__ = ["ImageDataProcessor", "TruncateToCylinderProcessor", "SeparableGaussianImageFilter"]


def _image(what: str, image) -> ImageData:
    if not isinstance(image, ImageData):
        raise InputTypeError(f"{what}: expected ImageData, not {type(image).__name__}")
    image.image_info  # noqa: B018 -- an empty image is refused here, with ImageData's message
    return image


@translate_class_errors
class ImageDataProcessor:
    """SIRF's ``ImageDataProcessor``: ``apply`` in place, or ``set_input`` / ``process`` / ``get_output``."""

    def __init__(self):
        self.input: ImageData | None = None
        self.output: ImageData | None = None

    def apply(self, image) -> None:
        """Process ``image`` in place."""
        self._apply(_image("apply", image))

    def _apply(self, image: ImageData) -> None:
        raise NotImplementedError

    def set_input(self, input) -> None:  # noqa: A002 -- SIRF's argument name
        self.input = _image("set_input", input)

    def process(self, input=None) -> ImageData:  # noqa: A002
        """A processed copy of the input (``input``, else the one set); kept for :meth:`get_output`."""
        if input is not None:
            self.set_input(input)
        if self.input is None:
            raise error("input image not set")
        output = self.input.clone()
        self._apply(output)
        self.output = output
        return output

    def get_output(self) -> ImageData | None:
        return self.output


@translate_class_errors
class TruncateToCylinderProcessor(ImageDataProcessor):
    """Zeroes the image outside the cylinder of the image's xy size (module docstring)."""

    def __init__(self):
        super().__init__()
        self._strictly_less_than_radius = True

    def set_strictly_less_than_radius(self, flag) -> None:
        """Whether the voxels kept lie strictly inside the radius (True, the default) or at it too."""
        if not isinstance(flag, (bool, np.bool_)):
            raise InputTypeError(f"set_strictly_less_than_radius: expected True or False, not {flag!r}")
        self._strictly_less_than_radius = bool(flag)

    def get_strictly_less_than_radius(self) -> bool:
        return self._strictly_less_than_radius

    def _apply(self, image: ImageData) -> None:
        mask = cylindrical_fov_mask(image.image_info, 0, self._strictly_less_than_radius)
        apply_cylindrical_fov(image.array, mask, out=image.array)


def _three(what: str, values, kind) -> tuple:
    try:
        items = tuple(values)
    except TypeError:
        raise InputTypeError(f"{what}: expected 3 numbers (z, y, x), not {type(values).__name__}") from None
    if len(items) != 3 or not all(isinstance(v, kind) and not isinstance(v, bool) for v in items):
        raise InputError(f"{what}: expected 3 numbers (z, y, x), got {values!r}")
    return items


@translate_class_errors
class SeparableGaussianImageFilter(ImageDataProcessor):
    """STIR's separable Gaussian filter (module docstring)."""

    def __init__(self):
        super().__init__()
        self._filter = SeparableGaussianFilter()
        self._prepared: PreparedFilter | None = None

    def set_fwhms(self, fwhms) -> None:
        """FWHMs in mm, (z, y, x); 0 leaves that direction unfiltered (STIR's default)."""
        z, y, x = (float(np.float32(v)) for v in _three("set_fwhms", fwhms, (Real, np.number)))
        fwhm = (z, y, x)
        self._filter = dataclasses.replace(self._filter, fwhm=fwhm)

    def set_max_kernel_sizes(self, sizes) -> None:
        """Maximum kernel sizes in voxels, (z, y, x); -1 (the default): as large as the Gaussian needs."""
        z, y, x = (int(v) for v in _three("set_max_kernel_sizes", sizes, (Integral, np.integer)))
        self._filter = dataclasses.replace(self._filter, max_kernel_size=(z, y, x))

    def set_normalise(self, norm=True) -> None:
        """Whether the kernels sum to 1 (the default)."""
        self._filter = dataclasses.replace(self._filter, normalise=bool(norm))

    def set_up(self, image) -> None:
        """Build the kernels for ``image``'s voxel sizes (STIR's ``set_up``)."""
        self._prepared = self._filter.prepare(_image("set_up", image).image_info.voxel_size)

    def _apply(self, image: ImageData) -> None:
        if self._prepared is None:
            self.set_up(image)
        assert self._prepared is not None
        self._prepared.apply_in_place(image.array)
