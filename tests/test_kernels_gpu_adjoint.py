"""Adjointness of the CUDA kernels: <A x, y> == <x, A^T y> on the GPU.

Checked for both kernel families and for the merged-atomics back projection, with
explicit random LORs and with geometry-aware chunks of every segment.  The dot products
are formed in float64 on the host; the only error left is float32 rounding of the
projections and of the atomic accumulations (~1e-7 relative per term, in random
directions), so rtol 1e-5 is far above rounding and far below any real mismatch (a
wrong weight or a missing plane changes the ratio by >= 1e-3).
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import stir_scaled_geometry

pytestmark = pytest.mark.gpu

OPTION_SETS = {
    "simple": dict(variant="simple"),
    "tiled": dict(variant="tiled"),  # the tuned defaults
    "tiled-plain": dict(
        variant="tiled", fwd_ilp=0, back_merge=False, back_segsum=False, maxrregcount=None, warps_per_block=8
    ),
    "tiled-ilp4-merge": dict(variant="tiled", fwd_ilp=4, back_segsum=False),
    "tiled-all": dict(variant="tiled", fwd_ilp=2, back_merge=True, lerp=True, back_segsum=False),
    "tiled-merge-w4": dict(variant="tiled", back_merge=True, back_segsum=False, warps_per_block=4),
    "tiled-segsum": dict(variant="tiled", back_segsum=True),
    "tiled-segsum-bw4-i64": dict(variant="tiled", back_segsum=True, back_warps_per_block=4, index64=True),
    "tiled-block-orders-swapped": dict(variant="tiled", block_order="view", back_block_order="axial"),
}


def _dot(a, b) -> float:
    return float(np.dot(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()))


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_explicit_adjoint(cp, cb, name):
    """Random LORs through an anisotropic, even/odd image: <Ax, y> == <x, A^T y>."""
    opts = cb.KernelOptions(**OPTION_SETS[name])
    rng = np.random.default_rng(21)
    shape, vox, org = (10, 15, 12), (2.0, 1.0, 1.5), (-9.0, -7.0, -8.25)
    centre = np.array(org) + (np.array(shape) - 1) / 2 * np.array(vox)
    n = 20000
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    p = centre + rng.uniform(-12, 12, size=(n, 3))
    length = rng.uniform(2, 60, size=(n, 1))
    xs = cp.asarray((p - length * d).astype(np.float32))
    xe = cp.asarray((p + length * d).astype(np.float32))
    x = rng.random(shape, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ax = cb.joseph_forward(xs, xe, cp.asarray(x), org, vox, options=opts).get()
    aty = cp.zeros(shape, dtype=cp.float32)
    cb.joseph_back(xs, xe, cp.asarray(y), aty, org, vox, options=opts)
    assert n // 4 < np.count_nonzero(ax) < n
    assert _dot(ax, y) == pytest.approx(_dot(x, aty.get()), rel=1e-5)


@pytest.mark.parametrize("name", list(OPTION_SETS))
def test_chunk_adjoint_all_segments(cp, cb, name):
    """Geometry-aware chunks of every segment (span 3, mashed views, 32-bin axial blocks
    of warps that are only partly filled), with STIR's scale on both sides."""
    opts = cb.KernelOptions(**OPTION_SETS[name])
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=8, num_views=48, num_tangential_poss=70)
    ii = ImageInfo((31, 45, 44), (3.375, 4.0, 4.0), origin=(0.0, -2.0, 1.0))
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(22)
    x = rng.random(ii.shape, dtype=np.float32)
    dx = cp.asarray(x)
    aty = cp.zeros(ii.shape, dtype=cp.float32)
    lhs = 0.0
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg)
        y = rng.random(t.shape, dtype=np.float32)
        ax = cb.forward_chunk(t, dx, kg.origin, kg.voxel_size, scale=kg.scale, options=opts).get()
        lhs += _dot(ax, y)
        cb.back_chunk(t, cp.asarray(y), aty, kg.origin, kg.voxel_size, scale=kg.scale, options=opts)
    assert lhs > 0
    assert lhs == pytest.approx(_dot(x, aty.get()), rel=1e-5)
