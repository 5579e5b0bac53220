"""The CUDA kernels of explicit endpoints: :func:`joseph_forward` and :func:`joseph_back` along
LORs given as (N, 3) float32 or float64 arrays of start and end points.
"""

from __future__ import annotations

import numpy as np

from ..arrays import import_cupy
from ..errors import GeometryError
from .cuda_arrays import as_cupy, check_array, like_input, one_device
from .cuda_compile import get_kernel
from .cuda_launch import blocks_1d, grid_args, index_type, use_tiled
from .cuda_options import DEFAULT_OPTIONS, KernelOptions
from .cuda_workspaces import combine_accumulators, image_arg, padded_copies, scratch_accumulators, try_scratch
from .frames import checked_triple

__all__ = ["joseph_forward", "joseph_back"]


def _explicit_args(cp, xstart, xend):
    xs = as_cupy(cp, "xstart", xstart)
    xe = as_cupy(cp, "xend", xend)
    for name, a in (("xstart", xs), ("xend", xe)):
        check_array(name, a, dtypes=(np.float32, np.float64))
        if a.ndim != 2 or a.shape[1] != 3:
            raise GeometryError(f"{name}: expected shape (N, 3) with (z, y, x) columns, got {a.shape}")
    if xs.shape != xe.shape or xs.dtype != xe.dtype:
        raise GeometryError(
            f"xstart {xs.shape} {xs.dtype} and xend {xe.shape} {xe.dtype} must have the same shape and dtype"
        )
    return xs, xe


def joseph_forward(xstart, xend, image, origin, voxel_size, out=None, *, options: KernelOptions | None = None):
    """Joseph line integrals of the LORs ``xstart[i] -> xend[i]`` ((N, 3), (z, y, x),
    float32 or float64) through ``image`` ((nz, ny, nx) float32); ``origin`` = centre of
    voxel [0,0,0], ``voxel_size`` (z, y, x).  Returns (N,) float32 (``out`` if given,
    overwritten) on the inputs' device."""
    cp = import_cupy()
    options = options or DEFAULT_OPTIONS
    xs, xe = _explicit_args(cp, xstart, xend)
    img, prepared, kind = image_arg(cp, image)
    check_array("image", img, ndim=3)
    n = xs.shape[0]
    named = {"xstart": xs, "xend": xe, "image": img}
    if out is not None:
        res = as_cupy(cp, "out", out)
        check_array("out", res, shape=(n,))
        named["out"] = res
    dev = one_device(named)
    org = checked_triple("origin", origin, positive=False)
    vox = checked_triple("voxel_size", voxel_size, positive=True)
    with cp.cuda.Device(dev):
        if out is None:
            res = cp.empty(n, dtype=cp.float32)
        if n:
            etype = "float" if xs.dtype == np.float32 else "double"
            idx = index_type(img.shape, options)
            tpb = int(options.threads_per_block)
            args_tail = (np.int64(n),) + grid_args(org, vox, img.shape)
            copies = None
            if prepared is not None and options.variant != "simple":
                copies = prepared  # made already: the tiled kernels cost nothing extra
            elif use_tiled(options, n, img.shape):
                copies = try_scratch(cp, lambda: padded_copies(cp, dev, options, img), options)
            if copies is not None:
                k = get_kernel(dev, options, f"fwd_explicit_tiled<{etype}, {idx}>")
                k((blocks_1d(n, tpb),), (tpb,), (xs, xe, img, copies[0], copies[1], res) + args_tail)
            else:
                k = get_kernel(dev, options, f"fwd_explicit_simple<{etype}, {idx}>")
                k((blocks_1d(n, tpb),), (tpb,), (xs, xe, img, res) + args_tail)
    return out if out is not None else like_input(res, kind)


def joseph_back(xstart, xend, values, out_image, origin, voxel_size, *, options: KernelOptions | None = None):
    """Add the Joseph back projection of ``values`` ((N,) float32) along the LORs
    ``xstart -> xend`` into ``out_image`` ((nz, ny, nx) float32, accumulated): the
    adjoint of :func:`joseph_forward`.  Returns ``out_image``."""
    cp = import_cupy()
    options = options or DEFAULT_OPTIONS
    xs, xe = _explicit_args(cp, xstart, xend)
    n = xs.shape[0]
    vals = as_cupy(cp, "values", values)
    check_array("values", vals, shape=(n,))
    img = as_cupy(cp, "out_image", out_image)
    check_array("out_image", img, ndim=3)
    dev = one_device({"xstart": xs, "xend": xe, "values": vals, "out_image": img})
    org = checked_triple("origin", origin, positive=False)
    vox = checked_triple("voxel_size", voxel_size, positive=True)
    if n == 0:
        return out_image
    with cp.cuda.Device(dev):
        etype = "float" if xs.dtype == np.float32 else "double"
        idx = index_type(img.shape, options)
        tpb = int(options.threads_per_block)
        args_tail = (np.int64(n),) + grid_args(org, vox, img.shape)
        acc = None
        if use_tiled(options, n, img.shape):
            acc = try_scratch(cp, lambda: scratch_accumulators(cp, img.shape), options)
        if acc is not None:
            k = get_kernel(dev, options, f"back_explicit_tiled<{etype}, {idx}>")
            k((blocks_1d(n, tpb),), (tpb,), (xs, xe, vals, img, acc[0], acc[1]) + args_tail)
            combine_accumulators(dev, options, img, acc[0], acc[1])
        else:
            k = get_kernel(dev, options, f"back_explicit_simple<{etype}, {idx}>")
            k((blocks_1d(n, tpb),), (tpb,), (xs, xe, vals, img) + args_tail)
    return out_image
