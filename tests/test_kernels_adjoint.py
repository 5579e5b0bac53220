"""Adjointness of the Joseph projector, and explicit endpoints == chunk tables.

The back projection is the transpose of the forward one (same planes, same float32 weights), so
``<A x, y> == <x, A^T y>`` holds up to the float32 rounding of outputs and accumulations; and the
chunk kernels, which compute STIR's float32 endpoints themselves, project exactly what the
explicit-endpoint kernels project along those endpoints.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_back

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, joseph_back, joseph_forward
from stirgpu.kernels.joseph import cpu, workers
from stirgpu.kernels.joseph.chunk import JosephChunk
from stirgpu.kernels.joseph.lors import stir_image_frame


def _xp(backend):
    if backend == "cuda":
        import cupy

        return cupy
    return np


def _host(backend, a):
    return np.asarray(a.get() if backend == "cuda" else a)


@pytest.fixture(scope="module")
def small_geometry():
    """A small non-arc-corrected scanner geometry (span 3), an anisotropic image with a shifted
    origin, and its frame in STIR's units."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=4, num_views=24, num_tangential_poss=64)
    ii = ImageInfo((31, 41, 40), (3.375, 5.0, 5.0), origin=(0.0, 3.0, -4.0))
    return pdi, ii, stir_image_frame(ii)


def _dots(ax, y, x, aty):
    lhs = float(np.dot(ax.ravel().astype(np.float64), y.ravel().astype(np.float64)))
    rhs = float(np.dot(x.ravel().astype(np.float64), aty.ravel().astype(np.float64)))
    return lhs, rhs


def test_explicit_endpoints_adjointness(backend):
    """<A x, y> == <x, A^T y> for random LORs (all three principal axes, partly inside, some
    missing) on an anisotropic image.  Dot products in float64; the only error is the float32
    rounding of the forward sums and of the back projection's additions, ~6e-8 relative per term
    and averaging out over the terms: measured 4e-11 to 6.4e-9 with 1 to 16 numba threads (the
    workers' share of the additions), bar rel 3e-8.  Guards against a back projection
    that is not the forward's transpose (other planes, weights or corners)."""
    xp = _xp(backend)
    rng = np.random.default_rng(3)
    shape, vox, org = (9, 14, 12), (2.0, 1.0, 1.5), (-8.0, -6.5, -8.25)
    centre = np.array(org) + (np.array(shape) - 1) / 2 * np.array(vox)
    n = 4000
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    p = centre + rng.uniform(-12, 12, size=(n, 3))
    length = rng.uniform(2, 60, size=(n, 1))
    xs, xe = p - length * d, p + length * d
    x = rng.random(shape, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ax = _host(backend, joseph_forward(xp.asarray(xs), xp.asarray(xe), xp.asarray(x), org, vox))
    aty = xp.zeros(shape, dtype=xp.float32)
    joseph_back(xp.asarray(xs), xp.asarray(xe), xp.asarray(y), aty, org, vox)
    aty = _host(backend, aty)
    assert np.count_nonzero(ax) > n // 3 and np.count_nonzero(ax) < n  # some hit, some miss
    lhs, rhs = _dots(ax, y, x, aty)
    assert lhs == pytest.approx(rhs, rel=3e-8)


def test_chunk_adjointness(backend, small_geometry):
    """<A x, y> == <x, A^T y> for the chunk kernels of every segment, in STIR's units (float64
    dot products; measured 9.5e-9 at most, with one numba thread, bar rel 3e-8 as above).  Guards the chunk kernels'
    back projection against walking other LORs than their forward projection."""
    xp = _xp(backend)
    pdi, ii, frame = small_geometry
    rng = np.random.default_rng(4)
    x = rng.random(ii.shape, dtype=np.float32)
    for seg in pdi.segment_nums:
        tables = pdi.chunk_tables(seg, views=[0, 5, 11, 17, 23])
        y = rng.random(tables.shape, dtype=np.float32)
        ax = _host(backend, forward_chunk(tables, pdi, xp.asarray(x), frame))
        aty = xp.zeros(ii.shape, dtype=xp.float32)
        back_chunk(tables, pdi, xp.asarray(y), aty, frame)
        lhs, rhs = _dots(ax, y, x, _host(backend, aty))
        assert lhs > 0
        assert lhs == pytest.approx(rhs, rel=3e-8), f"segment {seg}"


def test_explicit_path_equals_chunk_path(backend, small_geometry):
    """STIR's endpoints of a chunk (``cpu.endpoints_array`` of its tables, in mm) times the
    frame's ``rescale`` in float32, fed to joseph_forward / joseph_back with the frame's origin
    and voxel size, reproduce forward_chunk / back_chunk: the chunk kernels compute the very
    same float32 endpoints, so the forward projections are equal bit for bit, and so are the back
    projections on the CPU (the same LORs dealt to the same workers in the same order); on a GPU,
    up to the order of float32 additions (``helpers.assert_same_back``).  Guards the chunk
    kernels' endpoint arithmetic (the rescale, the bin order) against the explicit path."""
    xp = _xp(backend)
    pdi, ii, frame = small_geometry
    origin, voxel_size, rescale = frame
    rng = np.random.default_rng(5)
    x = rng.random(ii.shape, dtype=np.float32)
    for seg in (pdi.get_min_segment_num(), 0):
        tables = pdi.chunk_tables(seg, views=[1, 6, 12, 20])
        start, end = cpu.endpoints_array(JosephChunk(tables, pdi).host[0])
        s = np.ascontiguousarray((start * rescale).reshape(-1, 3), np.float32)
        e = np.ascontiguousarray((end * rescale).reshape(-1, 3), np.float32)
        assert s.dtype == np.float32 and len(s) == tables.num_lors
        chunk = _host(backend, forward_chunk(tables, pdi, xp.asarray(x), frame))
        explicit = _host(backend, joseph_forward(xp.asarray(s), xp.asarray(e), xp.asarray(x), origin, voxel_size))
        assert chunk.shape == tables.shape and np.count_nonzero(chunk) > chunk.size // 2
        np.testing.assert_array_equal(chunk.ravel(), explicit)
        y = rng.random(tables.shape, dtype=np.float32)
        b1 = xp.zeros(ii.shape, dtype=xp.float32)
        back_chunk(tables, pdi, xp.asarray(y), b1, frame)
        b2 = xp.zeros(ii.shape, dtype=xp.float32)
        joseph_back(xp.asarray(s), xp.asarray(e), xp.asarray(y.ravel()), b2, origin, voxel_size)
        assert_same_back(_host(backend, b1), _host(backend, b2), backend)


def test_chunk_lors_missing_the_fov_give_zero(backend, small_geometry):
    """Tangential positions whose |s| exceeds the FOV radius miss the FOV cylinder (STIR's
    endpoints are both 0 there): forward gives exactly 0 there and back projecting 1 there adds
    nothing.  Guards against a LOR from the origin to itself or to a stale endpoint being
    projected."""
    xp = _xp(backend)
    pdi, ii, frame = small_geometry
    tables = pdi.chunk_tables(0, views=[0, 7], radius=100.0)
    missing = tables.half_chord == 0
    assert missing.any() and not missing.all()
    img = np.ones(ii.shape, np.float32)
    p = _host(backend, forward_chunk(tables, pdi, xp.asarray(img), frame))
    assert np.all(p[:, :, missing] == 0)
    assert np.all(p[:, :, ~missing] > 0)
    y = np.zeros(tables.shape, np.float32)
    y[:, :, missing] = 1.0
    out = xp.zeros(ii.shape, dtype=xp.float32)
    back_chunk(tables, pdi, xp.asarray(y), out, frame)
    assert float(_host(backend, out).max()) == 0.0


def test_back_accumulates_and_forward_overwrites(backend, small_geometry):
    """back_chunk adds to what out_image holds (back twice == twice the back projection, up to the
    float32 additions of the second call onto the first's sums: measured 1.4e-7 to 2.9e-7 of the
    maximum with 1 to 16 numba threads, bar 1e-6); forward_chunk overwrites a pre-filled ``out``
    and returns it, bit for bit the projection into a fresh array.  Guards against a back
    projection that zeroes its output and a forward one that adds to it."""
    xp = _xp(backend)
    pdi, ii, frame = small_geometry
    tables = pdi.chunk_tables(0, views=[3])
    rng = np.random.default_rng(6)
    y = xp.asarray(rng.random(tables.shape, dtype=np.float32))
    once = xp.zeros(ii.shape, dtype=xp.float32)
    back_chunk(tables, pdi, y, once, frame)
    twice = xp.zeros(ii.shape, dtype=xp.float32)
    back_chunk(tables, pdi, y, twice, frame)
    back_chunk(tables, pdi, y, twice, frame)
    once, twice = _host(backend, once), _host(backend, twice)
    assert once.max() > 0
    np.testing.assert_allclose(twice, 2 * once, rtol=0, atol=1e-6 * float(once.max()))
    out = xp.full(tables.shape, 123.0, dtype=xp.float32)
    img = xp.asarray(rng.random(ii.shape, dtype=np.float32))
    r = forward_chunk(tables, pdi, img, frame, out=out)
    assert r is out
    np.testing.assert_array_equal(_host(backend, out), _host(backend, forward_chunk(tables, pdi, img, frame)))


def test_cpu_workers_match_a_single_worker(small_geometry):
    """The CPU back projection with K workers (worker 0 into the output, the others into private
    images, LORs round robin, then a reduction) equals one worker up to the order of float32
    additions (measured 6.2e-7 of the maximum, bar 1e-6); the byte budget caps K.  Guards the
    workers' share of the LORs (each LOR once) and the reduction."""
    pdi, ii, frame = small_geometry
    origin, voxel_size, rescale = frame
    tables = pdi.chunk_tables(1)
    host = JosephChunk(tables, pdi).host[0]
    y = np.random.default_rng(7).random(tables.shape, dtype=np.float32).ravel()
    dims = np.array(ii.shape, np.int64)
    results = []
    for k in (1, 4):
        out = np.zeros(ii.num_voxels, np.float32)
        extra = np.zeros((k - 1, ii.num_voxels), np.float32)
        cpu.back_tables(host, y, out, extra, dims, origin, voxel_size, rescale, 0, y.size)
        if k > 1:
            assert extra.max() > 0  # the other workers did write their own images
            workers.reduce_slabs(extra, out)
        results.append(out)
    assert results[0].max() > 0
    assert not np.array_equal(results[1], results[0])  # the order did change
    np.testing.assert_allclose(results[1], results[0], rtol=0, atol=1e-6 * results[0].max())
    assert workers.extra_slabs(ii.num_voxels, 10**6, max_slab_bytes=100).shape == (0, ii.num_voxels)
    assert workers.extra_slabs(ii.num_voxels, 1).shape[0] == 0
