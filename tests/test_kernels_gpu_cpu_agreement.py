"""The CUDA backend computes what the CPU reference computes, to float32 rounding.

Both kernel families (``simple``: one thread per LOR on the plain image; ``tiled``:
warp-coherent stepping through zero-framed copies) are compared with
:mod:`stirgpu.kernels.cpu` on explicit random LORs (hits, misses, zero-length LORs,
axis-parallel rays, rays on a box face, endpoints inside the box; float32 and float64
endpoints; odd and even shapes; shifted, anisotropic images) and on geometry-aware
chunks of a real scanner geometry with STIR's scale.

Why the tolerances: both backends take every discrete decision (miss, principal axis,
plane range) in float64 with the same operations, so they sample the same planes; the
GPU then interpolates and sums in float32 (coordinate error <= 2^-24 of the index,
summation error <= (planes) * 2^-24 relative) while the CPU works in float64.  With
<= 60 planes per LOR that is < 1e-5 of the largest value.
"""

from __future__ import annotations

import numpy as np
import pytest

from stirgpu.geometry import ImageInfo, ProjDataInfo, Scanner
from stirgpu.kernels import cpu, stir_scaled_geometry

pytestmark = pytest.mark.gpu

RTOL_OF_MAX = 1e-5
VARIANTS = [
    "simple",
    "tiled",
    "tiled-merge",
    "tiled-segsum",
    "tiled-orders-swapped",
]


def options(cb, name):
    if name == "tiled-merge":  # neighbouring lanes merge atomics (the default before segsum)
        return cb.KernelOptions(variant="tiled", back_segsum=False, back_merge=True)
    if name == "tiled-segsum":  # shuffle-only aggregation of equal footprints
        return cb.KernelOptions(variant="tiled", back_segsum=True)
    if name == "tiled-orders-swapped":  # chunk kernels' blocks view-major forward, axial-major back
        return cb.KernelOptions(variant="tiled", block_order="view", back_block_order="axial")
    return cb.KernelOptions(variant=name)


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


def cpu_forward(p0, p1, img, org, vox, scale=1.0):
    out = np.empty(p0.shape[0], np.float32)
    cpu.forward_lors(p0, p1, img.reshape(-1), *img.shape, *org, *vox, scale, out)
    return out


def cpu_back(p0, p1, vals, shape, org, vox):
    out = np.zeros(int(np.prod(shape)), np.float32)
    cpu.back_project(cpu.back_lors, (p0, p1, vals), out, p0.shape[0], (*shape, *org, *vox, 1.0))
    return out.reshape(shape)


CASES = [
    ((7, 12, 13), (1.0, -3.0, 2.5), (2.0, 1.5, 1.7)),  # odd, anisotropic, shifted
    ((8, 16, 16), (-5.0, -7.5, -7.5), (1.0, 1.0, 1.0)),  # even, centred
    ((5, 33, 20), (10.0, 4.0, -30.0), (3.0, 2.0, 2.5)),  # ny != nx, far from 0
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("edtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,org,vox", CASES)
def test_explicit_forward_matches_cpu(cp, cb, variant, edtype, shape, org, vox):
    """joseph_forward on the GPU == the CPU reference within 1e-5 of the maximum, for
    every LOR (including exact zeros for misses and degenerate rays)."""
    rng = np.random.default_rng(11)
    p0, p1 = random_lors(rng, shape, org, vox, 6000)
    p0, p1 = p0.astype(edtype), p1.astype(edtype)
    img = rng.random(shape, dtype=np.float32) + 0.1
    want = cpu_forward(p0.astype(np.float64), p1.astype(np.float64), img, org, vox)
    opts = options(cb, variant)
    got = cb.joseph_forward(cp.asarray(p0), cp.asarray(p1), cp.asarray(img), org, vox, options=opts).get()
    assert got.dtype == np.float32 and got.shape == want.shape
    peak = float(np.abs(want).max())
    assert peak > 0
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL_OF_MAX * peak)
    # misses, zero-length and on-face rays are exact zeros on both
    assert np.all(got[:40] == 0) and np.all(want[:40] == 0)
    assert np.all(got[300:320] == 0) and np.all(want[300:320] == 0)
    assert 0.2 * len(want) < np.count_nonzero(want) < 0.95 * len(want)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape,org,vox", CASES)
def test_explicit_back_matches_cpu(cp, cb, variant, shape, org, vox):
    """joseph_back on the GPU == the CPU reference within 1e-5 of the maximum voxel, and it
    accumulates into the given image (the initial content is kept)."""
    rng = np.random.default_rng(12)
    p0, p1 = (p.astype(np.float32) for p in random_lors(rng, shape, org, vox, 6000))
    vals = rng.random(p0.shape[0], dtype=np.float32)
    vals[::5] = 0.0
    # the same (float32) endpoints on both sides: rounding an endpoint can move a ray
    # across a principal-axis tie, which changes its Joseph weights by far more than 1e-5
    want = cpu_back(p0.astype(np.float64), p1.astype(np.float64), vals, shape, org, vox)
    start = np.full(shape, 0.25, np.float32)
    out = cp.asarray(start)
    opts = options(cb, variant)
    res = cb.joseph_back(cp.asarray(p0), cp.asarray(p1), cp.asarray(vals), out, org, vox, options=opts)
    assert res is out
    got = out.get() - start
    peak = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=RTOL_OF_MAX * peak + 1e-7)


@pytest.fixture(scope="module")
def chunk_geometry():
    """ECAT 953, span 3, 48 views, 96 tangential positions (not arc-corrected), and an image
    with an odd x/y size and a shifted origin."""
    sc = Scanner.from_name("ECAT 953")
    pdi = ProjDataInfo.construct(sc, span=3, max_ring_diff=6, num_views=48, num_tangential_poss=96)
    ii = ImageInfo((31, 61, 61), (3.375, 3.13, 3.13), origin=(0.0, 2.0, -3.0))
    return pdi, ii


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunk_forward_matches_cpu(cp, cb, chunk_geometry, variant):
    """forward_chunk (endpoints computed in the kernel from ChunkTables, STIR's scale
    1/vx) == the CPU reference, segment by segment, within 1e-5 of the maximum."""
    pdi, ii = chunk_geometry
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(13)
    img = rng.random(ii.shape, dtype=np.float32)
    dimg = cp.asarray(img)
    opts = options(cb, variant)
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg)
        want = np.empty(t.shape, np.float32)
        t64 = tuple(
            np.ascontiguousarray(getattr(t, k)) for k in ("cos_phi", "sin_phi", "s", "half_chord", "tantheta", "m")
        )
        cpu.forward_tables(
            t64, img.reshape(-1), *ii.shape, *kg.origin, *kg.voxel_size, kg.scale, want.reshape(-1), 0, want.size
        )
        got = cb.forward_chunk(t, dimg, kg.origin, kg.voxel_size, scale=kg.scale, options=opts).get()
        assert got.shape == t.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=RTOL_OF_MAX * float(want.max()))


@pytest.mark.parametrize("variant", VARIANTS)
def test_chunk_back_matches_cpu(cp, cb, chunk_geometry, variant):
    """back_chunk over a subset of views of every segment == the CPU reference within 1e-5
    of the maximum voxel (subset views: the chunk path with a non-contiguous view list)."""
    pdi, ii = chunk_geometry
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(14)
    want = np.zeros(ii.num_voxels, np.float32)
    out = cp.zeros(ii.shape, dtype=cp.float32)
    opts = options(cb, variant)
    for seg in pdi.segment_nums:
        t = pdi.chunk_tables(seg, views=pdi.subset_views(1, 4))
        vals = rng.random(t.shape, dtype=np.float32)
        t64 = tuple(
            np.ascontiguousarray(getattr(t, k)) for k in ("cos_phi", "sin_phi", "s", "half_chord", "tantheta", "m")
        )
        cpu.back_project(
            cpu.back_tables, (t64, vals.reshape(-1)), want, vals.size, (*ii.shape, *kg.origin, *kg.voxel_size, kg.scale)
        )
        cb.back_chunk(t, cp.asarray(vals), out, kg.origin, kg.voxel_size, scale=kg.scale, options=opts)
    want = want.reshape(ii.shape)
    np.testing.assert_allclose(out.get(), want, rtol=0, atol=RTOL_OF_MAX * float(want.max()))


@pytest.mark.parametrize("variant", ["simple", "tiled"])
def test_multi_part_chunk_is_one_launch_of_its_parts(cp, cb, chunk_geometry, variant):
    """A chunk of several parts (subset views of every segment, as the planner packs a subset)
    projects in one launch to exactly what the parts give one by one: forward bit for bit
    (each bin is computed independently), back to float32 summation order; a one-part
    sequence gives a flat result."""
    pdi, ii = chunk_geometry
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(16)
    img = cp.asarray(rng.random(ii.shape, dtype=np.float32))
    opts = options(cb, variant)
    parts = [pdi.chunk_tables(s, views=pdi.subset_views(2, 5)) for s in pdi.segment_nums]
    one_by_one = [cb.forward_chunk(t, img, kg.origin, kg.voxel_size, scale=kg.scale, options=opts).get() for t in parts]
    got = cb.forward_chunk(parts, img, kg.origin, kg.voxel_size, scale=kg.scale, options=opts)
    assert got.shape == (sum(a.size for a in one_by_one),)
    np.testing.assert_array_equal(got.get(), np.concatenate([a.reshape(-1) for a in one_by_one]))
    dt = cb.upload_tables(parts)  # uploaded once, as the pipeline does
    np.testing.assert_array_equal(
        cb.forward_chunk(dt, img, kg.origin, kg.voxel_size, scale=kg.scale, options=opts).get(), got.get()
    )
    assert cb.forward_chunk(parts[:1], img, kg.origin, kg.voxel_size, scale=kg.scale, options=opts).shape == (
        parts[0].num_lors,
    )
    vals = rng.random(got.size, dtype=np.float32)
    want = cp.zeros(ii.shape, cp.float32)
    o = 0
    for t in parts:
        cb.back_chunk(
            t,
            cp.asarray(vals[o : o + t.num_lors].reshape(t.shape)),
            want,
            kg.origin,
            kg.voxel_size,
            scale=kg.scale,
            options=opts,
        )
        o += t.num_lors
    back = cp.zeros(ii.shape, cp.float32)
    cb.back_chunk(dt, cp.asarray(vals), back, kg.origin, kg.voxel_size, scale=kg.scale, options=opts)
    want = want.get()
    np.testing.assert_allclose(back.get(), want, rtol=0, atol=RTOL_OF_MAX * float(want.max()))


def test_tiled_equals_simple_with_every_option(cp, cb, chunk_geometry):
    """The tuning options (lerp, branch-free unrolled forward, merged and vector atomics,
    shared-memory and shuffle-aggregated back projection, no FMA, fewer registers, 64-bit
    indices, other block shapes) change only float32
    rounding: forward and back agree with the simple kernels within 1e-5 of the maximum."""
    pdi, ii = chunk_geometry
    kg = stir_scaled_geometry(ii)
    rng = np.random.default_rng(15)
    img = cp.asarray(rng.random(ii.shape, dtype=np.float32))
    seg = pdi.segment_nums[-1]
    t = pdi.chunk_tables(seg)
    vals = cp.asarray(rng.random(t.shape, dtype=np.float32))
    ref_f = cb.forward_chunk(
        t, img, kg.origin, kg.voxel_size, scale=kg.scale, options=cb.KernelOptions(variant="simple")
    ).get()
    ref_b = cp.zeros(ii.shape, cp.float32)
    cb.back_chunk(t, vals, ref_b, kg.origin, kg.voxel_size, scale=kg.scale, options=cb.KernelOptions(variant="simple"))
    ref_b = ref_b.get()
    variants = [
        cb.KernelOptions(variant="tiled", lerp=True),
        cb.KernelOptions(variant="tiled", back_merge=True, back_segsum=False),
        cb.KernelOptions(variant="tiled", back_merge=False, back_segsum=False),
        cb.KernelOptions(variant="tiled", fwd_ilp=4, back_segsum=False),
        cb.KernelOptions(variant="tiled", fwd_ilp=3, back_merge=True, lerp=True, back_segsum=False),
        cb.KernelOptions(variant="tiled", back_merge=True, warps_per_block=4, maxrregcount=64),
        cb.KernelOptions(variant="tiled", back_merge=False, back_segsum=False, back_warps_per_block=4),
        cb.KernelOptions(variant="tiled", back_merge=False, back_segsum=False, index64=True),
        cb.KernelOptions(variant="tiled", back_segsum=True),
        cb.KernelOptions(variant="tiled", back_segsum=True, back_warps_per_block=4),
        cb.KernelOptions(variant="tiled", back_segsum=True, back_merge=False, index64=True),
        cb.KernelOptions(variant="tiled", back_segsum=True, back_warps_per_block=3),
        cb.KernelOptions(variant="tiled", fmad=False),
        cb.KernelOptions(variant="tiled", maxrregcount=40),
        cb.KernelOptions(variant="tiled", warps_per_block=3),
        cb.KernelOptions(variant="tiled", index64=True),
        cb.KernelOptions(variant="simple", index64=True, threads_per_block=96),
    ]
    for opts in variants:
        f = cb.forward_chunk(t, img, kg.origin, kg.voxel_size, scale=kg.scale, options=opts).get()
        np.testing.assert_allclose(f, ref_f, rtol=0, atol=RTOL_OF_MAX * float(ref_f.max()), err_msg=str(opts))
        b = cp.zeros(ii.shape, cp.float32)
        cb.back_chunk(t, vals, b, kg.origin, kg.voxel_size, scale=kg.scale, options=opts)
        np.testing.assert_allclose(b.get(), ref_b, rtol=0, atol=RTOL_OF_MAX * float(ref_b.max()), err_msg=str(opts))
