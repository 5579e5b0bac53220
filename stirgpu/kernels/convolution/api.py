"""Separable 3-D convolution of a float32 (z, y, x) image, in STIR's arithmetic.

STIR filters an image one axis at a time (z, then y, then x: ``ArrayFunction.inl``,
``in_place_apply_array_functions_on_each_index``), each line with a 1-D convolution whose
samples outside the line count as zero, accumulated in float32 in a fixed order.  Two of
STIR's 1-D convolutions are reproduced, operation for operation:

* ``symmetric`` (``ArrayFilter1DUsingConvolutionSymmetricKernel``, the Metz filter): a half
  kernel ``h[0..J]``; ``out[i] = h[0] x[i]``, then for ``j = 1, 2, ...`` ascending
  ``out[i] += h[j] (x[i-j] + x[i+j])`` while both neighbours exist, then the one-sided terms
  ``out[i] += h[j] x[i+j]`` (or ``x[i-j]``) for the remaining ``j``;
* ``general`` (``ArrayFilter1DUsingConvolution``, the Gaussian filter): a kernel ``k[-L..L]``;
  ``out[i] = 0``, then ``out[i] += k[j] x[i-j]`` for ``j`` ascending over the terms inside the
  line.

Both are written twice with the same per-voxel sequence of float32 roundings (no fused
multiply-add), so they give the same bits:

* :func:`convolve_axis_numba` -- the CPU kernel: in place, one tile of 64 lines at a time in
  small buffers (memory: two tiles per thread, not a second image); numba, parallel over tiles,
  compiled on first use;
* :func:`convolve_axis_xp` -- array-generic (numpy or cupy: ``xp`` is the array's module):
  whole-image slices, one pass per kernel coefficient, so a GPU-resident image is filtered
  where it lives (memory: three more images of its size while a pass runs).

:func:`convolve_axis` picks the numba kernel for numpy arrays and the generic path for cupy.
"""

from __future__ import annotations

import numpy as np

from ...errors import StirGpuError

__all__ = ["SYMMETRIC", "GENERAL", "convolve_axis", "convolve_axis_numba", "convolve_axis_xp"]

SYMMETRIC = "symmetric"
GENERAL = "general"
_TILE = 64  # lines per numba work item (its two buffers: n x 64 float32 each)


def _check(array, coefficients: np.ndarray, axis: int, kind: str) -> np.ndarray:
    if kind not in (SYMMETRIC, GENERAL):
        raise StirGpuError(f"convolution kind must be {SYMMETRIC!r} or {GENERAL!r}, not {kind!r}")
    if getattr(array, "ndim", None) != 3 or array.dtype != np.float32:
        raise StirGpuError(
            f"expected a 3-D float32 image, got {getattr(array, 'dtype', type(array))} "
            f"of shape {getattr(array, 'shape', None)}"
        )
    if axis not in (0, 1, 2):
        raise StirGpuError(f"axis must be 0 (z), 1 (y) or 2 (x), not {axis}")
    k = np.ascontiguousarray(coefficients, dtype=np.float32)
    if k.ndim != 1 or k.size == 0 or (kind == GENERAL and k.size % 2 == 0):
        raise StirGpuError(f"{kind} kernel: expected a non-empty 1-D array (odd length for 'general'), got {k.shape}")
    return k


def convolve_axis(array, coefficients: np.ndarray, axis: int, kind: str):
    """Convolve ``array`` (float32, (z, y, x), numpy or cupy) along ``axis`` in place; returns it.
    ``coefficients``: the half kernel (``symmetric``) or the whole kernel, centre in the middle
    (``general``)."""
    if isinstance(array, np.ndarray):
        return convolve_axis_numba(array, coefficients, axis, kind)
    return convolve_axis_xp(array, coefficients, axis, kind)


# ----------------------------------------------------------------------------------- numba (CPU)


def convolve_axis_numba(array: np.ndarray, coefficients: np.ndarray, axis: int, kind: str) -> np.ndarray:
    """:func:`convolve_axis` for a C-contiguous numpy array (in place), numba kernel."""
    k = _check(array, coefficients, axis, kind)
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise StirGpuError("convolve_axis_numba: the image must be a writeable C-contiguous array")
    nz, ny, nx = array.shape
    outer, inner = ((1, ny * nx), (nz, nx), (nz * ny, 1))[axis]
    from . import cpu as cpu_separable

    cpu_separable.separable_pass(array.reshape(-1), outer, array.shape[axis], inner, k, _TILE, kind == SYMMETRIC)
    return array


# --------------------------------------------------------------------- array-generic (numpy / cupy)


def _module(array):
    if isinstance(array, np.ndarray):
        return np
    import cupy

    return cupy


def _along(axis: int, sl: slice) -> tuple:
    return (slice(None),) * axis + (sl,)


def convolve_axis_xp(array, coefficients: np.ndarray, axis: int, kind: str):
    """:func:`convolve_axis` written once for numpy and cupy: the result is written back into
    ``array``, which is returned.  Same bits as :func:`convolve_axis_numba`."""
    k = _check(array, coefficients, axis, kind)
    xp = _module(array)
    n = array.shape[axis]
    x = array.copy()
    if kind == SYMMETRIC:
        xp.multiply(x, k[0], out=array)
        pair = xp.empty_like(x)
        for j in range(1, min(k.size, n)):
            # x[i-j] + x[i+j], a missing neighbour counting as 0 (adding 0 is exact: STIR's one-sided terms)
            pair[_along(axis, slice(0, j))] = 0
            pair[_along(axis, slice(j, None))] = x[_along(axis, slice(0, n - j))]
            pair[_along(axis, slice(0, n - j))] += x[_along(axis, slice(j, None))]
            pair *= k[j]
            array += pair
        return array
    half = k.size // 2
    array[...] = 0
    term = xp.empty_like(x)
    for j in range(-half, half + 1):
        if abs(j) >= n:
            continue  # no sample of the line under this coefficient
        c = k[j + half]
        if j >= 0:  # out[i] += k[j] x[i - j] for i >= j
            t = term[_along(axis, slice(0, n - j))]
            xp.multiply(x[_along(axis, slice(0, n - j))], c, out=t)
            array[_along(axis, slice(j, None))] += t
        else:
            t = term[_along(axis, slice(0, n + j))]
            xp.multiply(x[_along(axis, slice(-j, None))], c, out=t)
            array[_along(axis, slice(0, n + j))] += t
    return array
