"""The Joseph projector on the CPU (numba, no fast-math, no contraction): libparallelproj 2.0.7's
float32 ``joseph3d_fwd`` / ``joseph3d_back``, operation for operation, along LORs whose endpoints
are either STIR's, computed per LOR from a chunk's float32 tables (:func:`forward_tables`,
:func:`back_tables`), or given (:func:`forward_lors`, :func:`back_lors`).

This is what STIR's Parallelproj projector computes (``docs/joseph.md``):

* endpoints from a chunk part's tables (:mod:`.lors`: STIR's float32 chain, rounded as the
  reference STIR build rounds it), multiplied by ``rescale = 1 / vx`` in float32;
* ``ray_cube_intersection_joseph`` (zero-length LORs miss; slab clipping with IEEE
  ``fminf``/``fmaxf``, rays parallel to an axis tested against its slab; principal axis from
  float32 squared direction cosines, ties to y then x; planes from the floors of the float32
  plane coordinates);
* interpolation coordinates ``i * a + b`` recomputed in float32 at every plane and the
  bilinear weights in libparallelproj's order; a forward projection summed in float32, then
  multiplied by the correction factor;
* back projection adding ``float32(val * w)`` per corner, ``val = cf * value``.

Forward projections equal STIR's (and libparallelproj's) bit for bit (``tests/stir_differential``);
back projections up to the order of float32 additions into a voxel (STIR's own depends on its
thread count).  Workers of a back projection write race-free into their own images; the kernels
release the GIL and take a bin range ``[lo, hi)`` (:mod:`.workers`: the workers, cancellation
between pieces).
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ..jit import cached_njit
from .workers import chunk_bin

__all__ = ["forward_tables", "back_tables", "forward_lors", "back_lors", "endpoints_array"]

F32 = np.float32


@cached_njit(inline="always", error_model="numpy")
def _fmin(a, b):
    # C's fminf: a NaN argument loses
    if a != a:
        return b
    if b != b:
        return a
    return a if a < b else b


@cached_njit(inline="always", error_model="numpy")
def _fmax(a, b):
    if a != a:
        return b
    if b != b:
        return a
    return a if a > b else b


@cached_njit(error_model="numpy")
def _endpoints(t, iv, ia, it, rescale):
    """STIR's endpoints of bin (view iv, axial ia, tangential it), times ``rescale``, float32,
    as ((z, y, x) start, (z, y, x) end); all zero where the LOR misses the FOV cylinder."""
    x1, y1, dx, dy, l1, l2, hit, m, mt = t
    if not hit[iv, it]:
        z = F32(0)
        return z, z, z, z, z, z
    z1 = F32(m[ia] - mt[it])
    dz = F32(F32(m[ia] + mt[it]) - z1)
    a, b = l1[iv, it], l2[iv, it]
    sz = F32(F32(F32(dz * a) + z1) * rescale)
    sy = F32(F32(F32(dy[iv, it] * a) + y1[iv, it]) * rescale)
    sx = F32(F32(F32(dx[iv, it] * a) + x1[iv, it]) * rescale)
    ez = F32(F32(F32(dz * b) + z1) * rescale)
    ey = F32(F32(F32(dy[iv, it] * b) + y1[iv, it]) * rescale)
    ex = F32(F32(F32(dx[iv, it] * b) + x1[iv, it]) * rescale)
    return sz, sy, sx, ez, ey, ex


@cached_njit(error_model="numpy")
def _setup(s, e, org, vs, dims):
    """libparallelproj 2.0.7's ray_cube_intersection_joseph and the plane coefficients.

    Returns (direction, istart, iend, cf, a_u, b_u, a_w, b_w) with u < w the other two axes;
    ``istart == -1`` means no contribution.  2.0.7's rules: a zero-length LOR misses; a ray
    parallel to an axis misses where its start lies outside that axis's slab (faces included
    in the slab) and is not constrained by it otherwise; planes are crossed where the floors of
    the entry and exit plane coordinates differ."""
    d = (F32(e[0] - s[0]), F32(e[1] - s[1]), F32(e[2] - s[2]))
    if d[0] == 0 and d[1] == 0 and d[2] == 0:
        return 0, -1, -1, F32(1), F32(0), F32(0), F32(0), F32(0)
    tmin = F32(0)
    tmax = F32(1)
    for k in range(3):
        lo = F32(org[k] - F32(F32(0.5) * vs[k]))
        hi = F32(lo + F32(F32(dims[k]) * vs[k]))
        if d[k] != 0:
            inv = F32(F32(1) / d[k])
            t1 = F32(F32(lo - s[k]) * inv)
            t2 = F32(F32(hi - s[k]) * inv)
            tmin = _fmax(tmin, _fmin(t1, t2))
            tmax = _fmin(tmax, _fmax(t1, t2))
        elif s[k] < lo or s[k] > hi:
            return 0, -1, -1, F32(1), F32(0), F32(0), F32(0), F32(0)
    if tmax < tmin:
        return 0, -1, -1, F32(1), F32(0), F32(0), F32(0), F32(0)
    q0 = F32(d[0] * d[0])
    q1 = F32(d[1] * d[1])
    q2 = F32(d[2] * d[2])
    total = F32(F32(q0 + q1) + q2)
    c0 = F32(q0 / total)
    c1 = F32(q1 / total)
    c2 = F32(q2 / total)
    di = 0
    if c1 >= c0 and c1 >= c2:
        di = 1
    elif c2 >= c0 and c2 >= c1:
        di = 2
    cq = c0 if di == 0 else (c1 if di == 1 else c2)
    cf = F32(vs[di] / F32(math.sqrt(cq)))
    f1 = F32(F32(F32(s[di] + F32(tmin * d[di])) - org[di]) / vs[di])
    f2 = F32(F32(F32(s[di] + F32(tmax * d[di])) - org[di]) / vs[di])
    # np.floor: LLVM's floor, not a call (see _floor_split)
    if int(np.floor(f1)) == int(np.floor(f2)):
        return di, -1, -1, cf, F32(0), F32(0), F32(0), F32(0)
    if f1 > f2:
        f1, f2 = f2, f1
    istart = int(np.floor(f1)) + 1
    iend = int(np.floor(f2))
    # -1 is libparallelproj's "no intersection"; the clamp to the image's planes is never active
    # for a clipped ray (f1 >= -0.5, f2 <= n - 0.5) but where float32 clipping of coordinates
    # millions of voxels away goes astray, where libparallelproj reads outside the image
    if istart == -1:
        return di, -1, -1, cf, F32(0), F32(0), F32(0), F32(0)
    istart = max(istart, 0)
    iend = min(iend, int(dims[di]) - 1)
    if istart > iend:
        return di, -1, -1, cf, F32(0), F32(0), F32(0), F32(0)
    u = 1 if di == 0 else 0
    w = 1 if di == 2 else 2
    dr = d[di]
    a_u = F32(F32(d[u] * vs[di]) / F32(vs[u] * dr))
    b_u = F32(F32(F32(s[u] - org[u]) + F32(F32(d[u] * F32(org[di] - s[di])) / dr)) / vs[u])
    a_w = F32(F32(d[w] * vs[di]) / F32(vs[w] * dr))
    b_w = F32(F32(F32(s[w] - org[w]) + F32(F32(d[w] * F32(org[di] - s[di])) / dr)) / vs[w])
    return di, istart, iend, cf, a_u, b_u, a_w, b_w


@cached_njit(error_model="numpy")
def _strides(di, n0, n1, n2):
    """(stride of the principal axis, stride and extent of u, stride and extent of w)."""
    s0 = np.int64(n1) * np.int64(n2)
    s1 = np.int64(n2)
    if di == 0:
        return s0, s1, n1, np.int64(1), n2
    if di == 1:
        return s1, s0, n0, np.int64(1), n2
    return np.int64(1), s0, n0, s1, n1


@cached_njit(inline="always", error_model="numpy")
def _floor_split(x):
    """(floor of the float32 ``x`` as an int, ``float32(x - floor(x))``): where the floor is an
    image index, ``int(math.floor(x))`` and ``float32(x - float32(that int))`` to the bit
    (the floor of a float32 is a float32 integer, so converting it to an int and back is
    exact).  ``np.floor`` is LLVM's floor, one instruction (``roundss``); numba lowers
    ``math.floor`` to a call of libm's ``floorf``, and a call in the plane loop makes LLVM
    keep every float of the loop in memory around it."""
    fl = F32(np.floor(x))
    return int(fl), F32(x - fl)


@cached_njit(inline="always", error_model="numpy")
def _inside(u0, nu, w0, nw):
    """All four corners (u0 .. u0 + 1, w0 .. w0 + 1) lie in the plane (unsigned compares)."""
    return np.uint64(u0) < np.uint64(nu - 1) and np.uint64(w0) < np.uint64(nw - 1)


@cached_njit(inline="always", error_model="numpy")
def _bilinear(v00, v10, v01, v11, wu, ww):
    """libparallelproj's bilinear weighting of the four corner values, its float32 operations
    in its order."""
    one = F32(1)
    r = F32(
        F32(F32(F32(v00 * F32(one - wu)) * F32(one - ww)) + F32(F32(v10 * wu) * F32(one - ww)))
        + F32(F32(v01 * F32(one - wu)) * ww)
    )
    return F32(r + F32(F32(v11 * wu) * ww))


@cached_njit(inline="always", error_model="numpy")
def _interp(img, base, fu, fw, su, nu, sw, nw):
    """libparallelproj's bilinear interpolation in the plane starting at ``base`` (zero
    outside), its float32 operations in its order.  Samples with all four corners inside take
    unchecked loads with unsigned indices (numba adds a negative-index wraparound to every
    signed one); the others checked loads, with the same floor (equal to libm's wherever a
    sample can be).  The loads are written out here, not in a helper of their own: numba
    inlines ``inline="always"`` helpers at the IR level, and an inlined helper taking the image
    increfs and decrefs it; numba's reference-count pruning removes the pair of this one, but
    not where it inlines a second helper taking the image (with the edge loads in one, every
    plane of a TOF forward projection made two calls and two atomic updates of a reference
    count that every thread shares)."""
    u0, wu = _floor_split(fu)
    w0, ww = _floor_split(fw)
    if _inside(u0, nu, w0, nw):
        k = np.uint64(base + u0 * su + w0 * sw)
        ku, kw = np.uint64(su), np.uint64(sw)
        v00, v10, v01, v11 = img[k], img[k + ku], img[k + kw], img[k + ku + kw]
    else:
        k0 = base + u0 * su + w0 * sw
        u_in, u1_in = 0 <= u0 < nu, 0 <= u0 + 1 < nu
        w_in, w1_in = 0 <= w0 < nw, 0 <= w0 + 1 < nw
        v00 = img[k0] if u_in and w_in else F32(0)
        v10 = img[k0 + su] if u1_in and w_in else F32(0)
        v01 = img[k0 + sw] if u_in and w1_in else F32(0)
        v11 = img[k0 + su + sw] if u1_in and w1_in else F32(0)
    return _bilinear(v00, v10, v01, v11, wu, ww)


@cached_njit(inline="always", error_model="numpy")
def _corner_weights(wu, ww):
    """The four corner weights of the back projection, libparallelproj's operations."""
    one = F32(1)
    return (
        F32(F32(one - wu) * F32(one - ww)),
        F32(wu * F32(one - ww)),
        F32(F32(one - wu) * ww),
        F32(wu * ww),
    )


@cached_njit(inline="always", error_model="numpy")
def _interp_adjoint(img, base, fu, fw, su, nu, sw, nw, val):
    """The adjoint of :func:`_interp`: add ``float32(val * weight)`` to each corner (same two
    paths and floor as there)."""
    u0, wu = _floor_split(fu)
    w0, ww = _floor_split(fw)
    if _inside(u0, nu, w0, nw):
        w00, w10, w01, w11 = _corner_weights(wu, ww)
        k = np.uint64(base + u0 * su + w0 * sw)
        ku, kw = np.uint64(su), np.uint64(sw)
        img[k] = F32(img[k] + F32(val * w00))
        img[k + ku] = F32(img[k + ku] + F32(val * w10))
        img[k + kw] = F32(img[k + kw] + F32(val * w01))
        img[k + ku + kw] = F32(img[k + ku + kw] + F32(val * w11))
        return
    w00, w10, w01, w11 = _corner_weights(wu, ww)
    if 0 <= u0 < nu and 0 <= w0 < nw:
        k = base + u0 * su + w0 * sw
        img[k] = F32(img[k] + F32(val * w00))
    if 0 <= u0 + 1 < nu and 0 <= w0 < nw:
        k = base + (u0 + 1) * su + w0 * sw
        img[k] = F32(img[k] + F32(val * w10))
    if 0 <= u0 < nu and 0 <= w0 + 1 < nw:
        k = base + u0 * su + (w0 + 1) * sw
        img[k] = F32(img[k] + F32(val * w01))
    if 0 <= u0 + 1 < nu and 0 <= w0 + 1 < nw:
        k = base + (u0 + 1) * su + (w0 + 1) * sw
        img[k] = F32(img[k] + F32(val * w11))


@cached_njit(inline="always", error_model="numpy")
def _plane_coords(i, a_u, b_u, a_w, b_w):
    """The interpolation coordinates in plane ``i``: ``i * a + b`` in float32, recomputed per
    plane (libparallelproj 2.0.7; up to 2.0.6 they were stepped by ``+= a``, whose float32
    rounding drifted along the ray)."""
    fi = F32(i)
    return F32(F32(fi * a_u) + b_u), F32(F32(fi * a_w) + b_w)


@cached_njit(error_model="numpy")
def _line_sum(img, istart, iend, sd, su, nu, sw, nw, a_u, b_u, a_w, b_w):
    """The float32 sum of the samples of planes ``istart .. iend`` (no call and no reference
    counting in the loop: see :func:`_interp`)."""
    acc = F32(0)
    for i in range(istart, iend + 1):
        fu, fw = _plane_coords(i, a_u, b_u, a_w, b_w)
        acc = F32(acc + _interp(img, np.int64(i) * sd, fu, fw, su, nu, sw, nw))
    return acc


@cached_njit(inline="always", error_model="numpy")
def _line_add(img, istart, iend, sd, su, nu, sw, nw, a_u, b_u, a_w, b_w, val):
    """Add ``val`` times the weights of planes ``istart .. iend`` into ``img``."""
    for i in range(istart, iend + 1):
        fu, fw = _plane_coords(i, a_u, b_u, a_w, b_w)
        _interp_adjoint(img, np.int64(i) * sd, fu, fw, su, nu, sw, nw, val)


@cached_njit(inline="always", error_model="numpy")
def _forward_one(s, e, img, org, vs, dims):
    # inlined into the parallel loop, which holds its arrays for all its LORs: a function of
    # its own increfs and decrefs the image once per LOR (shared, atomic, as in _line_sum).
    # ``org``, ``vs``, ``dims``: tuples of scalars, for the same reason
    di, istart, iend, cf, a_u, b_u, a_w, b_w = _setup(s, e, org, vs, dims)
    if istart == -1:
        return F32(0)
    sd, su, nu, sw, nw = _strides(di, dims[0], dims[1], dims[2])
    acc = _line_sum(img, istart, iend, sd, su, nu, sw, nw, a_u, b_u, a_w, b_w)
    return F32(acc * cf)


@cached_njit(inline="always", error_model="numpy")
def _back_one(s, e, value, img, org, vs, dims):
    # inlined into the parallel loop, as _forward_one.  One plane loop with the axis' strides
    # as values, as the forward projection's: a loop per principal axis with constant strides
    # ran no faster and took numba twice as long to compile (10 s of a machine's first run)
    di, istart, iend, cf, a_u, b_u, a_w, b_w = _setup(s, e, org, vs, dims)
    if istart == -1:
        return
    val = F32(cf * value)
    sd, su, nu, sw, nw = _strides(di, dims[0], dims[1], dims[2])
    _line_add(img, istart, iend, sd, su, nu, sw, nw, a_u, b_u, a_w, b_w, val)


@cached_njit(error_model="numpy")
def _frame_scalars(org, vs, dims):
    """The image frame's arrays as tuples of scalars: a call taking an array increfs and
    decrefs it (an atomic update of a count all threads share), one taking scalars does not."""
    return (
        (org[0], org[1], org[2]),
        (vs[0], vs[1], vs[2]),
        (np.int64(dims[0]), np.int64(dims[1]), np.int64(dims[2])),
    )


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def forward_tables(tables, img, dims, org, vs, rescale, out, lo, hi):
    """Bins ``[lo, hi)`` of ``out`` (nv*na*nt,) flat [view][axial][tangential]: STIR's forward
    projection of the flat float32 image ``img`` (C order, ``dims`` (n0, n1, n2)) over one
    part's LORs."""
    nt = tables[0].shape[1]
    na = tables[7].shape[0]
    org3, vs3, dims3 = _frame_scalars(org, vs, dims)
    for idx in prange(np.int64(lo), np.int64(hi)):
        iv, ia, it = chunk_bin(idx, na, nt)
        sz, sy, sx, ez, ey, ex = _endpoints(tables, iv, ia, it, rescale)
        out[idx] = _forward_one((sz, sy, sx), (ez, ey, ex), img, org3, vs3, dims3)


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def back_tables(tables, values, out, extra, dims, org, vs, rescale, lo, hi):
    """Add the back projection of bins ``[lo, hi)`` of flat ``values`` into ``out`` (flat
    image) with 1 + len(extra) race-free workers (worker k > 0 adds into ``extra[k - 1]``)."""
    nt = tables[0].shape[1]
    na = tables[7].shape[0]
    nk = extra.shape[0] + 1
    org3, vs3, dims3 = _frame_scalars(org, vs, dims)
    for k in prange(nk):
        img = out if k == 0 else extra[k - 1]
        for idx in range(np.int64(lo) + k, np.int64(hi), np.int64(nk)):
            y = values[idx]
            if y == 0:
                continue
            iv, ia, it = chunk_bin(idx, na, nt)
            sz, sy, sx, ez, ey, ex = _endpoints(tables, iv, ia, it, rescale)
            _back_one((sz, sy, sx), (ez, ey, ex), y, img, org3, vs3, dims3)


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def forward_lors(xs, xe, img, dims, org, vs, out, lo, hi):
    """LORs ``[lo, hi)`` of explicit endpoints ``xs`` -> ``xe`` ((n, 3) float32, (z, y, x)):
    ``out[i]`` = libparallelproj's ``joseph3d_fwd`` of the flat float32 image ``img`` (C order,
    ``dims`` (n0, n1, n2)); 0 for a LOR that misses it."""
    org3, vs3, dims3 = _frame_scalars(org, vs, dims)
    for i in prange(np.int64(lo), np.int64(hi)):
        s = (xs[i, 0], xs[i, 1], xs[i, 2])
        e = (xe[i, 0], xe[i, 1], xe[i, 2])
        out[i] = _forward_one(s, e, img, org3, vs3, dims3)


@cached_njit(parallel=True, nogil=True, error_model="numpy")
def back_lors(xs, xe, values, out, extra, dims, org, vs, lo, hi):
    """Add libparallelproj's ``joseph3d_back`` of LORs ``[lo, hi)`` (``values`` (n,)) into ``out``
    (flat image) with 1 + len(extra) race-free workers (worker k > 0 adds into ``extra[k - 1]``)."""
    nk = extra.shape[0] + 1
    org3, vs3, dims3 = _frame_scalars(org, vs, dims)
    for k in prange(nk):
        img = out if k == 0 else extra[k - 1]
        for i in range(np.int64(lo) + k, np.int64(hi), np.int64(nk)):
            y = values[i]
            if y == 0:
                continue
            s = (xs[i, 0], xs[i, 1], xs[i, 2])
            e = (xe[i, 0], xe[i, 1], xe[i, 2])
            _back_one(s, e, y, img, org3, vs3, dims3)


@cached_njit(error_model="numpy")
def endpoints_array(tables):
    """Every LOR's endpoints of one part's tables (mm, not rescaled): (start, end), each
    (nv, na, nt, 3) float32 in axis order (z, y, x)."""
    nv, nt = tables[0].shape
    na = tables[7].shape[0]
    start = np.empty((nv, na, nt, 3), np.float32)
    end = np.empty((nv, na, nt, 3), np.float32)
    for iv in range(nv):
        for ia in range(na):
            for it in range(nt):
                sz, sy, sx, ez, ey, ex = _endpoints(tables, iv, ia, it, F32(1))
                start[iv, ia, it, 0], start[iv, ia, it, 1], start[iv, ia, it, 2] = sz, sy, sx
                end[iv, ia, it, 0], end[iv, ia, it, 1], end[iv, ia, it, 2] = ez, ey, ex
    return start, end
