"""Entry points of the Joseph projector: validate, then dispatch by where the arrays live (numpy
to the numba kernels of :mod:`.cpu`, CUDA arrays to :mod:`.cuda`, imported only then).

One projector, libparallelproj 2.0.7's float32 ``joseph3d_fwd`` / ``joseph3d_back``
(``docs/joseph.md``), along LORs given in one of two ways:

* **chunks of projection data** -- :func:`forward_chunk` / :func:`back_chunk` take a
  :class:`stirgpu.geometry.ChunkTables` (or a sequence of them: the parts of a chunk that spans
  several segments, or a :class:`~.chunk.JosephChunk` of them) and the geometry they come from,
  and compute every LOR's endpoints inside the kernel, as STIR's Parallelproj projector rounds
  them (no per-LOR endpoint array is built).  ``frame`` is the image's
  ``(origin, voxel_size, rescale)`` as :func:`~stirgpu.kernels.joseph.lors.stir_image_frame`
  gives it (STIR's x-voxel units, or mm);
* **explicit endpoints** -- :func:`joseph_forward` / :func:`joseph_back`, parallelproj's
  ``joseph3d_fwd`` / ``joseph3d_back`` themselves: (N, 3) endpoints, the image's origin (centre
  of voxel [0, 0, 0]) and voxel size, all in one unit, rounded to float32 as libparallelproj
  takes them.

Conventions: axis order (z, y, x) everywhere; images C-ordered (nz, ny, nx) float32; forward
results *overwrite* ``out`` (0 for a LOR that misses the image); back projections *accumulate*
into ``out_image``.  All arrays of one call live in one place; results stay there (a torch
tensor in gives a torch tensor out).
"""

from __future__ import annotations

import numpy as np

from ...arrays import import_cupy, on_cuda
from ...errors import GeometryError
from ..arguments import check, check_endpoints, checked_triple, facts, same_place
from .chunk import as_chunk

__all__ = [
    "forward_chunk",
    "back_chunk",
    "joseph_forward",
    "joseph_back",
    "checked_image",
    "checked_frame",
    "checked_out",
]


def checked_image(name: str, a, writable: bool = False):
    """``a`` as the chunk functions take an image: (nz, ny, nx) float32, C-contiguous (engine
    images on a GPU may be wrappers carrying ``__cuda_array_interface__``, shape and dtype)."""
    shape = tuple(getattr(a, "shape", ()))
    if len(shape) != 3 or np.dtype(getattr(a, "dtype", None)) != np.float32:
        raise GeometryError(
            f"{name}: expected a (nz, ny, nx) float32 array, got shape {shape} {getattr(a, 'dtype', type(a).__name__)}"
        )
    flags = getattr(a, "flags", None)
    if flags is not None and (not flags.c_contiguous or (writable and not getattr(flags, "writeable", True))):
        raise GeometryError(f"{name}: must be C-contiguous{' and writable' if writable else ''}")
    return a


def checked_frame(frame) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """``(origin, voxel_size, rescale)`` as float32 (``stir_image_frame``'s)."""
    try:
        origin, voxel_size, rescale = frame
    except (TypeError, ValueError):
        raise GeometryError("frame: expected (origin, voxel_size, rescale) from stir_image_frame") from None
    return (np.ascontiguousarray(origin, np.float32), np.ascontiguousarray(voxel_size, np.float32), np.float32(rescale))


def _framed_copies(image):
    """The zero-framed copies of a prepared device image (:func:`stirgpu.kernels.cuda.images.
    prepare_image`, which the engine makes once per image), else None."""
    return getattr(image, "framed", None)


def checked_out(out, n: int, shape: tuple, cuda: bool) -> None:
    """``out`` as a chunk function's result: ``n`` float32 elements, C-contiguous, where the
    image is (``cuda``); ``shape`` is what the error names."""
    if (
        int(np.prod(out.shape)) != n
        or str(out.dtype) != "float32"
        or on_cuda(out) != cuda
        or not out.flags.c_contiguous
    ):
        raise GeometryError(f"out: expected a C-contiguous float32 array of {n} elements ({shape}) beside the image")


def forward_chunk(tables, proj_data_info, image, frame, out=None, cancel=None):
    """The forward projection of ``image`` over the chunk's LORs: the (nv, na, nt) float32
    result for one ChunkTables, the parts' results one after the other (flat) for several.
    ``cancel``: a flag with ``is_set()`` (a :class:`threading.Event`): on the CPU the LORs are
    then projected in pieces and, once it is set, the call raises
    :class:`~stirgpu.errors.Cancelled` after the piece in flight.  GPU kernels are queued and done
    in milliseconds: ignored there."""
    chunk = as_chunk(tables, proj_data_info)
    checked_image("image", image)
    n = chunk.num_lors
    shape = chunk.single_shape if chunk.single_shape is not None else (n,)
    cuda = on_cuda(image)
    if out is None:
        out = import_cupy().empty(shape, np.float32) if cuda else np.empty(shape, np.float32)
    else:
        checked_out(out, n, shape, cuda)
    org, vs, rescale = checked_frame(frame)
    if cuda:
        from . import cuda as kernels

        cp = import_cupy()
        framed = _framed_copies(image)
        image = cp.asarray(image)
        kernels.forward(chunk.device(image.device.id), image, org, vs, rescale, cp.asarray(out).reshape(-1), framed)
        return out
    from . import cpu
    from .workers import lor_ranges

    flat, o = out.reshape(-1), 0
    dims = np.array(image.shape, np.int64)
    for t, (nv, na, nt) in zip(chunk.host, chunk.shapes, strict=True):
        k = nv * na * nt
        for lo, hi in lor_ranges(k, cancel):
            cpu.forward_tables(t, image.reshape(-1), dims, org, vs, rescale, flat[o : o + k], lo, hi)
        o += k
    return out


def back_chunk(tables, proj_data_info, values, out_image, frame, cancel=None, along_x=None, workers=None):
    """Add the back projection of ``values`` (shaped like :func:`forward_chunk`'s result) into
    ``out_image``; returns ``out_image``.  ``cancel`` as for :func:`forward_chunk` (a cancelled
    call leaves part of the back projection added).  ``workers`` (CPU only): a
    :class:`~stirgpu.kernels.joseph.workers.WorkerImages` of ``out_image`` kept over several
    calls; the back projection is then complete only after its ``reduce()``.  ``along_x`` (GPU
    only): a zeroed :func:`~stirgpu.kernels.joseph.cuda.transposed_accumulator` of
    ``out_image`` kept over several calls, which the caller folds into it after the last
    (:func:`~stirgpu.kernels.joseph.cuda.fold`); default: each call makes and folds its own."""
    chunk = as_chunk(tables, proj_data_info)
    checked_image("out_image", out_image, writable=True)
    n = chunk.num_lors
    if int(np.prod(values.shape)) != n or str(values.dtype) != "float32":
        raise GeometryError(f"values: expected {n} float32 values, got shape {values.shape} {values.dtype}")
    if on_cuda(values) != on_cuda(out_image):
        raise GeometryError("values and out_image must both be on the host or both on one GPU")
    org, vs, rescale = checked_frame(frame)
    if on_cuda(out_image):
        from . import cuda as kernels

        cp = import_cupy()
        image = cp.asarray(out_image)
        flat = cp.asarray(values).reshape(-1)
        device_id = image.device.id
        planes = kernels.back_slab_planes(image, chunk.spread_views)
        slabs = (
            None if planes is None else chunk.slab_launches(device_id, planes, image.shape[0], org[0], vs[0], rescale)
        )
        kernels.back(chunk.device(device_id), flat, image, org, vs, rescale, along_x=along_x, slabs=slabs)
        return out_image
    from . import cpu
    from .workers import back_project

    flat, o = values.reshape(-1), 0
    dims = np.array(out_image.shape, np.int64)
    target = out_image.reshape(-1)
    for t, (nv, na, nt) in zip(chunk.host, chunk.shapes, strict=True):
        k = nv * na * nt
        if k:
            before, after = (t, flat[o : o + k]), (dims, org, vs, rescale)
            back_project(cpu.back_tables, before, target, k, after, cancel=cancel, workers=workers)
        o += k
    return out_image


def joseph_forward(xstart, xend, image, origin, voxel_size, out=None):
    """Joseph line integrals of the LORs ``xstart[i] -> xend[i]`` through ``image``:
    libparallelproj 2.0.7's ``joseph3d_fwd``, bit for bit.

    Parameters
    ----------
    xstart, xend
        (N, 3) float32 (or float64, rounded to float32 as libparallelproj takes them), LOR
        endpoints in (z, y, x) order.
    image
        (nz, ny, nx) float32, C-contiguous (on a GPU, also a prepared image:
        :func:`stirgpu.kernels.cuda.images.prepare_image`).
    origin, voxel_size
        3 numbers each, (z, y, x): centre of voxel [0, 0, 0] and voxel size, in the units of the
        endpoints (rounded to float32).
    out
        Optional (N,) float32 array (same place as the inputs), overwritten.

    Returns the (N,) float32 line integrals (in the units of ``voxel_size``) where the inputs
    live; LORs that miss the image give 0.
    """
    named = {"xstart": facts("xstart", xstart), "xend": facts("xend", xend), "image": facts("image", image)}
    if out is not None:
        named["out"] = facts("out", out)
    check_endpoints(named)
    check("image", named["image"], ndim=3)
    n = named["xstart"].shape[0]
    if out is not None:
        check("out", named["out"], shape=(n,), writable=True)
    org = np.asarray(checked_triple("origin", origin, positive=False), np.float32)
    vox = np.asarray(checked_triple("voxel_size", voxel_size, positive=True), np.float32)
    if same_place(named):
        from . import cuda as kernels

        return kernels.joseph_forward(xstart, xend, image, org, vox, out)
    from . import cpu
    from .workers import lor_ranges

    xs, xe = _host_endpoints(xstart), _host_endpoints(xend)
    if out is None:
        out = np.empty(n, dtype=np.float32)
    dims = np.array(image.shape, np.int64)
    for lo, hi in lor_ranges(n):
        cpu.forward_lors(xs, xe, image.reshape(-1), dims, org, vox, out, lo, hi)
    return out


def joseph_back(xstart, xend, values, out_image, origin, voxel_size):
    """Add the Joseph back projection of ``values`` into ``out_image`` (libparallelproj 2.0.7's
    ``joseph3d_back``; the adjoint of :func:`joseph_forward`, up to the order of float32
    additions).  ``values`` is (N,) float32; ``out_image`` a writable (nz, ny, nx) float32
    C-contiguous array that is *accumulated into*; LORs whose value is 0 add nothing.  Other
    arguments as for :func:`joseph_forward`.  Returns ``out_image``."""
    named = {
        "xstart": facts("xstart", xstart),
        "xend": facts("xend", xend),
        "values": facts("values", values),
        "out_image": facts("out_image", out_image),
    }
    check_endpoints(named)
    n = named["xstart"].shape[0]
    check("values", named["values"], shape=(n,))
    check("out_image", named["out_image"], ndim=3, writable=True)
    org = np.asarray(checked_triple("origin", origin, positive=False), np.float32)
    vox = np.asarray(checked_triple("voxel_size", voxel_size, positive=True), np.float32)
    if same_place(named):
        from . import cuda as kernels

        return kernels.joseph_back(xstart, xend, values, out_image, org, vox)
    from . import cpu
    from .workers import back_project

    if n:
        xs, xe = _host_endpoints(xstart), _host_endpoints(xend)
        after = (np.array(out_image.shape, np.int64), org, vox)
        back_project(cpu.back_lors, (xs, xe, values), out_image.reshape(-1), n, after)
    return out_image


def _host_endpoints(a) -> np.ndarray:
    """(N, 3) endpoints as float32 (libparallelproj's type), C-contiguous."""
    return np.ascontiguousarray(a, dtype=np.float32)
