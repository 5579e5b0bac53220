"""numba kernels of :mod:`.api` (imported, and compiled, on the first CPU filtering).

An image viewed as ``(outer, n, inner)``, the filtered axis in the middle, is cut into tiles of
up to ``tile`` lines: neighbouring ``inner`` positions of one ``outer`` index, or, where
``inner`` is 1 (the x axis), neighbouring ``outer`` indices.  Each tile is copied into a small
``(n, lines)`` buffer, filtered into a second one and written back, so the image is filtered in
place with two tiles of extra memory per thread.  The loop over a tile's lines is innermost, so
that it vectorises; every output voxel still sees STIR's sequence of float32 operations (no
``fastmath``: no reassociation, no fused multiply-add).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ..jit import cached_njit

__all__ = ["separable_pass"]


@cached_njit(nogil=True, fastmath=False)
def _symmetric_tile(buf, half, out):
    """STIR's symmetric-kernel convolution of the columns of ``buf`` (n, w) into ``out``."""
    n, w = buf.shape
    last = half.size - 1
    for i in range(n):
        for b in range(w):
            out[i, b] = half[0] * buf[i, b]
        both = min(last, n - 1 - i, i)
        for j in range(1, both + 1):
            c = half[j]
            for b in range(w):
                out[i, b] += c * (buf[i - j, b] + buf[i + j, b])
        for j in range(both + 1, min(last, n - 1 - i) + 1):
            c = half[j]
            for b in range(w):
                out[i, b] += c * buf[i + j, b]
        for j in range(both + 1, min(last, i) + 1):
            c = half[j]
            for b in range(w):
                out[i, b] += c * buf[i - j, b]


@cached_njit(nogil=True, fastmath=False)
def _general_tile(buf, kernel, out):
    """STIR's general convolution (kernel centred in the middle) of the columns of ``buf``."""
    n, w = buf.shape
    half = kernel.size // 2
    for i in range(n):
        for b in range(w):
            out[i, b] = np.float32(0.0)
        for j in range(max(-half, i - (n - 1)), min(half, i) + 1):
            c = kernel[j + half]
            for b in range(w):
                out[i, b] += c * buf[i - j, b]


@cached_njit(parallel=True, nogil=True, fastmath=False)
def separable_pass(flat, outer, n, inner, coefficients, tile, symmetric):
    """Convolve the C-ordered ``flat`` image, viewed as (outer, n, inner), along its middle axis
    in place: STIR's symmetric-kernel convolution (``symmetric``: a half kernel) or its general
    one (a whole, centred kernel)."""
    across_outer = inner == 1
    span = outer if across_outer else inner
    blocks = (span + tile - 1) // tile
    groups = 1 if across_outer else outer
    # element i of a tile's line b: flat[start + i * step_i + b * step_b]
    step_i = 1 if across_outer else inner
    step_b = n if across_outer else 1
    for t in prange(groups * blocks):
        b0 = (t % blocks) * tile
        start = b0 * n if across_outer else (t // blocks) * n * inner + b0
        w = min(tile, span - b0)
        buf = np.empty((n, w), dtype=np.float32)
        out = np.empty((n, w), dtype=np.float32)
        for i in range(n):
            for b in range(w):
                buf[i, b] = flat[start + i * step_i + b * step_b]
        if symmetric:
            _symmetric_tile(buf, coefficients, out)
        else:
            _general_tile(buf, coefficients, out)
        for i in range(n):
            for b in range(w):
                flat[start + i * step_i + b * step_b] = out[i, b]
