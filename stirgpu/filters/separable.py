"""What the separable filters have in common: three 1-D kernels, applied z, then y, then x.

A filter object (:class:`SeparableImageFilter`) holds STIR's parameters only.  Its kernels
depend on the voxel size, as STIR builds them in ``set_up`` from the image's sampling;
:meth:`SeparableImageFilter.prepare` builds them once (:class:`PreparedFilter`), and
:meth:`PreparedFilter.apply_in_place` then filters any number of images of that sampling.
The convolutions are :mod:`stirgpu.kernels.convolution`'s (numba for numpy arrays, the
array-generic path for cupy arrays, so a GPU-resident image never leaves its GPU).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from ..arrays import array_module, is_cupy
from ..errors import StirGpuError

__all__ = ["AxisKernel", "PreparedFilter", "SeparableImageFilter", "voxel_size_of", "float32_triple"]

AXES = "zyx"


@dataclasses.dataclass(frozen=True, eq=False)
class AxisKernel:
    """One axis' 1-D kernel: ``coefficients`` (float32) and which of STIR's two convolutions
    uses them (``"symmetric"``: a half kernel, index 0 the centre; ``"general"``: the whole kernel,
    centre in the middle, odd length)."""

    coefficients: np.ndarray
    kind: str

    @property
    def trivial(self) -> bool:
        """STIR's ``is_trivial``: an empty kernel, or the single coefficient 1 (the axis is left
        as it is)."""
        c = self.coefficients
        return c.size == 0 or (c.size == 1 and c[0] == 1)

    @property
    def full(self) -> np.ndarray:
        """The whole kernel, centre in the middle (for looking at it; float32)."""
        c = self.coefficients
        if self.kind == "general" or c.size == 0:
            return c.copy()
        return np.concatenate([c[:0:-1], c])


def float32_triple(name: str, value, kind=float) -> tuple:
    """``value`` (a number, or three numbers in (z, y, x) order) as a tuple of three ``kind``."""
    items = (value,) * 3 if np.ndim(value) == 0 else tuple(value)
    if len(items) != 3:
        raise StirGpuError(f"{name}: expected one number or three (z, y, x), got {value!r}")
    try:
        return tuple(kind(v) for v in items)
    except (TypeError, ValueError):
        raise StirGpuError(f"{name}: expected numbers, got {value!r}") from None


def voxel_size_of(image, voxel_size=None) -> tuple[float, float, float]:
    """The (z, y, x) voxel size in mm: ``voxel_size`` when given, else the image's own
    (``info.voxel_size`` of a :class:`~stirgpu.formats.VoxelsOnCartesianGrid`)."""
    if voxel_size is None:
        info = getattr(image, "info", None)
        if info is None:
            raise StirGpuError(
                "the voxel size is needed to build the filter's kernels: pass voxel_size=(vz, vy, vx) "
                "in mm, or a VoxelsOnCartesianGrid"
            )
        voxel_size = info.voxel_size
    vox = float32_triple("voxel_size", voxel_size)
    if not all(v > 0 for v in vox):
        raise StirGpuError(f"voxel_size must be positive, got {vox}")
    return vox


class PreparedFilter:
    """A filter's kernels for one voxel size.  ``kernels``: (z, y, x) :class:`AxisKernel`."""

    def __init__(self, name: str, kernels: tuple[AxisKernel, AxisKernel, AxisKernel], voxel_size):
        self.name = name
        self.kernels = tuple(kernels)
        self.voxel_size = tuple(voxel_size)

    @property
    def trivial(self) -> bool:
        return all(k.trivial for k in self.kernels)

    def apply_in_place(self, array):
        """Filter a float32 (z, y, x) array (numpy, C-contiguous, or cupy) in place; returns it."""
        from ..kernels.convolution import convolve_axis

        for axis, k in enumerate(self.kernels):
            if not k.trivial:
                convolve_axis(array, k.coefficients, axis, k.kind)
        return array

    def apply(self, image):
        """A filtered copy of ``image``: a numpy or cupy array (the result on the same device), or
        a :class:`~stirgpu.formats.VoxelsOnCartesianGrid` (a new one of the same geometry)."""
        from ..formats import VoxelsOnCartesianGrid

        if isinstance(image, VoxelsOnCartesianGrid):
            return VoxelsOnCartesianGrid(image.info, fill=self.apply_in_place(image.as_array()))
        if isinstance(image, np.ndarray):
            return self.apply_in_place(np.array(image, dtype=np.float32, order="C", copy=True))
        if is_cupy(image):
            cupy = array_module(image)
            return self.apply_in_place(cupy.array(image, dtype=cupy.float32, order="C", copy=True))
        raise StirGpuError(
            f"{self.name}: expected a numpy or cupy array or a VoxelsOnCartesianGrid, not {type(image).__name__}"
        )


class SeparableImageFilter:
    """Base of STIR's separable image filters (frozen dataclasses of STIR's parameters)."""

    #: STIR's registered name (the value of ``... filter type :=``)
    registered_name: ClassVar[str]
    #: the name of its parameter block
    block_name: ClassVar[str]

    def kernels(self, voxel_size) -> tuple[AxisKernel, AxisKernel, AxisKernel]:
        raise NotImplementedError

    def prepare(self, voxel_size) -> PreparedFilter:
        """The kernels for images of ``voxel_size`` ((z, y, x) mm), as STIR's ``set_up`` builds them."""
        vox = voxel_size_of(None, voxel_size)
        return PreparedFilter(self.registered_name, self.kernels(vox), vox)

    def prepare_for(self, image_info):
        """Prepared for images of ``image_info`` (a :class:`stirgpu.geometry.ImageInfo`): the
        kernels of its voxel size here; processors that depend on the index range override it."""
        return self.prepare(image_info.voxel_size)

    def apply(self, image, voxel_size=None):
        """A filtered copy of ``image`` (numpy / cupy array with ``voxel_size``, or a
        :class:`~stirgpu.formats.VoxelsOnCartesianGrid`); the input is not modified."""
        from ..formats import VoxelsOnCartesianGrid

        if isinstance(image, VoxelsOnCartesianGrid):
            return VoxelsOnCartesianGrid(image.info, fill=self.prepare_for(image.info).apply_in_place(image.as_array()))
        return self.prepare(voxel_size_of(image, voxel_size)).apply(image)

    def par_lines(self) -> list[str]:
        """The filter's parameter block as STIR reads it (after its ``type :=`` line)."""
        raise NotImplementedError
