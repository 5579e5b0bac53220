"""The Joseph projector (libparallelproj 2.0.7's float32 ``joseph3d_fwd`` / ``joseph3d_back``)
against exact line integrals and 2.0.7's plane rules, through the explicit-endpoint entry points.

Every test runs on each backend (``backend`` fixture: CPU here, CUDA where a GPU is).  Where a
ray crosses whole planes of a ones-image, the exact integral is a float32 sum of n samples of 1
times the float32 path length per plane: a few float32 roundings, hence rel 1e-6 (~16 ulps).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stirgpu.kernels import joseph_back, joseph_forward


def _xp(backend):
    if backend == "cuda":
        import cupy

        return cupy
    return np


def _fwd(backend, xstart, xend, image, origin, voxel_size):
    """Forward on ``backend``; returns a host float64 array."""
    xp = _xp(backend)
    r = joseph_forward(
        xp.asarray(np.asarray(xstart, np.float64)),
        xp.asarray(np.asarray(xend, np.float64)),
        xp.asarray(np.ascontiguousarray(image, np.float32)),
        origin,
        voxel_size,
    )
    return np.asarray(r.get() if backend == "cuda" else r, dtype=np.float64)


def _box(shape, value=1.0):
    return np.full(shape, value, dtype=np.float32)


def test_axis_aligned_rays_give_box_lengths(backend):
    """A ray along axis a through voxel centres of a ones-image crosses all n[a] planes with
    interpolation weight 1: the integral is the box length n[a]*v[a] exactly (float32 rounding
    only, rel 1e-6).  Guards the principal-axis choice and the plane range for each axis."""
    shape, vox, org = (6, 7, 9), (2.0, 1.5, 0.75), (-5.0, 3.0, 1.0)
    img = _box(shape)
    centre = [o + (n - 1) / 2 * v for o, n, v in zip(org, shape, vox, strict=True)]
    starts, ends, expected = [], [], []
    for a in range(3):
        p0, p1 = list(centre), list(centre)
        p0[a] -= 100.0
        p1[a] += 100.0
        starts.append(p0)
        ends.append(p1)
        expected.append(shape[a] * vox[a])
    got = _fwd(backend, starts, ends, img, org, vox)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("angle_deg", [0.0, 10.0, 30.0, 44.0, 46.0, 60.0, 89.0])
def test_oblique_transaxial_rays_give_exact_chords(backend, angle_deg):
    """A centred ray at angle t in the x-y plane of a ones-box leaves through the two faces of
    its principal axis while staying between voxel centres sideways, so every plane
    contributes 1 and Joseph equals the exact chord n*v/|cos| (rel 1e-6).  Checks cf =
    v/|cos| on both sides of 45 degrees (principal axis x, then y).  Guards the principal-axis
    choice from the float32 squared direction cosines and the path length per plane."""
    shape, vox = (3, 61, 61), (2.0, 1.0, 1.0)
    img = _box(shape)
    org = (0.0, -30.0, -30.0)  # centre of the box at (2, 0, 0)
    t = math.radians(angle_deg)
    d = np.array([0.0, math.sin(t), math.cos(t)])
    c = np.array([2.0, 0.0, 0.0])
    got = _fwd(backend, [c - 200 * d], [c + 200 * d], img, org, vox)
    # principal axis x while |cos| >= |sin| (ties -> y); its face-to-face chord is 61/|cos|
    cos_principal = abs(d[2]) if abs(d[2]) > abs(d[1]) else abs(d[1])
    np.testing.assert_allclose(got, [61.0 / cos_principal], rtol=1e-6)


def test_oblique_3d_ray_and_z_principal_axis(backend):
    """Fully 3-D oblique rays, one with z as principal axis, through a ones-box: the chord
    between the principal-axis faces, n[D] v[D] / |cos_D| (rel 1e-6).  Guards the z axis as
    principal axis (its plane stride and the other two axes' roles)."""
    shape, vox = (40, 21, 23), (1.0, 2.0, 1.5)
    img = _box(shape)
    org = (0.0, 0.0, 0.0)
    centre = np.array([19.5, 20.0, 16.5])
    for d in (np.array([1.0, 0.15, -0.2]), np.array([0.1, 0.3, 1.0]), np.array([0.2, 1.0, 0.25])):
        d = d / np.linalg.norm(d)
        D = int(np.argmax(np.abs(d)))
        got = _fwd(backend, [centre - 300 * d], [centre + 300 * d], img, org, vox)
        np.testing.assert_allclose(got, [shape[D] * vox[D] / abs(d[D])], rtol=1e-6)


def test_uniform_value_scales_linearly(backend):
    """Joseph is linear: an image of 2.5 gives 2.5 times the chord (rel 1e-6).  Guards against
    weights that do not multiply the image values (a sample counted as 1)."""
    img = _box((5, 11, 11), 2.5)
    got = _fwd(backend, [[2.0, 0.0, -50.0]], [[2.0, 0.0, 50.0]], img, (0.0, -5.0, -5.0), (1.0, 1.0, 1.0))
    np.testing.assert_allclose(got, [2.5 * 11], rtol=1e-6)


def test_planes_strictly_between_endpoints_are_stepped(backend):
    """Endpoints inside the image: parallelproj steps planes floor(f1)+1 .. floor(f2) of the
    principal axis (f = plane coordinates of the endpoints), each worth cf.  From x-index 2.3
    to 7.6 that is planes 3..7: 5 voxels, not the 5.3 of the exact segment, either way along the
    ray (rel 1e-6).  Guards the clipping at endpoints inside the image."""
    img = _box((3, 5, 12))
    got = _fwd(backend, [[1.0, 2.0, 2.3]], [[1.0, 2.0, 7.6]], img, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    np.testing.assert_allclose(got, [5.0], rtol=1e-6)
    # reversed direction: same planes
    got = _fwd(backend, [[1.0, 2.0, 7.6]], [[1.0, 2.0, 2.3]], img, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    np.testing.assert_allclose(got, [5.0], rtol=1e-6)


@pytest.mark.parametrize(
    "f1, f2, want",
    [
        (-5.5, 0.7, 1.0),  # enters at the low face (f = -0.5): floor -1 != 0, plane 0 counted
        (-0.3, 0.3, 1.0),  # floor -1 != 0 (truncation: 0 == 0)
        (8.3, 20.0, 1.0),  # the mirror case at the high face: plane 9
        (-0.4, -0.1, 0.0),  # inside the box, between its face and plane 0: no plane
        (0.2, 0.7, 0.0),  # between planes 0 and 1
        (9.6, 9.4, 0.0),  # between plane 9 and the high face, walked backwards
    ],
)
def test_floor_guard_of_parallelproj_2_0_7(backend, f1, f2, want):
    """2.0.7 skips a ray whose clipped plane coordinates f (of its principal axis) have equal
    *floors* and steps planes floor(min f) + 1 .. floor(max f).  2.0.3 compared their truncations
    toward zero, so a ray entering at the low face (f = -0.5) and stopping before f = 1 gave 0
    there, while its mirror at the high face counted its plane; under 2.0.7 both count plane 0
    (resp. 9), worth 1 in a ones-image.  Rays between two planes (or a face and a plane) give 0.
    Exact values: one sample of 1 times a path length of 1.  Guards the floor guard against a
    return to truncation, and the plane range at both faces."""
    img = _box((3, 5, 10))
    got = _fwd(backend, [[1.0, 2.0, f1]], [[1.0, 2.0, f2]], img, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    np.testing.assert_array_equal(got, [want])


def test_lors_missing_the_image_give_zero(backend):
    """Rays that pass beside the box, stop before it, have zero length, lie just outside a face
    while parallel to it, or pass a corner, give exactly 0 (never NaN).  Guards the zero-length
    rule of 2.0.7 (a miss, not a division by zero) and the slab test of parallel rays."""
    img = _box((4, 6, 6))
    org, vox = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)  # box [-0.5, 3.5] x [-0.5, 5.5]^2
    below = -0.5 - 2.0**-20  # just outside the z = lo face
    starts = [
        [1.0, 10.0, -20.0],  # passes beside (y = 10)
        [1.0, 2.0, -20.0],  # stops before the box
        [1.0, 2.0, 2.0],  # zero length inside the box
        [below, 2.0, -20.0],  # just below the z = lo face, parallel to it
        [1.0, -20.0, -20.0],  # diagonal that misses the corner
    ]
    ends = [[1.0, 10.0, 20.0], [1.0, 2.0, -1.0], [1.0, 2.0, 2.0], [below, 2.0, 20.0], [1.0, -10.0, 20.0]]
    got = _fwd(backend, starts, ends, img, org, vox)
    np.testing.assert_array_equal(got, np.zeros(5))


def test_rays_in_a_face_plane_are_kept(backend):
    """A ray parallel to an axis whose coordinate lies exactly on a face of the box is inside the
    slab (2.0.7 includes the faces; 2.0.3's inf/NaN arithmetic made it a miss): along x at
    z = -0.5 (the low z face) its samples sit half way between the outside row z = -1 (which
    contributes 0) and row 0, weight 1/2: 0.5 * 6; likewise on the high face z = 3.5; on the edge
    z = y = -0.5 the weight is 1/4.  Exact values (weights 1/2 and 1/4 of samples of 1).  Guards
    the parallel-ray rule of 2.0.7 at both faces."""
    img = _box((4, 6, 6))
    org, vox = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    starts = [[-0.5, 2.0, -20.0], [3.5, 2.0, -20.0], [-0.5, -0.5, -20.0]]
    ends = [[-0.5, 2.0, 20.0], [3.5, 2.0, 20.0], [-0.5, -0.5, 20.0]]
    got = _fwd(backend, starts, ends, img, org, vox)
    np.testing.assert_array_equal(got, [3.0, 3.0, 1.5])


def test_outside_corners_contribute_zero(backend):
    """A ray along x at y = -0.25 (index coordinate below voxel row 0): the in-range corner row
    0 has weight 0.75, the out-of-range row -1 contributes nothing: integral 0.75 * nx (rel
    1e-6).  Guards the checked loads at the image border (an out-of-range corner read)."""
    img = _box((1, 4, 8))
    got = _fwd(backend, [[0.0, -0.25, -10.0]], [[0.0, -0.25, 10.0]], img, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    np.testing.assert_allclose(got, [0.75 * 8], rtol=1e-6)


@pytest.mark.parametrize("n", [16, 17])
def test_odd_and_even_sizes_centred_ray(backend, n):
    """Through the centre of an n x n x n ones-box (odd and even n), a ray along the diagonal
    of the x-y plane (45 degrees, ties -> y principal) gives n*v/cos(45) (rel 1e-6); a single
    hot voxel at the geometric centre of an odd image is seen with weight cf by the axis ray
    (rel 1e-6).  Guards the tie at exactly 45 degrees (to y) and the centring of odd and even
    images."""
    vox = (1.0, 2.0, 2.0)
    org = (-(n - 1) / 2 * vox[0], -(n - 1) / 2 * vox[1], -(n - 1) / 2 * vox[2])
    img = _box((n, n, n))
    d = np.array([0.0, 1.0, 1.0]) / math.sqrt(2)
    got = _fwd(backend, [-400 * d], [400 * d], img, org, vox)
    np.testing.assert_allclose(got, [n * 2.0 * math.sqrt(2)], rtol=1e-6)
    if n % 2:
        hot = np.zeros((n, n, n), np.float32)
        hot[n // 2, n // 2, n // 2] = 1.0
        got = _fwd(backend, [[0.0, 0.0, -100.0]], [[0.0, 0.0, 100.0]], hot, org, vox)
        np.testing.assert_allclose(got, [2.0], rtol=1e-6)


def test_shifted_image_and_rays_are_translation_invariant(backend):
    """Moving the image origin and the rays by the same vector leaves every integral unchanged
    up to the float32 rounding of the shifted coordinates (endpoints of magnitude ~50: an ulp of
    4e-6 voxels moves the interpolation weights by as much).  Measured 6.3e-7 relative here (3.3e-6
    at most over 200 random sets of these rays), hence rel 4e-6.  Guards against a frame that
    depends on where the image is (an origin dropped or applied twice)."""
    rng = np.random.default_rng(1)
    img = rng.random((7, 13, 11), dtype=np.float32)
    org, vox = np.array([1.0, -3.0, 2.0]), (1.5, 1.25, 1.0)
    centre = org + (np.array(img.shape) - 1) / 2 * vox
    d = rng.normal(size=(50, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    off = rng.normal(scale=2.0, size=(50, 3))
    s, e = centre + off - 40 * d, centre + off + 40 * d
    shift = np.array([7.25, -11.5, 3.125])
    a = _fwd(backend, s, e, img, org, vox)
    b = _fwd(backend, s + shift, e + shift, img, org + shift, vox)
    assert np.count_nonzero(a) > 40
    assert not np.array_equal(a, b)  # the rounding does move (else the test shows nothing)
    np.testing.assert_allclose(b, a, rtol=4e-6, atol=0)


def test_back_projection_of_one_axis_ray_spreads_cf(backend):
    """Back projecting value 3 along an axis ray through voxel centres adds 3*cf = 3*vx to each
    voxel of that row and nothing elsewhere (adjoint of the forward weights; float32 products
    of exact values, rel 1e-6).  Guards the back projection's value times cf and its corner
    weights."""
    xp = _xp(backend)
    shape, vox = (2, 3, 5), (1.0, 1.0, 0.5)
    out = xp.zeros(shape, dtype=xp.float32)
    joseph_back(
        xp.asarray(np.array([[1.0, 1.0, -10.0]])),
        xp.asarray(np.array([[1.0, 1.0, 10.0]])),
        xp.asarray(np.array([3.0], np.float32)),
        out,
        (0.0, 0.0, 0.0),
        vox,
    )
    host = out.get() if backend == "cuda" else out
    expected = np.zeros(shape, np.float32)
    expected[1, 1, :] = 3 * 0.5
    np.testing.assert_allclose(host, expected, rtol=1e-6, atol=1e-7)
