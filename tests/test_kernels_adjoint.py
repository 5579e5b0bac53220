"""Adjointness of the Joseph kernels, and explicit-endpoint == geometry-aware results."""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import back_chunk, forward_chunk, joseph_back, joseph_forward, stir_scaled_geometry


def _xp(backend):
    if backend == "cuda":
        import cupy

        return cupy
    return np


def _host(backend, a):
    return np.asarray(a.get() if backend == "cuda" else a)


@pytest.fixture(scope="module")
def small_geometry():
    """A small non-arc-corrected scanner geometry (span 3) with a default-like image."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=4, num_views=24, num_tangential_poss=64)
    ii = ImageInfo((31, 41, 40), (3.375, 5.0, 5.0), origin=(0.0, 3.0, -4.0))
    return pdi, ii


def test_explicit_endpoints_adjointness(backend):
    """<A x, y> == <x, A^T y> for random LORs (all three principal axes, partly inside, some
    missing) on an anisotropic image.  Dot products in float64; the only error is float32
    rounding of outputs and accumulations, ~1e-7 relative per term, so rtol 1e-5."""
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
    lhs = float(np.dot(ax.astype(np.float64), y.astype(np.float64)))
    rhs = float(np.dot(x.ravel().astype(np.float64), aty.ravel().astype(np.float64)))
    assert lhs == pytest.approx(rhs, rel=1e-5)


def test_chunk_adjointness_with_scale(backend, small_geometry):
    """<A x, y> == <x, A^T y> for the geometry-aware kernels of every segment, with STIR's
    scale 1/vx on both sides (float64 dot products, rtol 1e-5 as above)."""
    xp = _xp(backend)
    pdi, ii = small_geometry
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(4)
    x = rng.random(ii.shape, dtype=np.float32)
    for seg in pdi.segment_nums:
        tables = pdi.chunk_tables(seg, views=[0, 5, 11, 17, 23])
        y = rng.random(tables.shape, dtype=np.float32)
        ax = _host(backend, forward_chunk(tables, xp.asarray(x), **kg.as_kwargs()))
        aty = xp.zeros(ii.shape, dtype=xp.float32)
        back_chunk(tables, xp.asarray(y), aty, **kg.as_kwargs())
        aty = _host(backend, aty)
        lhs = float(np.dot(ax.ravel().astype(np.float64), y.ravel().astype(np.float64)))
        rhs = float(np.dot(x.ravel().astype(np.float64), aty.ravel().astype(np.float64)))
        assert lhs > 0
        assert lhs == pytest.approx(rhs, rel=1e-5), f"segment {seg}"


def test_explicit_path_equals_geometry_aware_path(backend, small_geometry):
    """Endpoints from ProjDataInfo.lor_endpoints fed to joseph_forward/joseph_back (then
    scaled by 1/vx) reproduce forward_chunk/back_chunk: both build the same float64
    endpoints, so only float32 rounding of the scaling differs (rel 1e-6 forward; back
    rel 1e-5 of the max, as additions happen in a different order)."""
    xp = _xp(backend)
    pdi, ii = small_geometry
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(5)
    x = rng.random(ii.shape, dtype=np.float32)
    views = np.array([1, 6, 12, 20])
    for seg in (pdi.get_min_segment_num(), 0):
        tables = pdi.chunk_tables(seg, views=views)
        ax = np.arange(pdi.get_num_axial_poss(seg))
        tg = np.arange(pdi.get_min_tangential_pos_num(), pdi.get_max_tangential_pos_num() + 1)
        s, e = pdi.lor_endpoints(seg, views[:, None, None], ax[None, :, None], tg[None, None, :])
        s, e = np.ascontiguousarray(s.reshape(-1, 3)), np.ascontiguousarray(e.reshape(-1, 3))
        chunk = _host(backend, forward_chunk(tables, xp.asarray(x), **kg.as_kwargs()))
        explicit = _host(
            backend, joseph_forward(xp.asarray(s), xp.asarray(e), xp.asarray(x), kg.origin, kg.voxel_size)
        ) * np.float32(kg.scale)
        assert chunk.shape == tables.shape
        np.testing.assert_allclose(chunk.ravel(), explicit, rtol=1e-6, atol=1e-6 * chunk.max())
        y = rng.random(tables.shape, dtype=np.float32)
        b1 = xp.zeros(ii.shape, dtype=xp.float32)
        back_chunk(tables, xp.asarray(y), b1, **kg.as_kwargs())
        b2 = xp.zeros(ii.shape, dtype=xp.float32)
        joseph_back(
            xp.asarray(s), xp.asarray(e), xp.asarray((y * np.float32(kg.scale)).ravel()), b2, kg.origin, kg.voxel_size
        )
        b1, b2 = _host(backend, b1), _host(backend, b2)
        np.testing.assert_allclose(b1, b2, rtol=0, atol=1e-5 * b1.max())


def test_chunk_lors_missing_the_fov_give_zero(backend, small_geometry):
    """Tangential positions whose |s| exceeds the FOV radius have half_chord 0: forward gives
    exactly 0 there and back projecting 1 there adds nothing."""
    xp = _xp(backend)
    pdi, ii = small_geometry
    kg = stir_scaled_geometry(ii)
    tables = pdi.chunk_tables(0, views=[0, 7], radius=100.0)
    missing = tables.half_chord == 0
    assert missing.any() and not missing.all()
    img = np.ones(ii.shape, np.float32)
    p = _host(backend, forward_chunk(tables, xp.asarray(img), **kg.as_kwargs()))
    assert np.all(p[:, :, missing] == 0)
    assert np.all(p[:, :, ~missing] > 0)
    y = np.zeros(tables.shape, np.float32)
    y[:, :, missing] = 1.0
    out = xp.zeros(ii.shape, dtype=xp.float32)
    back_chunk(tables, xp.asarray(y), out, **kg.as_kwargs())
    assert float(_host(backend, out).max()) == 0.0


def test_back_accumulates_and_forward_overwrites(backend, small_geometry):
    """back_chunk adds to what out_image holds (twice the values == back twice); forward_chunk
    overwrites a pre-filled out (float32 rounding only, rel 1e-6)."""
    xp = _xp(backend)
    pdi, ii = small_geometry
    kg = stir_scaled_geometry(ii)
    tables = pdi.chunk_tables(0, views=[3])
    rng = np.random.default_rng(6)
    y = rng.random(tables.shape, dtype=np.float32)
    once = xp.zeros(ii.shape, dtype=xp.float32)
    back_chunk(tables, xp.asarray(y), once, **kg.as_kwargs())
    twice = xp.zeros(ii.shape, dtype=xp.float32)
    back_chunk(tables, xp.asarray(y), twice, **kg.as_kwargs())
    back_chunk(tables, xp.asarray(y), twice, **kg.as_kwargs())
    np.testing.assert_allclose(
        _host(backend, twice), 2 * _host(backend, once), rtol=1e-6, atol=1e-6 * float(_host(backend, once).max())
    )
    out = xp.full(tables.shape, 123.0, dtype=xp.float32)
    img = xp.asarray(rng.random(ii.shape, dtype=np.float32))
    r = forward_chunk(tables, img, out=out, **kg.as_kwargs())
    assert r is out
    np.testing.assert_allclose(
        _host(backend, out), _host(backend, forward_chunk(tables, img, **kg.as_kwargs())), rtol=1e-6
    )


def test_cpu_workers_match_a_single_worker(small_geometry):
    """The CPU back projection with K workers (worker 0 into the output, the others into private
    images, LORs round robin, then a reduction) equals one worker up to float32 addition order
    (atol 1e-5 of the max); the byte budget caps K."""
    from stirgpu.kernels import api, cpu

    pdi, ii = small_geometry
    kg = stir_scaled_geometry(ii)
    tables = pdi.chunk_tables(1)
    t64 = api._tables_f64(tables)
    y = np.random.default_rng(7).random(tables.shape, dtype=np.float32).ravel()
    nz, ny, nx = ii.shape
    results = []
    for k in (1, 4):
        out = np.zeros(ii.num_voxels, np.float32)
        extra = np.zeros((k - 1, ii.num_voxels), np.float32)
        cpu.back_tables(t64, y, out, extra, nz, ny, nx, *kg.origin, *kg.voxel_size, kg.scale, 0, y.size)
        if k > 1:
            assert extra.max() > 0  # the other workers did write their own images
            cpu.reduce_slabs(extra, out)
        results.append(out)
    assert results[0].max() > 0
    np.testing.assert_allclose(results[1], results[0], rtol=0, atol=1e-5 * results[0].max())
    assert cpu.extra_slabs(ii.num_voxels, 10**6, max_slab_bytes=100).shape == (0, ii.num_voxels)
    assert cpu.extra_slabs(ii.num_voxels, 1).shape[0] == 0
