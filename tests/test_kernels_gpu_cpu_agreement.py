"""The CUDA Joseph kernels compute what the CPU kernels (numba) compute.

Both are libparallelproj 2.0.7's float32 arithmetic, operation for operation: every float
operation of the CUDA kernels is an explicitly rounded one in the CPU kernels' order, NVRTC
contracts no multiply-add, so forward projections are equal bit for bit -- on explicit random LORs
(hits, misses, zero-length LORs, axis-parallel rays, rays on a box face, endpoints inside the box;
float32, float64 and mixed endpoints; odd and even shapes; shifted, anisotropic images) and on the
chunk kernels of a real scanner geometry in STIR's units.  Back projections add the same
float32 products into voxels in another order (the GPU's atomics, and walks along x through a
transposed accumulator), so they agree to float32 summation order: ``BACK_RTOL`` (2e-6) of the
maximum voxel.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import BACK_RTOL

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, joseph_back, joseph_forward
from stirgpu.kernels.joseph.lors import stir_image_frame

pytestmark = pytest.mark.gpu


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=BACK_RTOL * float(np.max(np.abs(want))))


def random_lors(rng, shape, org, vox, n):
    """(n, 3) float64 start/end points around the image: a mix of hits and misses, plus
    the special rays every Joseph implementation must get right."""
    shape, org, vox = np.array(shape), np.array(org), np.array(vox)
    centre = org + (shape - 1) / 2 * vox
    ext = shape * vox
    p0 = centre + (rng.random((n, 3)) - 0.5) * ext * 2.2
    p1 = centre + (rng.random((n, 3)) - 0.5) * ext * 2.2
    p1[:40] = p0[:40]  # zero length
    p1[40:140, 0] = p0[40:140, 0]  # parallel to the z slabs
    p1[140:200, 1:] = p0[140:200, 1:]  # along z only
    d = p1[200:300] - p0[200:300]
    p1[200:300, 2] = p0[200:300, 2] + d[:, 1]  # |dx| == |dy| (principal-axis tie)
    p0[300:320, 0] = org[0] - 0.5 * vox[0]  # lying exactly on a z face
    p1[300:320, 0] = p0[300:320, 0]
    inner = centre + (rng.random((200, 3)) - 0.5) * ext * 0.8
    p0[320:520] = inner  # starting inside the box
    return p0, p1


CASES = [
    ((7, 12, 13), (1.0, -3.0, 2.5), (2.0, 1.5, 1.7)),  # odd, anisotropic, shifted
    ((8, 16, 16), (-5.0, -7.5, -7.5), (1.0, 1.0, 1.0)),  # even, centred
    ((5, 33, 20), (10.0, 4.0, -30.0), (3.0, 2.0, 2.5)),  # ny != nx, far from 0
]


@pytest.mark.parametrize("edtype", ["float32", "float64", "mixed"])
@pytest.mark.parametrize("shape,org,vox", CASES)
def test_explicit_forward_equals_cpu_bit_for_bit(cp, edtype, shape, org, vox):
    """joseph_forward on the GPU == on the CPU, bit for bit, for every LOR; float64 endpoints
    (both, or only the end points) are rounded to float32 first, so they give the float32
    endpoints' numbers; zero-length LORs miss (0 on both).  Guards against contracted
    multiply-adds, another operation order, and the framed and checked walks disagreeing."""
    rng = np.random.default_rng(11)
    p0, p1 = random_lors(rng, shape, org, vox, 6000)
    f0, f1 = p0.astype(np.float32), p1.astype(np.float32)
    if edtype == "float32":
        p0, p1 = f0, f1
    elif edtype == "mixed":
        p0 = f0
    img = rng.random(shape, dtype=np.float32) + 0.1
    want = joseph_forward(p0, p1, img, org, vox)
    np.testing.assert_array_equal(want, joseph_forward(f0, f1, img, org, vox))
    got = cp.asnumpy(joseph_forward(cp.asarray(p0), cp.asarray(p1), cp.asarray(img), org, vox))
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert np.all(got[:40] == 0)
    assert 0.2 * len(want) < np.count_nonzero(want) < 0.95 * len(want)


@pytest.mark.parametrize("shape,org,vox", CASES)
def test_explicit_back_matches_cpu(cp, shape, org, vox):
    """joseph_back on the GPU == on the CPU to float32 summation order (``BACK_RTOL`` of the
    maximum voxel), and it accumulates into the given image (the initial content is kept)."""
    rng = np.random.default_rng(12)
    p0, p1 = (p.astype(np.float32) for p in random_lors(rng, shape, org, vox, 6000))
    vals = rng.random(p0.shape[0], dtype=np.float32)
    vals[::5] = 0.0
    want = joseph_back(p0, p1, vals, np.zeros(shape, np.float32), org, vox)
    start = np.full(shape, 0.25, np.float32)
    out = cp.asarray(start)
    res = joseph_back(cp.asarray(p0), cp.asarray(p1), cp.asarray(vals), out, org, vox)
    assert res is out
    assert float(want.max()) > 0
    _close(cp.asnumpy(out) - start, want)


@pytest.fixture(scope="module")
def chunk_geometry():
    """ECAT 953, span 3, 48 views, 96 tangential positions (not arc-corrected), and an image
    with an odd x/y size, voxels other than the scanner's and a shifted origin."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=6, num_views=48, num_tangential_poss=96)
    ii = ImageInfo((31, 61, 61), (3.375, 3.13, 3.13), origin=(0.0, 2.0, -3.0))
    return pdi, ii


def test_chunk_forward_equals_cpu_bit_for_bit(cp, chunk_geometry):
    """forward_chunk (STIR's float32 endpoints computed in the kernel from the chunk's tables,
    STIR's x-voxel units) on the GPU == on the CPU, segment by segment, bit for bit."""
    pdi, ii = chunk_geometry
    frame = stir_image_frame(ii)
    img = np.random.default_rng(13).random(ii.shape, dtype=np.float32)
    dimg = cp.asarray(img)
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg)
        want = forward_chunk(t, pdi, img, frame)
        got = cp.asnumpy(forward_chunk(t, pdi, dimg, frame))
        assert got.shape == t.shape
        np.testing.assert_array_equal(got, want)
        assert np.count_nonzero(want) > want.size // 2


def test_chunk_back_matches_cpu(cp, chunk_geometry):
    """back_chunk over a subset of views of every segment (a view list with gaps) == the CPU
    kernels' to float32 summation order (``BACK_RTOL`` of the maximum voxel)."""
    pdi, ii = chunk_geometry
    frame = stir_image_frame(ii)
    rng = np.random.default_rng(14)
    want = np.zeros(ii.shape, np.float32)
    out = cp.zeros(ii.shape, dtype=cp.float32)
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg, views=pdi.subset_views(1, 4))
        vals = rng.random(t.shape, dtype=np.float32)
        back_chunk(t, pdi, vals, want, frame)
        back_chunk(t, pdi, cp.asarray(vals), out, frame)
    assert float(want.max()) > 0
    _close(cp.asnumpy(out), want)


def test_multi_part_chunk_is_one_launch_of_its_parts(cp, chunk_geometry):
    """A chunk of several parts (subset views of every segment, as the planner packs a subset)
    projects in one launch to exactly what the parts give one by one: forward bit for bit
    (each bin is computed on its own, whatever the chunk), the same through a JosephChunk, and a
    one-part sequence gives a flat result; back to float32 summation order.  Guards the parts'
    directory (offsets, first blocks and LORs of each part)."""
    from stirgpu.kernels.joseph.chunk import JosephChunk

    pdi, ii = chunk_geometry
    frame = stir_image_frame(ii)
    rng = np.random.default_rng(16)
    img = cp.asarray(rng.random(ii.shape, dtype=np.float32))
    parts = [pdi.chunk_tables(s, views=pdi.subset_views(2, 5)) for s in pdi.segment_nums]
    one_by_one = [cp.asnumpy(forward_chunk(t, pdi, img, frame)) for t in parts]
    got = forward_chunk(parts, pdi, img, frame)
    assert got.shape == (sum(a.size for a in one_by_one),)
    np.testing.assert_array_equal(cp.asnumpy(got), np.concatenate([a.reshape(-1) for a in one_by_one]))
    chunk = JosephChunk(parts, pdi)  # the tables made and uploaded once, as the engine keeps them
    np.testing.assert_array_equal(cp.asnumpy(forward_chunk(chunk, pdi, img, frame)), cp.asnumpy(got))
    assert forward_chunk(parts[:1], pdi, img, frame).shape == (parts[0].num_lors,)
    vals = rng.random(got.size, dtype=np.float32)
    want = cp.zeros(ii.shape, cp.float32)
    o = 0
    for t in parts:
        back_chunk(t, pdi, cp.asarray(vals[o : o + t.num_lors].reshape(t.shape)), want, frame)
        o += t.num_lors
    back = cp.zeros(ii.shape, cp.float32)
    back_chunk(chunk, pdi, cp.asarray(vals), back, frame)
    _close(cp.asnumpy(back), cp.asnumpy(want))
