"""Adjointness of the CUDA Joseph kernels: <A x, y> == <x, A^T y> on the GPU.

Checked with explicit random LORs (``joseph_forward`` / ``joseph_back``) and with the chunk
kernels over every segment, one launch per segment and one for a chunk of all of them, in STIR's
units and in mm.  The dot products are formed in float64 on the host; the only error left is
float32 rounding of the projections and of the atomic accumulations (~1e-7 relative per term,
in random directions), so rtol 1e-5 is far above rounding and far below any real mismatch (a
wrong weight, a missing plane or a walk along x not folded in changes the ratio by >= 1e-3).
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, joseph_back, joseph_forward
from stirgpu.kernels.joseph.lors import stir_image_frame

pytestmark = pytest.mark.gpu


def _dot(a, b) -> float:
    return float(np.dot(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()))


def test_explicit_adjoint(cp):
    """Random LORs (every principal axis, some missing the image, some ending inside it) through
    an anisotropic image with an even and an odd size: <Ax, y> == <x, A^T y> to 1e-5.  Guards the
    explicit back kernel's weights against the forward's, and its walks along x (added into the
    transposed accumulator) against being lost or folded in twice."""
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
    ax = cp.asnumpy(joseph_forward(xs, xe, cp.asarray(x), org, vox))
    aty = cp.zeros(shape, dtype=cp.float32)
    joseph_back(xs, xe, cp.asarray(y), aty, org, vox)
    assert n // 4 < np.count_nonzero(ax) < n
    assert _dot(ax, y) == pytest.approx(_dot(x, cp.asnumpy(aty)), rel=1e-5)


@pytest.mark.parametrize("units", ["stir", "mm"])
@pytest.mark.parametrize("one_launch", [False, True], ids=["per-segment", "one-chunk"])
def test_chunk_adjoint_all_segments(cp, units, one_launch):
    """The chunk kernels of every segment (span 3, mashed views, an image of odd and even sizes
    with a shifted origin), in STIR's x-voxel units and in mm, segment by segment and as one
    multi-part chunk (one launch): <Ax, y> == <x, A^T y> to 1e-5.  Guards the chunk back kernel
    against the forward one (the same endpoints and weights from the same tables), and the parts'
    directory of a multi-part launch (a part's values read at another part's offset would break
    the identity)."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=8, num_views=48, num_tangential_poss=70)
    ii = ImageInfo((31, 45, 44), (3.375, 4.0, 4.0), origin=(0.0, -2.0, 1.0))
    frame = stir_image_frame(ii, stir_units=units == "stir")
    rng = np.random.default_rng(22)
    x = rng.random(ii.shape, dtype=np.float32)
    dx = cp.asarray(x)
    aty = cp.zeros(ii.shape, dtype=cp.float32)
    chunks = [pdi.chunk_tables(seg) for seg in pdi.segment_nums]
    if one_launch:
        chunks = [chunks]
    lhs = 0.0
    for t in chunks:
        n = sum(p.num_lors for p in t) if one_launch else t.num_lors
        y = rng.random(n, dtype=np.float32)
        ax = cp.asnumpy(forward_chunk(t, pdi, dx, frame))
        assert ax.size == n
        lhs += _dot(ax, y)
        back_chunk(t, pdi, cp.asarray(y), aty, frame)
    assert lhs > 0
    assert lhs == pytest.approx(_dot(x, cp.asnumpy(aty)), rel=1e-5)
