"""Public entry points of the Joseph projector: validate, then dispatch by array location.

Two ways to say which LORs to project:

* **explicit endpoints** -- :func:`joseph_forward` / :func:`joseph_back`, with the
  semantics of parallelproj's ``joseph3d_fwd`` / ``joseph3d_back``;
* **geometry-aware chunks** -- :func:`forward_chunk` / :func:`back_chunk`, which take a
  :class:`stirgpu.geometry.ChunkTables` (or a sequence of them: the parts of a chunk
  that spans several segments) and compute every LOR's endpoints inside the kernel (no
  per-LOR endpoint array is ever built).

Conventions shared by all four (docs/joseph.md has the algorithm):

* axis order (z, y, x) everywhere; images are C-ordered (nz, ny, nx) float32;
* ``origin`` is the centre of array element [0, 0, 0] and ``voxel_size`` its size,
  both in the units of the endpoints (for chunks: mm, gantry frame);
* a result is a line integral in those units, times ``scale`` (chunks only; the
  projectors pass 1/vx to get STIR's "x voxel" units -- see
  :func:`stirgpu.kernels.frames.stir_scaled_geometry`);
* forward results *overwrite* ``out``; back projections *accumulate* into ``out_image``.

numpy arrays are projected on the CPU (numba).  Arrays that live on a CUDA device
(``__cuda_array_interface__``, or DLPack reporting a CUDA device: cupy, torch) go to
:mod:`stirgpu.kernels.cuda_backend`, imported only then; results stay on that device.
All arrays of one call must live in the same place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import DLPACK_CUDA
from ..errors import DeviceError, GeometryError, StirGpuError
from .frames import checked_triple as _triple
from .tables import chunk_parts, parts_shapes

__all__ = ["joseph_forward", "joseph_back", "forward_chunk", "back_chunk"]

_DLPACK_CPU = 1


# --------------------------------------------------------------------------------------
# describing an argument without importing any GPU library
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _ArrayFacts:
    gpu: bool
    device: int | None
    shape: tuple[int, ...]
    dtype: str  # numpy name: "float32", "float64", ...
    c_contiguous: bool
    writable: bool


def _facts(name: str, a: Any) -> _ArrayFacts:
    """Where ``a`` lives and its shape/dtype/layout, from the array protocols."""
    if isinstance(a, np.ndarray):
        return _ArrayFacts(
            False, None, tuple(a.shape), a.dtype.name, bool(a.flags.c_contiguous), bool(a.flags.writeable)
        )
    try:
        cai = a.__cuda_array_interface__
    except (AttributeError, RuntimeError):  # torch: CPU tensor / tensor requiring grad
        cai = None
    if cai is not None:
        shape = tuple(int(s) for s in cai["shape"])
        dt = np.dtype(cai["typestr"])
        strides = cai.get("strides")
        contiguous = strides is None or tuple(strides) == _c_strides(shape, dt.itemsize)
        writable = not cai["data"][1]
        return _ArrayFacts(True, _dlpack_device_id(a), shape, dt.name, contiguous, writable)
    dev = _dlpack_device(a)
    if dev is not None and dev[0] in DLPACK_CUDA:
        # a CUDA array without the CUDA array interface: the backend inspects it
        shape = tuple(int(s) for s in getattr(a, "shape", ()))
        return _ArrayFacts(True, int(dev[1]), shape, _dtype_name(getattr(a, "dtype", None)), True, True)
    if dev is not None and dev[0] != _DLPACK_CPU:
        raise DeviceError(
            f"{name}: arrays on DLPack device type {dev[0]} are not supported "
            f"(numpy on the CPU, or CUDA arrays such as cupy / torch)"
        )
    raise StirGpuError(f"{name}: expected a numpy array or a CUDA array (cupy, torch), not {type(a).__name__}")


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _dlpack_device(a: Any) -> tuple[int, int] | None:
    f = getattr(a, "__dlpack_device__", None)
    if f is None:
        return None
    dev = f()
    return int(dev[0]), int(dev[1])


def _dlpack_device_id(a: Any) -> int | None:
    dev = _dlpack_device(a)
    return None if dev is None else dev[1]


def _dtype_name(dt: Any) -> str:
    s = str(dt)
    return s.split(".")[-1]  # "torch.float32" -> "float32"


def _check(
    name: str,
    f: _ArrayFacts,
    ndim: int | None = None,
    shape: tuple | None = None,
    dtypes: Sequence[str] = ("float32",),
    writable: bool = False,
) -> None:
    if ndim is not None and len(f.shape) != ndim:
        raise GeometryError(f"{name}: expected a {ndim}-D array, got shape {f.shape}")
    if shape is not None and f.shape != tuple(shape):
        raise GeometryError(f"{name}: expected shape {tuple(shape)}, got {f.shape}")
    if f.dtype not in dtypes:
        raise StirGpuError(f"{name}: expected dtype {' or '.join(dtypes)}, got {f.dtype}")
    if not f.c_contiguous:
        raise StirGpuError(f"{name}: must be C-contiguous (use numpy.ascontiguousarray or .copy())")
    if writable and not f.writable:
        raise StirGpuError(f"{name}: must be writable (it receives the result)")


def _same_place(named: dict[str, _ArrayFacts]) -> bool:
    """True if every array is on the GPU (one device), False if all on the CPU."""
    items = list(named.items())
    first_name, first = items[0]
    for name, f in items[1:]:
        if f.gpu != first.gpu:
            where = lambda g: "a CUDA device" if g else "the host"  # noqa: E731
            raise DeviceError(
                f"{name} is on {where(f.gpu)} but {first_name} is on {where(first.gpu)}; "
                f"all arrays of one projection must live in the same place"
            )
        if f.gpu and first.device is not None and f.device is not None and f.device != first.device:
            raise DeviceError(f"{name} is on CUDA device {f.device} but {first_name} on device {first.device}")
    return first.gpu


def _scale(scale: Any) -> float:
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise GeometryError(f"scale: expected a number, got {scale!r}") from None
    if not math.isfinite(s):
        raise GeometryError(f"scale: must be finite, got {s}")
    return s


def _cuda_backend():
    try:
        from . import cuda_backend
    except ImportError as e:  # cupy missing, or the backend not installed
        raise DeviceError(f"CUDA arrays were given but the CUDA backend cannot be loaded: {e}") from e
    return cuda_backend


def _tables_f64(tables) -> tuple[np.ndarray, ...]:
    """The six ChunkTables arrays, validated, as C-contiguous float64 (the kernel's layout:
    cos_phi, sin_phi, s, half_chord, tantheta, m)."""
    names = ("cos_phi", "sin_phi", "s", "half_chord", "tantheta", "m")
    try:
        arrays = [np.ascontiguousarray(getattr(tables, n), dtype=np.float64) for n in names]
    except AttributeError as e:
        raise GeometryError(f"tables: expected stirgpu.geometry.ChunkTables ({e})") from None
    for n, a in zip(names, arrays, strict=True):
        if a.ndim != 1:
            raise GeometryError(f"tables.{n}: expected a 1-D array, got shape {a.shape}")
        if not np.all(np.isfinite(a)):
            raise GeometryError(f"tables.{n}: must be finite")
    cos_phi, sin_phi, s, half_chord, tantheta, m = arrays
    if cos_phi.shape != sin_phi.shape:
        raise GeometryError(f"tables: cos_phi {cos_phi.shape} and sin_phi {sin_phi.shape} differ in length")
    if not (s.shape == half_chord.shape == tantheta.shape):
        raise GeometryError(
            f"tables: s {s.shape}, half_chord {half_chord.shape} and tantheta "
            f"{tantheta.shape} must have one entry per tangential position"
        )
    if np.any(half_chord < 0):
        raise GeometryError("tables.half_chord: must be >= 0")
    return tuple(arrays)


def _tables_shape(t64: tuple[np.ndarray, ...]) -> tuple[int, int, int]:
    return (t64[0].shape[0], t64[5].shape[0], t64[2].shape[0])


def _chunk_parts(tables) -> tuple[Sequence[Any], list[tuple[np.ndarray, ...]], tuple[int, int, int] | None]:
    """The parts of a chunk argument: (host ChunkTables per part, their validated float64
    arrays, the (nv, na, nt) result shape of a single ChunkTables or None for a sequence,
    whose results are the parts' bins one after the other, flat)."""
    parts, single = chunk_parts(tables)
    t64 = [_tables_f64(t) for t in parts]
    shapes = parts_shapes(parts)  # at least one part, all with the same tangential positions
    return parts, t64, (shapes[0] if single else None)


def _part_ranges(t64):
    """(tables, first bin, end bin) of each non-empty part in a chunk's flat bin order."""
    o = 0
    for t in t64:
        n = int(np.prod(_tables_shape(t)))
        if n:
            yield t, o, o + n
        o += n


def _result_shape(t64, single) -> tuple[int, ...]:
    return single if single is not None else (sum(int(np.prod(_tables_shape(t))) for t in t64),)


# --------------------------------------------------------------------------------------
# explicit endpoints
# --------------------------------------------------------------------------------------
def joseph_forward(xstart, xend, image, origin, voxel_size, out=None):
    """Joseph line integrals of LORs through ``image`` (parallelproj's ``joseph3d_fwd``).

    Parameters
    ----------
    xstart, xend
        (N, 3) float32 or float64, LOR endpoints in (z, y, x) order.
    image
        (nz, ny, nx) float32, C-contiguous.
    origin, voxel_size
        3 numbers each, (z, y, x): centre of voxel [0, 0, 0] and voxel size, in the
        units of the endpoints.
    out
        Optional (N,) float32 array (same place as the inputs), overwritten.

    Returns the (N,) float32 line integrals (in the units of ``voxel_size``), on the
    inputs' device; LORs that miss the image give 0.
    """
    named = {"xstart": _facts("xstart", xstart), "xend": _facts("xend", xend), "image": _facts("image", image)}
    if out is not None:
        named["out"] = _facts("out", out)
    _check_endpoints(named)
    _check("image", named["image"], ndim=3)
    n = named["xstart"].shape[0]
    if out is not None:
        _check("out", named["out"], shape=(n,), writable=True)
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    if _same_place(named):
        return _cuda_backend().joseph_forward(xstart, xend, image, org, vox, out=out)
    from . import cpu

    if out is None:
        out = np.empty(n, dtype=np.float32)
    if n:
        nz, ny, nx = image.shape
        cpu.forward_lors(xstart, xend, image.reshape(-1), nz, ny, nx, *org, *vox, 1.0, out)
    return out


def joseph_back(xstart, xend, values, out_image, origin, voxel_size):
    """Add the Joseph back projection of ``values`` into ``out_image`` (parallelproj's
    ``joseph3d_back``): the exact adjoint of :func:`joseph_forward`.

    ``values`` is (N,) float32; ``out_image`` a writable (nz, ny, nx) float32 C-contiguous
    array that is *accumulated into*.  Other arguments as for :func:`joseph_forward`.
    Returns ``out_image``.
    """
    named = {
        "xstart": _facts("xstart", xstart),
        "xend": _facts("xend", xend),
        "values": _facts("values", values),
        "out_image": _facts("out_image", out_image),
    }
    _check_endpoints(named)
    n = named["xstart"].shape[0]
    _check("values", named["values"], shape=(n,))
    _check("out_image", named["out_image"], ndim=3, writable=True)
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    if _same_place(named):
        return _cuda_backend().joseph_back(xstart, xend, values, out_image, org, vox)
    from . import cpu

    if n:
        nz, ny, nx = out_image.shape
        cpu.back_project(cpu.back_lors, (xstart, xend, values), out_image.reshape(-1), n, (nz, ny, nx, *org, *vox, 1.0))
    return out_image


def _check_endpoints(named: dict[str, _ArrayFacts]) -> None:
    for name in ("xstart", "xend"):
        f = named[name]
        if len(f.shape) != 2 or f.shape[1] != 3:
            raise GeometryError(f"{name}: expected shape (N, 3) with (z, y, x) columns, got {f.shape}")
        _check(name, f, dtypes=("float32", "float64"))
    if named["xstart"].shape != named["xend"].shape:
        raise GeometryError(f"xstart {named['xstart'].shape} and xend {named['xend'].shape} must have the same shape")


# --------------------------------------------------------------------------------------
# geometry-aware chunks
# --------------------------------------------------------------------------------------
def forward_chunk(tables, image, origin, voxel_size, out=None, scale=1.0, cancel=None):
    """Forward project the LORs of one chunk, computing their endpoints in the kernel.

    Parameters
    ----------
    tables
        :class:`stirgpu.geometry.ChunkTables` (host arrays; mm, gantry frame), or a
        sequence of them: the parts (one segment each) of a multi-segment chunk, projected
        in one launch on a GPU.
    image
        (nz, ny, nx) float32, C-contiguous, numpy or CUDA.
    origin, voxel_size
        (z, y, x) mm, gantry frame: centre of voxel [0, 0, 0] and voxel size
        (:func:`stirgpu.kernels.frames.stir_scaled_geometry` gives them for an ImageInfo).
    out
        Optional result array (same place as ``image``), overwritten.
    scale
        Multiplies every line integral (projectors pass 1 / vx for STIR's units).
    cancel
        Optional flag with ``is_set()`` (a :class:`threading.Event`): on the CPU the LORs are
        then projected in pieces and, once it is set, the call raises
        :class:`~stirgpu.errors.Cancelled` after the piece in flight (``out`` is then
        incomplete).  GPU kernels are queued and done in milliseconds: ignored there.

    Returns the (nv, na, nt) float32 projections in [view][axial][tangential] order for one
    ChunkTables; for a sequence, the parts' projections one after the other, flat (N,).
    """
    parts, t64, single = _chunk_parts(tables)
    shape = _result_shape(t64, single)
    named = {"image": _facts("image", image)}
    if out is not None:
        named["out"] = _facts("out", out)
    _check("image", named["image"], ndim=3)
    if out is not None:
        _check("out", named["out"], shape=shape, writable=True)
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    sc = _scale(scale)
    if _same_place(named):
        return _cuda_backend().forward_chunk(tables, image, org, vox, out=out, scale=sc)
    from . import cpu

    if out is None:
        out = np.empty(shape, dtype=np.float32)
    flat = out.reshape(-1)
    for t, a, b in _part_ranges(t64):
        for lo, hi in cpu.lor_ranges(b - a, cancel):
            cpu.forward_tables(t, image.reshape(-1), *image.shape, *org, *vox, sc, flat[a:b], lo, hi)
    return out


def back_chunk(tables, values, out_image, origin, voxel_size, scale=1.0, cancel=None, workers=None):
    """Add the back projection of one chunk's ``values`` (float32, shaped like
    :func:`forward_chunk`'s result for the same ``tables``) into ``out_image``; the exact
    adjoint of :func:`forward_chunk` with the same arguments.  Returns ``out_image``.
    ``cancel`` as for :func:`forward_chunk` (a cancelled call leaves ``out_image`` with part
    of the back projection added; the pieces do not change the result of a complete one).
    ``workers`` (CPU only): a :class:`stirgpu.kernels.cpu.WorkerImages` of ``out_image`` kept
    over several calls; the back projection is then only complete after its ``reduce()``."""
    parts, t64, single = _chunk_parts(tables)
    shape = _result_shape(t64, single)
    named = {"values": _facts("values", values), "out_image": _facts("out_image", out_image)}
    _check("values", named["values"], shape=shape)
    _check("out_image", named["out_image"], ndim=3, writable=True)
    org = _triple("origin", origin, positive=False)
    vox = _triple("voxel_size", voxel_size, positive=True)
    sc = _scale(scale)
    if _same_place(named):
        return _cuda_backend().back_chunk(tables, values, out_image, org, vox, scale=sc)
    from . import cpu

    flat = values.reshape(-1)
    for t, a, b in _part_ranges(t64):
        cpu.back_project(
            cpu.back_tables,
            (t, flat[a:b]),
            out_image.reshape(-1),
            b - a,
            (*out_image.shape, *org, *vox, sc),
            cancel=cancel,
            workers=workers,
        )
    return out_image
