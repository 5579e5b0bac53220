"""Chunk launches of the CUDA backend: :func:`forward_chunk` and :func:`back_chunk` (endpoints
computed in the kernel from a chunk's tables, all parts in one launch; every argument checked),
and the launch arguments they share with :mod:`.cuda_explicit` and :mod:`.cuda_launcher`.
"""

from __future__ import annotations

import numpy as np

from ..arrays import import_cupy
from ..errors import StirGpuError
from .cuda_arrays import as_cupy, check_array, like_input, one_device
from .cuda_compile import get_kernel
from .cuda_options import DEFAULT_OPTIONS, KernelOptions
from .cuda_tables import DeviceTables, chunk_shape, parts_grid, upload_tables
from .cuda_workspaces import (
    BackAccumulator,
    combine_accumulators,
    image_arg,
    padded_copies,
    padded_voxels,
    scratch_accumulators,
    tiled_possible,
    try_scratch,
)
from .frames import checked_triple

__all__ = [
    "forward_chunk",
    "back_chunk",
    "launch_tiled",
    "grid_args",
    "index_type",
    "use_tiled",
    "blocks_1d",
    "INT32_LIMIT",
]

INT32_LIMIT = 2**31 - 1


def grid_args(origin, voxel_size, shape):
    o, v = origin, voxel_size
    return (
        np.float64(o[0]),
        np.float64(o[1]),
        np.float64(o[2]),
        np.float64(v[0]),
        np.float64(v[1]),
        np.float64(v[2]),
        np.int32(shape[0]),
        np.int32(shape[1]),
        np.int32(shape[2]),
    )


def index_type(shape, options: KernelOptions) -> str:
    return "int" if padded_voxels(shape) <= INT32_LIMIT and not options.index64 else "long long"


def use_tiled(options: KernelOptions, num_lors: int, shape) -> bool:
    possible = tiled_possible(shape)
    if options.variant == "simple":
        return False
    if options.variant == "tiled":
        if not possible:
            raise StirGpuError(f"tiled kernels: image shape {shape} exceeds the CUDA grid limits")
        return True
    nvox = shape[0] * shape[1] * shape[2]
    return possible and num_lors >= options.auto_min_lors_per_voxel * nvox


def blocks_1d(n: int, threads: int) -> int:
    return max(1, (n + threads - 1) // threads)


def launch_tiled(kernel, back: bool, warps: int, tables: DeviceTables, axial: int, values, image, a, b, sc, g) -> None:
    """One tiled chunk launch over all parts of ``tables`` (forward: ``values`` written from
    the image's layouts ``a``/``b``; back: ``values`` added into the accumulators ``a``/``b``)."""
    shapes = tables.shapes
    grid, block = parts_grid(shapes, warps)
    head = (tables.data, np.int32(len(shapes)), np.int32(shapes[0][2]), np.int32(axial))
    if back:
        kernel(grid, block, head + (values, image, a, b, sc) + g)
    else:
        kernel(grid, block, head + (image, a, b, values, sc) + g)


def forward_chunk(tables, image, origin, voxel_size, out=None, scale=1.0, *, options: KernelOptions | None = None):
    """Forward project one chunk: ``tables`` (ChunkTables, a sequence of them -- the parts of a
    multi-segment chunk -- or :class:`DeviceTables`) give the LORs, whose endpoints (mm,
    gantry frame) are computed in the kernel; ``image`` (nz, ny, nx) float32 on the device;
    every line integral is multiplied by ``scale``.  One launch covers all parts.  Returns
    (nv, na, nt) float32 in [view][axial][tangential] order for one ChunkTables, else the
    parts' bins one after the other, (N,) float32 (``out`` if given, overwritten)."""
    cp = import_cupy()
    options = options or DEFAULT_OPTIONS
    img, prepared, kind = image_arg(cp, image)
    check_array("image", img, ndim=3)
    named = {"image": img}
    shapes, single = chunk_shape(tables)
    n = sum(a * b * c for a, b, c in shapes)
    shape = single if single is not None else (n,)
    if out is not None:
        res = as_cupy(cp, "out", out)
        check_array("out", res, shape=shape)
        named["out"] = res
    dev = one_device(named)
    org = checked_triple("origin", origin, positive=False)
    vox = checked_triple("voxel_size", voxel_size, positive=True)
    sc = np.float32(scale)
    with cp.cuda.Device(dev):
        if out is None:
            res = cp.empty(shape, dtype=cp.float32)
        if n:
            dt = upload_tables(tables, dev)
            idx = index_type(img.shape, options)
            head = (dt.data, np.int32(len(shapes)), np.int32(shapes[0][2]))
            g = grid_args(org, vox, img.shape)
            copies = None
            if prepared is not None and options.variant != "simple":
                copies = prepared  # made already: the tiled kernels cost nothing extra
            elif use_tiled(options, n, img.shape):
                copies = try_scratch(cp, lambda: padded_copies(cp, dev, options, img), options)
            if copies is not None:
                launch_tiled(
                    get_kernel(dev, options, f"fwd_chunk_tiled<{idx}>"),
                    False,
                    int(options.warps_per_block),
                    dt,
                    options.axial_blocks(dt, back=False),
                    res,
                    img,
                    copies[0],
                    copies[1],
                    sc,
                    g,
                )
            else:
                tpb = int(options.threads_per_block)
                k = get_kernel(dev, options, f"fwd_chunk_simple<{idx}>")
                k((blocks_1d(n, tpb),), (tpb,), head + (np.int64(n), img, res, sc) + g)
    return out if out is not None else like_input(res, kind)


def back_chunk(tables, values, out_image, origin, voxel_size, scale=1.0, *, options: KernelOptions | None = None):
    """Add the back projection of one chunk's ``values`` into ``out_image`` (accumulated);
    the adjoint of :func:`forward_chunk` with the same arguments (``values`` shaped like its
    result).  Returns ``out_image``.  With a :class:`BackAccumulator` as ``out_image`` the
    tiled kernels add into its accumulators, and :meth:`BackAccumulator.finish` completes
    the image."""
    cp = import_cupy()
    options = options or DEFAULT_OPTIONS
    shapes, single = chunk_shape(tables)
    n = sum(a * b * c for a, b, c in shapes)
    vals = as_cupy(cp, "values", values)
    check_array("values", vals, shape=single if single is not None else (n,))
    held = out_image if isinstance(out_image, BackAccumulator) else None
    img = held.image if held is not None else as_cupy(cp, "out_image", out_image)
    check_array("out_image", img, ndim=3)
    dev = one_device({"values": vals, "out_image": img})
    org = checked_triple("origin", origin, positive=False)
    vox = checked_triple("voxel_size", voxel_size, positive=True)
    sc = np.float32(scale)
    if n == 0:
        return out_image
    with cp.cuda.Device(dev):
        dt = upload_tables(tables, dev)
        idx = index_type(img.shape, options)
        head = (dt.data, np.int32(len(shapes)), np.int32(shapes[0][2]))
        g = grid_args(org, vox, img.shape)
        acc = None
        if held is not None and held.a is not None and options.variant != "simple":
            acc = (held.a, held.b)  # kept across chunks: folded in once by held.finish()
        elif use_tiled(options, n, img.shape):
            acc = try_scratch(cp, lambda: scratch_accumulators(cp, img.shape), options)
        if acc is not None:
            w = int(options.back_warps_per_block)
            launch_tiled(
                get_kernel(dev, options, f"back_chunk_tiled<{idx}>"),
                True,
                w,
                dt,
                options.axial_blocks(dt, back=True),
                vals,
                img,
                acc[0],
                acc[1],
                sc,
                g,
            )
            if held is None:
                combine_accumulators(dev, options, img, acc[0], acc[1])
        else:
            tpb = int(options.threads_per_block)
            k = get_kernel(dev, options, f"back_chunk_simple<{idx}>")
            k((blocks_1d(n, tpb),), (tpb,), head + (np.int64(n), vals, img, sc) + g)
    return out_image
