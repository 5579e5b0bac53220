"""Images: a small ``VoxelsOnCartesianGrid`` and Interfile ``.hv`` + raw ``.v`` I/O.

Interfile image keys (STIR's ``InterfileImageHeader``): ``!matrix size [1..3]`` and
``scaling factor (mm/pixel) [1..3]`` for x, y, z; ``first pixel offset (mm) [1..3]``
= origin + voxel size * min index (STIR's min indices are ``(0, -(ny//2), -(nx//2))``,
so reading gives origin = first pixel offset - voxel size * min index; absent offsets
mean origin 0); number format, byte order, ``data offset in bytes[1]`` and
``image scaling factor[1]`` (one value, or one per plane) as for projection data.

Writing is safe as for projection data: temporary names, header renamed last.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import FormatError, GeometryError
from ..geometry import ImageInfo
from .interfile import HeaderWriter, InterfileHeader, encode_header, key_id, read_header
from .naming import IMAGE, output_names
from .projdata_header import format_f32
from .rawfile import PendingFiles, data_file_is_a_folder, dtype_from_keys, keys_from_dtype

__all__ = ["VoxelsOnCartesianGrid", "read_image", "write_image", "image_info_from_header", "format_image_header"]


class VoxelsOnCartesianGrid:
    """A float32 (z, y, x) array plus its :class:`~stirgpu.geometry.ImageInfo`, with
    STIR's names (``as_array``, ``fill``, ``get_voxel_size``, ``get_origin``,
    ``get_lengths``, ``get_min_indices``).

    ``VoxelsOnCartesianGrid(info, fill=0)``: ``fill`` is a number or a (z, y, x) array.
    """

    def __init__(self, info: ImageInfo, fill=0.0):
        if not isinstance(info, ImageInfo):
            raise GeometryError(f"VoxelsOnCartesianGrid: info must be an ImageInfo, not {type(info).__name__}")
        self._info = info
        self._array = np.zeros(info.shape, dtype=np.float32)
        if not (np.ndim(fill) == 0 and float(fill) == 0.0):
            self.fill(fill)

    @classmethod
    def from_array(cls, array, info: ImageInfo) -> VoxelsOnCartesianGrid:
        return cls(info, fill=array)

    @property
    def info(self) -> ImageInfo:
        return self._info

    @property
    def array(self) -> np.ndarray:
        """The live (z, y, x) float32 array (no copy; writes change the image)."""
        return self._array

    @property
    def shape(self) -> tuple[int, int, int]:
        return self._info.shape

    def as_array(self) -> np.ndarray:
        """A copy of the values, (z, y, x) float32 (as STIR's Python ``as_array``)."""
        return self._array.copy()

    def __array__(self, dtype=None, copy=None):
        if copy is False and dtype not in (None, np.float32):
            raise ValueError("cannot convert the image without a copy")
        a = self._array if dtype is None else self._array.astype(dtype, copy=False)
        return a.copy() if copy else a

    def fill(self, value) -> None:
        """Set all voxels to a number, or to a (z, y, x) array."""
        a = np.asarray(value, dtype=np.float32)
        if a.ndim != 0 and a.shape != self._info.shape:
            raise GeometryError(f"fill: expected a number or shape {self._info.shape}, got {a.shape}")
        self._array[...] = a

    def get_voxel_size(self) -> tuple[float, float, float]:
        return self._info.voxel_size

    def get_origin(self) -> tuple[float, float, float]:
        return self._info.origin

    def get_lengths(self) -> tuple[int, int, int]:
        return self._info.shape

    def get_min_indices(self) -> tuple[int, int, int]:
        return self._info.get_min_indices()

    def get_max_indices(self) -> tuple[int, int, int]:
        return self._info.get_max_indices()

    def get_first_pixel_offset(self) -> tuple[float, float, float]:
        return self._info.first_pixel_offset

    def clone(self) -> VoxelsOnCartesianGrid:
        return VoxelsOnCartesianGrid(self._info, fill=self._array)

    def __repr__(self) -> str:
        return f"VoxelsOnCartesianGrid({self._info!r})"


def image_info_from_header(hdr: InterfileHeader) -> ImageInfo:
    """The image geometry an Interfile image header describes."""
    pdt = hdr.get_str("PET data type", default="Image")
    if key_id(pdt) != "image":
        raise hdr.error(f"expected an image ('Image'), got {pdt!r}", "PET data type")
    ndim = hdr.get_int("number of dimensions", default=None)
    if ndim != 3:
        raise hdr.error(f"images have 3 dimensions, not {ndim}", "number of dimensions")
    for n_key in ("number of time frames", "number of image data types"):
        n = hdr.get_int(n_key, default=1)
        if n != 1:
            raise hdr.error(f"{n}: only single images are supported", n_key)
    for i, want in enumerate(("x", "y", "z"), start=1):
        label = hdr.get_str("matrix axis label", i, default=want)
        if key_id(label) != want:
            raise hdr.error(f"must be {want!r} (STIR reads x, y, z order only), got {label!r}", "matrix axis label", i)
    sizes, voxels = [], []
    for i in (1, 2, 3):
        v = hdr.get_int_list("matrix size", i)
        if len(v) != 1 or v[0] < 1:
            raise hdr.error(f"must be one positive number, got {v}", "matrix size", i)
        sizes.append(v[0])
        vox = hdr.get_float("scaling factor (mm/pixel)", i, default=1.0)
        if not vox > 0:
            raise hdr.error(f"must be positive, got {vox}", "scaling factor (mm/pixel)", i)
        voxels.append(vox)
    nx, ny, nz = sizes
    shape = (nz, ny, nx)
    vox_zyx = (voxels[2], voxels[1], voxels[0])
    min_idx = (0, -(ny // 2), -(nx // 2))
    fpo_key = "first pixel offset (mm)"
    fpo_zyx = [hdr.get_float(fpo_key, i, default=None) for i in (3, 2, 1)]
    if fpo_zyx[0] is None:
        # STIR (IO/interfile.cxx) looks at the z entry only: without it the origin is 0, whatever
        # the x and y entries say
        return ImageInfo(shape, vox_zyx, (0.0, 0.0, 0.0), min_idx)
    for i, f in zip((3, 2, 1), fpo_zyx, strict=True):
        if f is None:
            raise hdr.error(f"missing while '{fpo_key} [3]' is given (STIR would read an undefined value)", fpo_key, i)
    origin = tuple(f - v * m for f, v, m in zip(fpo_zyx, vox_zyx, min_idx, strict=True))
    return ImageInfo(shape, vox_zyx, origin, min_idx)


def read_image(path: str | os.PathLike) -> VoxelsOnCartesianGrid:
    """Read an Interfile image (``.hv``); values are returned as float32."""
    hdr = read_header(path)
    info = image_info_from_header(hdr)
    dtype = dtype_from_keys(hdr)
    off_idx = 1 if hdr.has("data offset in bytes", 1) else None
    offset = hdr.get_int("data offset in bytes", off_idx, default=0)
    if offset < 0:
        raise hdr.error(f"must be >= 0, got {offset}", "data offset in bytes", off_idx)
    sf_idx = 1 if hdr.has("image scaling factor", 1) else None
    factors = hdr.get_float_list("image scaling factor", sf_idx, default=[1.0])
    nz = info.shape[0]
    if len(factors) not in (1, nz):
        raise hdr.error(f"give one factor or one per plane ({nz}), got {len(factors)}", "image scaling factor", sf_idx)
    dp = hdr.get_path("name of data file")
    if dp.is_dir():
        raise data_file_is_a_folder(dp, hdr.path)
    if not dp.is_file():
        what = "does not exist" if not dp.exists() else "is not a regular file"
        raise FormatError(f"data file of {hdr.path} {what}", path=dp)
    need = offset + info.num_voxels * dtype.itemsize
    size = dp.stat().st_size
    if size != need:
        # longer is refused too: the header does not describe the file (STIR reads its first bytes)
        what = "is truncated" if size < need else "is larger than its header describes"
        raise FormatError(
            f"data file {what}: it has {size} bytes but the header {hdr.path} "
            f"describes {need} ({offset} offset + {info.num_voxels} voxels x "
            f"{dtype.itemsize} bytes)",
            path=dp,
        )
    img = VoxelsOnCartesianGrid(info)
    with open(dp, "rb", buffering=0) as f:
        f.seek(offset)
        if dtype == img.array.dtype:  # native float32: straight into the image, one pass over it
            _read_into(f, img.array.reshape(-1).data.cast("B"), dp)
        else:
            img.array[...] = np.fromfile(f, dtype=dtype, count=info.num_voxels).reshape(info.shape)
    scale = np.asarray(factors, dtype=np.float32)
    if np.any(scale != 1):
        img.array[...] *= scale[:, None, None] if len(factors) > 1 else scale[0]  # float32, as STIR
    return img


def _read_into(f, buffer: memoryview, path: Path) -> None:
    """Fill ``buffer`` from ``f`` (a file whose size was checked: a short read means it shrank)."""
    done = 0
    while done < len(buffer):
        got = f.readinto(buffer[done:])
        if not got:
            raise FormatError(f"data file ended after {done} of {len(buffer)} bytes while being read", path=path)
        done += got


def format_image_header(
    info: ImageInfo, data_file_name: str, dtype=np.float32, originating_system: str | None = None
) -> str:
    """Header text as STIR writes it for an image."""
    fmt, nbytes, order = keys_from_dtype(dtype)
    w = HeaderWriter()
    w.add("!imaging modality", "PT")
    if originating_system:
        w.add("originating system", originating_system)
    w.add("!version of keys", "STIR6.0")
    w.add("name of data file", data_file_name)
    w.add("!GENERAL DATA")
    w.add("!GENERAL IMAGE DATA")
    w.add("!type of data", "PET")
    w.add("imagedata byte order", order)
    w.add("number of radionuclides", 1)
    w.add("!PET STUDY (General)")
    w.add("!PET data type", "Image")
    w.add("process status", "Reconstructed")
    w.add("!number format", fmt)
    w.add("!number of bytes per pixel", nbytes)
    w.add("number of dimensions", 3)
    nz, ny, nx = info.shape
    vz, vy, vx = info.voxel_size
    for i, (label, n, v) in enumerate((("x", nx, vx), ("y", ny, vy), ("z", nz, vz)), start=1):
        w.add("matrix axis label", label, index=i)
        w.add("!matrix size", n, index=i)
        w.add("scaling factor (mm/pixel)", format_f32(v), index=i)
    fz, fy, fx = info.first_pixel_offset
    for i, f in enumerate((fx, fy, fz), start=1):
        w.add("first pixel offset (mm)", format_f32(f), index=i)
    w.add("number of time frames", 1)
    return w.text()


def write_image(
    path: str | os.PathLike,
    image: VoxelsOnCartesianGrid | np.ndarray,
    info: ImageInfo | None = None,
    *,
    overwrite: bool = False,
    dtype=np.float32,
) -> Path:
    """Write ``image`` as a header and a data file named as STIR names them
    (:func:`~.naming.output_names`: ``out``, ``out.hv`` and ``out.v`` all give ``out.hv`` +
    ``out.v``); returns the header written.

    ``image``: a :class:`VoxelsOnCartesianGrid`, or a numpy (z, y, x) array with its geometry
    ``info`` (``write_image(path, array, info)``; an array carries none).  Both files go to
    temporary names first and are renamed into place (header last), so a crash never leaves a
    header describing incomplete data.  An existing file is replaced only with
    ``overwrite=True``.
    """
    image = _as_voxels(path, image, info)
    names = output_names(path, IMAGE)
    hv = names.header
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise FormatError(f"images are written as float32 or float64, not {dt}", path=hv)
    keys_from_dtype(dt)
    data = names.data
    pending = PendingFiles({"data": data, "header": hv}, overwrite=overwrite)
    try:
        with open(pending.temp("data"), "xb") as f:
            np.ascontiguousarray(image.array, dtype=dt).tofile(f)
            f.flush()
            os.fsync(f.fileno())
        with open(pending.temp("header"), "xb") as f:
            f.write(encode_header(format_image_header(image.info, data.name, dt)))
            f.flush()
            os.fsync(f.fileno())
        pending.commit(("data", "header"))
    except BaseException:
        pending.abort()
        raise
    return hv


def _as_voxels(path, image, info: ImageInfo | None) -> VoxelsOnCartesianGrid:
    """What :func:`write_image` writes: the image, or the array with its geometry; one line
    naming the output otherwise."""
    where = f"write_image({os.fspath(path)!r})"
    if info is not None and not isinstance(info, ImageInfo):
        raise GeometryError(f"{where}: info must be an ImageInfo, not {type(info).__name__}")
    if isinstance(image, VoxelsOnCartesianGrid):
        if info is not None and info != image.info:
            raise GeometryError(f"{where}: info {info!r} differs from the image's own geometry {image.info!r}")
        return image
    if not isinstance(image, np.ndarray):
        raise GeometryError(
            f"{where}: expected a VoxelsOnCartesianGrid or a numpy (z, y, x) array, not {type(image).__name__}"
        )
    if info is None:
        raise GeometryError(
            f"{where}: a numpy array carries no geometry; give its ImageInfo: write_image(path, array, info)"
        )
    if image.shape != info.shape:
        raise GeometryError(f"{where}: the array's shape {image.shape} differs from info's (z, y, x) {info.shape}")
    if image.dtype.kind not in "biuf":
        raise GeometryError(f"{where}: the array holds {image.dtype} values; images hold real numbers")
    return VoxelsOnCartesianGrid(info, fill=image)
