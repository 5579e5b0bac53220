"""STIR's ``Truncate To Cylindrical FOV`` and ``Chained Data Processor`` image processors.

Neither is a convolution, but OSMAPOSL and OSSPS files select them with the same keys as the
separable filters (``inter-iteration filter type`` ...), so they share the filters' interface.
Facts from STIR's ``TruncateToCylindricalFOVImageProcessor.cxx`` and ``ChainedDataProcessor.cxx``:

* ``Truncate To Cylindrical FOV`` zeroes, in every plane, the voxels outside the cylinder of
  ``truncate_rim(image, 0, strictly_less_than_radius)`` (index space, from the image's x range:
  :func:`stirgpu.kernels.fov.cylindrical_fov_mask`); ``strictly_less_than_radius`` (default 1)
  0 keeps the voxels at the radius too.  The mask depends on the image's index range, so it is
  built for an image geometry (:meth:`~.SeparableImageFilter.prepare_for`), not a voxel size.
* ``Chained Data Processor`` applies ``Data Processor to apply first``, then ``... second``
  (either may be None), each in place, with nothing between them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..errors import StirGpuError
from .separable import SeparableImageFilter

__all__ = ["TruncateToCylindricalFOV", "ChainedProcessor", "PreparedTruncation", "PreparedChain"]


class PreparedTruncation:
    """The cylinder's (ny, nx) mask of one image geometry; zeroes the voxels outside it."""

    name = "Truncate To Cylindrical FOV"

    def __init__(self, mask):
        self.mask = mask

    def apply_in_place(self, array):
        from ..kernels.fov import apply_cylindrical_fov

        return apply_cylindrical_fov(array, self.mask, out=array)


class PreparedChain:
    """Prepared processors applied one after the other, in place."""

    name = "Chained Data Processor"

    def __init__(self, steps: tuple):
        self.steps = steps

    def apply_in_place(self, array):
        for step in self.steps:
            step.apply_in_place(array)
        return array


def _needs_geometry(name: str):
    raise StirGpuError(
        f"{name}: needs the image's index range, not only its voxel size: use prepare_for(image_info) "
        "or apply() to a VoxelsOnCartesianGrid"
    )


@dataclasses.dataclass(frozen=True)
class TruncateToCylindricalFOV(SeparableImageFilter):
    """STIR's ``Truncate To Cylindrical FOV`` (module docstring)."""

    registered_name: ClassVar[str] = "Truncate To Cylindrical FOV"
    block_name: ClassVar[str] = "Truncate To Cylindrical FOV Parameters"

    strictly_less_than_radius: bool = True

    def prepare(self, voxel_size):
        _needs_geometry(self.registered_name)

    def prepare_for(self, image_info) -> PreparedTruncation:
        from ..kernels.fov import cylindrical_fov_mask

        return PreparedTruncation(cylindrical_fov_mask(image_info, 0, self.strictly_less_than_radius))

    def par_lines(self) -> list[str]:
        return [
            f"{self.block_name} :=",
            f"  strictly_less_than_radius := {int(self.strictly_less_than_radius)}",
            f"END {self.block_name} :=",
        ]


@dataclasses.dataclass(frozen=True)
class ChainedProcessor(SeparableImageFilter):
    """STIR's ``Chained Data Processor``: ``first``, then ``second`` (None: skipped)."""

    registered_name: ClassVar[str] = "Chained Data Processor"
    block_name: ClassVar[str] = "Chained Data Processor Parameters"

    first: SeparableImageFilter | None = None
    second: SeparableImageFilter | None = None

    def __post_init__(self) -> None:
        for name in ("first", "second"):
            step = getattr(self, name)
            if step is not None and not isinstance(step, SeparableImageFilter):
                raise StirGpuError(f"{self.registered_name}: {name} must be a stirgpu.filters filter or None")

    def prepare(self, voxel_size):
        _needs_geometry(self.registered_name)

    def prepare_for(self, image_info) -> PreparedChain:
        return PreparedChain(tuple(s.prepare_for(image_info) for s in (self.first, self.second) if s is not None))

    def par_lines(self) -> list[str]:
        lines = [f"{self.block_name} :="]
        for key, step in (("first", self.first), ("second", self.second)):
            if step is None:
                lines.append(f"Data Processor to apply {key} := None")
            else:
                lines += [f"Data Processor to apply {key} := {step.registered_name}", *step.par_lines()]
        return [*lines, f"END {self.block_name} :="]
