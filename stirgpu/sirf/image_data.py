"""SIRF's ``ImageData``: a (z, y, x) float32 array and its geometry, on the host or a GPU.

The values are one array: numpy, or cupy where stirgpu works on a GPU (new images are made where
``stirgpu.config``'s backend resolves: ``"auto"`` is the GPU when cupy sees one; images made from
another image stay where that one is).  On a GPU an image offers ``__cuda_array_interface__`` and
DLPack (``__dlpack__``), so ``cupy.asarray(image)`` or ``torch.from_dlpack(image)`` see the same
memory; on the host it offers ``__array_interface__`` (``numpy.asarray(image)`` is a view, SIRF's
``asarray()``).  ``as_array()`` is always a numpy copy, as in SIRF.

The cupy lines of this module are written for numpy and cupy alike (``xp`` is the array's
namespace); they cannot run on a machine without a GPU, where every image is numpy.

Geometry is STIR's (:class:`~stirgpu.geometry.ImageInfo`): ``initialise(dim, vsize, origin)`` in
(z, y, x) and mm, x and y indices centred (``-(n // 2)``), z from 0.  ``get_geometrical_info()``
gives SIRF's LPS description, with STIR's rule for a patient position it does not know (head
first supine: LPS = (x, y, -z) of STIR's coordinates).
"""

from __future__ import annotations

import os
from numbers import Real
from typing import Any

import numpy as np

from ..arrays import import_cupy, in_namespace
from ..config import get_config
from ..execution import resolve_backend
from ..formats import VoxelsOnCartesianGrid, read_image, write_image
from ..geometry import ImageInfo
from ..kernels.joseph.lors import stir_default_image_info
from .containers import DataContainer, _xp_of
from .errors import InputError, InputTypeError, error, translate_class_errors

__all__ = ["ImageData", "GeometricalInfo"]


def _device_namespace():
    """cupy when stirgpu's backend is (or resolves to) CUDA, else numpy."""
    return import_cupy() if resolve_backend(get_config().backend) == "cuda" else np


def _host(a) -> np.ndarray:
    return a.get() if _xp_of(a) is not np else a


class GeometricalInfo:
    """SIRF's ``GeometricalInfo``: size, spacing, offset and directions in LPS space (x, y, z)."""

    def __init__(self, info: ImageInfo):
        self._info = info

    def get_size(self) -> tuple[int, ...]:
        return tuple(reversed(self._info.shape))

    def get_spacing(self) -> tuple[np.float32, ...]:
        return tuple(np.float32(v) for v in reversed(self._info.voxel_size))

    def get_offset(self) -> tuple[np.float32, ...]:
        """LPS of the first voxel's centre: STIR's (x, y, -z) for an unknown patient position."""
        fz, fy, fx = self._info.first_pixel_offset
        return (np.float32(fx), np.float32(fy), np.float32(-fz))

    def get_direction_matrix(self) -> np.ndarray:
        """Column i: the LPS direction of index axis i (x, y, z)."""
        return np.diag(np.array([1.0, 1.0, -1.0], dtype=np.float32))

    def get_index_to_physical_point_matrix(self) -> np.ndarray:
        m = np.zeros((4, 4), dtype=np.float32)
        m[:3, :3] = self.get_direction_matrix() * np.asarray(self.get_spacing(), dtype=np.float32)[None, :]
        m[:3, 3] = self.get_offset()
        m[3, 3] = 1
        return m

    def print_info(self) -> None:
        """Print :meth:`get_info` (SIRF's; a user's explicit request to print)."""
        print(self.get_info())  # noqa: T201

    def get_info(self) -> str:
        return (
            f"Offset: {self.get_offset()}\nSpacing: {self.get_spacing()}\nSize: {self.get_size()}\n"
            f"Direction matrix: {self.get_direction_matrix().tolist()}"
        )


@translate_class_errors
class ImageData(DataContainer):
    """A PET image (SIRF's ``sirf.STIR.ImageData``).

    ``ImageData(filename)`` (Interfile ``.hv``), ``ImageData(acquisition_data)`` (STIR's default
    image for those data, zeros), ``ImageData(image)`` (a copy) or ``ImageData()`` (empty: call
    :meth:`initialise`).  stirgpu code may use :meth:`from_array` (no copy), :attr:`array` (the live
    numpy or cupy array) and :attr:`image_info`.
    """

    def __init__(self, arg=None):
        self._info: ImageInfo | None = None
        self._array: Any = None  # numpy or cupy (z, y, x) float32, once there is an image
        self.name = "ImageData"
        if arg is None:
            return
        if isinstance(arg, (str, os.PathLike)):
            self.read_from_file(arg)
        elif isinstance(arg, ImageData):
            self._info, self._array = arg._require(), arg._array.copy()
        else:
            from .acquisition_data import AcquisitionData  # (which makes images itself)

            if not isinstance(arg, AcquisitionData):
                raise error(f"wrong argument {type(arg).__name__} for ImageData constructor")
            other = ImageData.default_for(arg, None)
            self._info, self._array = other._info, other._array

    # -- making images ------------------------------------------------------------------------------
    @classmethod
    def from_array(cls, array, image_info: ImageInfo) -> ImageData:
        """An image whose values *are* ``array`` (numpy or cupy, (z, y, x) float32 C-contiguous)."""
        if not isinstance(image_info, ImageInfo):
            raise InputTypeError(f"from_array: image_info must be an ImageInfo, not {type(image_info).__name__}")
        if tuple(array.shape) != image_info.shape or str(array.dtype) != "float32" or not array.flags.c_contiguous:
            raise InputError(
                f"from_array: need a C-contiguous float32 array of shape {image_info.shape}, got "
                f"{array.dtype} {tuple(array.shape)}"
            )
        image = cls()
        image._info, image._array = image_info, array
        return image

    @classmethod
    def default_for(cls, acquisition_data, xy=None) -> ImageData:
        """STIR's default image for ``acquisition_data`` (to STIR's float32 rounding), zeros."""
        if xy is None:
            ny = nx = None
        elif isinstance(xy, (int, np.integer)):
            ny = nx = int(xy)
        elif isinstance(xy, tuple) and len(xy) == 2:
            ny, nx = int(xy[0]), int(xy[1])
        else:
            raise error("Wrong second argument in create_uniform_image: give an int or a (ny, nx) tuple")
        info = stir_default_image_info(acquisition_data.get_proj_data_info(), xy_size=nx)
        if ny != nx:
            info = info.replace(shape=(info.shape[0], ny, nx))
        return cls._zeros(info, _device_namespace())

    @classmethod
    def _zeros(cls, info: ImageInfo, xp) -> ImageData:
        image = cls()
        image._info, image._array = info, xp.zeros(info.shape, dtype=np.float32)
        return image

    def initialise(self, dim, vsize=(1.0, 1.0, 1.0), origin=(0.0, 0.0, 0.0)) -> None:
        """Size (z, y, x), voxel sizes and STIR origin in mm; the values become 0."""
        for name, v in (("dim", dim), ("vsize", vsize), ("origin", origin)):
            if not isinstance(v, tuple):
                raise error(f"sirf.STIR.ImageData.initialise: {name} should be a tuple")
        info = ImageInfo(
            (int(dim[0]), int(dim[1]), int(dim[2])),
            (float(vsize[0]), float(vsize[1]), float(vsize[2])),
            (float(origin[0]), float(origin[1]), float(origin[2])),
        )
        xp = _device_namespace() if self._array is None else _xp_of(self._array)
        self._info, self._array = info, xp.zeros(info.shape, dtype=np.float32)

    def read_from_file(self, filename) -> None:
        """Read an Interfile image (``.hv``); replaces this image."""
        img = read_image(os.fspath(filename))
        xp = _device_namespace()
        self._info, self._array = img.info, xp.asarray(img.array)

    def same_object(self) -> ImageData:
        return ImageData()

    # -- what stirgpu code uses -------------------------------------------------------------------
    def _require(self) -> ImageInfo:
        if self._info is None:
            raise error("ImageData: empty object (call initialise, or read a file)")
        return self._info

    @property
    def image_info(self) -> ImageInfo:
        return self._require()

    @property
    def array(self):
        """The live (z, y, x) float32 array (numpy or cupy): writes change the image."""
        self._require()
        return self._array

    # -- DataContainer's pieces ---------------------------------------------------------------------
    def _pieces(self):
        self._require()
        return (None,)

    def _read(self, key):
        return self._array

    def _write(self, key, values) -> None:
        self._array[...] = in_namespace(_xp_of(self._array), values)

    def _new_like(self) -> ImageData:
        return ImageData._zeros(self._require(), _xp_of(self._array))

    def _check_compatible(self, other, what: str) -> None:
        if not isinstance(other, ImageData):
            raise InputTypeError(f"{what}: expected ImageData, not {type(other).__name__}")
        if other._require() != self._require():
            raise InputError(f"{what}: the images have different geometries ({other._info!r} vs {self._info!r})")

    def _check_writable(self) -> None:
        self._require()

    # -- SIRF's methods --------------------------------------------------------------------------------
    def fill(self, value):
        """Set the voxels: a number, an array of :meth:`dimensions` (numpy or cupy), or an ImageData."""
        info = self._require()
        if isinstance(value, ImageData):
            self._check_compatible(value, "fill")
            self._write(None, value._array)
        elif isinstance(value, (Real, np.number)) and not isinstance(value, bool):
            self._array.fill(np.float32(float(value)))
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            if tuple(value.shape) != info.shape:
                raise InputError(f"cannot fill ImageData of size {info.shape} with data of size {tuple(value.shape)}")
            self._write(None, value.astype(np.float32, copy=False))
        else:
            raise InputTypeError(
                f"wrong fill value. Should be ImageData, numpy.ndarray, float or int. Got {type(value).__name__}"
            )
        return self

    def dimensions(self) -> tuple[int, int, int]:
        """(nz, ny, nx)."""
        return self._require().shape

    def voxel_sizes(self) -> tuple[np.float32, ...]:
        """(vz, vy, vx) mm."""
        return tuple(np.float32(v) for v in self._require().voxel_size)

    @property
    def spacing(self):
        return self.voxel_sizes()

    @property
    def modality(self) -> str:
        return "PT"

    def as_array(self) -> np.ndarray:
        """A numpy copy of the values, (z, y, x) float32."""
        self._require()
        return np.array(_host(self._array), dtype=np.float32, copy=True)

    def write(self, filename) -> None:
        """Write Interfile ``.hv`` + ``.v`` (STIR's names); an existing file is replaced, as SIRF does."""
        write_image(
            os.fspath(filename), VoxelsOnCartesianGrid(self._require(), fill=_host(self._array)), overwrite=True
        )

    def add_shape(self, shape, scale, num_samples_in_each_direction=1) -> None:
        """Add ``scale`` times STIR's voxelisation of ``shape`` (fractions of each voxel inside it,
        with ``num_samples_in_each_direction``^3 samples where it cuts a voxel; :mod:`.shapes`)."""
        from .shapes import scaled_volume  # (shapes knows nothing of images)

        volume = scaled_volume(shape, self._require(), scale, num_samples_in_each_direction)
        self._array += in_namespace(_xp_of(self._array), volume)

    def zoom_image(
        self, zooms=(1.0, 1.0, 1.0), offsets_in_mm=(0.0, 0.0, 0.0), size=(-1, -1, -1), scaling="preserve_sum"
    ) -> ImageData:
        """A zoomed copy: STIR's ``zoom_image`` with (z, y, x) zooms, offsets in mm and sizes (-1:
        unchanged); ``scaling`` 'preserve_sum' (the default), 'preserve_values' or
        'preserve_projections' (:mod:`.zoom`)."""
        from .zoom import zoomed_info

        for name, v in (("zooms", zooms), ("offsets_in_mm", offsets_in_mm), ("size", size)):
            if not isinstance(v, tuple) or len(v) != 3:
                raise InputError(f"zoom_image: {name} should be a tuple of 3 (z, y, x), got {v!r}")
        info = zoomed_info(self._require(), zooms, offsets_in_mm, size)
        return self._zoomed_onto(info, scaling)

    def zoom_image_as_template(self, template_image, scaling="preserve_sum") -> ImageData:
        """This image on ``template_image``'s grid (STIR's ``zoom_image(out, in)``)."""
        if not isinstance(template_image, ImageData):
            raise InputTypeError("zoom_image_as_template: template should be ImageData")
        return self._zoomed_onto(template_image._require(), scaling)

    def _zoomed_onto(self, info: ImageInfo, scaling) -> ImageData:
        from .zoom import zoom_values

        values = zoom_values(_host(self._array), self._require(), info, scaling)
        return ImageData.from_array(_xp_of(self._array).asarray(values), info)

    def move_to_scanner_centre(self, proj_data) -> ImageData:
        """A copy whose STIR origin is (0, 0, 0): SIRF's rule (the data are checked, not used)."""
        from .acquisition_data import AcquisitionData  # (which makes images itself)

        if not isinstance(proj_data, AcquisitionData):
            raise InputTypeError(
                f"move_to_scanner_centre: proj_data should be of type AcquisitionData, not {type(proj_data).__name__}"
            )
        proj_data.get_proj_data_info()  # an empty AcquisitionData is refused with its own message
        moved = ImageData(self)
        moved._info = self._require().replace(origin=(0.0, 0.0, 0.0))
        return moved

    def show(self, slice=None, title=None) -> None:  # noqa: A002 -- SIRF's argument name
        """Draw planes with matplotlib as SIRF does: one (``slice=k``), some (a list) or all (:mod:`.display`)."""
        from .display import show_planes  # (matplotlib only when drawing)

        show_planes(self.as_array(), slice, title, "image")

    def get_geometrical_info(self) -> GeometricalInfo:
        return GeometricalInfo(self._require())

    def transf_matrix(self) -> np.ndarray:
        """SIRF's 4x4 float32 index-to-LPS matrix (x, y, z index -> mm): its geometrical info's
        ``get_index_to_physical_point_matrix()``, the matrix SIRF's ``transf_matrix()`` returns."""
        return self.get_geometrical_info().get_index_to_physical_point_matrix()

    def get_info(self) -> str:
        where = "host (numpy)" if _xp_of(self._array) is np else f"GPU {self._array.device.id} (cupy)"
        return f"ImageData on the {where}: {self._require()!r}"

    # -- zero-copy interop -------------------------------------------------------------------------------
    @property
    def supports_array_view(self) -> bool:
        return self._info is not None

    @property
    def __array_interface__(self):
        self._require()
        if _xp_of(self._array) is not np:
            raise AttributeError("__array_interface__: this image is on a GPU (use __cuda_array_interface__)")
        return self._array.__array_interface__

    @property
    def __cuda_array_interface__(self):
        self._require()
        if _xp_of(self._array) is np:
            raise AttributeError("__cuda_array_interface__: this image is in host memory (use __array_interface__)")
        return self._array.__cuda_array_interface__

    def __dlpack__(self, *args, **kwargs):
        self._require()
        return self._array.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        self._require()
        return self._array.__dlpack_device__()

    def __repr__(self) -> str:
        return "ImageData()" if self._info is None else f"ImageData({self._info!r})"
