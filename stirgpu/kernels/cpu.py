"""CPU backend of the Joseph projector (numba, parallel over LORs).

This is the reference implementation: ``cuda/*.cu`` mirrors it line for line and
``docs/joseph.md`` states the algorithm in words.  The numerics are those of
libparallelproj 2.0.3's ``joseph3d_fwd`` / ``joseph3d_back`` (what STIR's
Parallelproj projector calls).

Precision (see docs/joseph.md, "Precision"): everything geometric -- endpoints,
clipping, principal axis, plane range, interpolation coordinates and weights --
is float64; image samples are float32 promoted to float64 and a LOR's sum is
accumulated in float64, then stored as float32.  Back projection adds
``float32(value * cf * scale * weight)`` into a float32 image.

Nothing here compiles at import: ``@cached_njit`` without signatures compiles on the
first call (per argument types) and keeps the machine code on disk in stirgpu's user cache
folder (:mod:`stirgpu.kernels.jit`, never in the installed package).  All voxel and LOR indices are int64.

Back projection is race-free by giving each of K workers its own float32 image:
worker 0 adds into the output itself, workers 1..K-1 into zeroed extra images
(LORs are dealt out round-robin, so neighbouring LORs -- similar lengths -- go to
different workers and the load stays balanced); the extra images are then added
to the output in a parallel loop over voxels.  This costs K-1 extra images of
memory (:func:`extra_slabs` caps K by a byte budget) but needs no atomics, which
numba does not have for floats on the CPU.

The parallel kernels release the GIL (``nogil``): the caller's other threads -- a
pipeline's readers and writers, the main thread handling Ctrl-C -- run meanwhile.  The
chunk kernels take a bin range ``[lo, hi)`` of their part, so that a caller can split a
long call into pieces and look at a cancellation flag between them (:func:`lor_ranges`;
a flag read inside a numba loop is hoisted out of it by the compiler, and a running
kernel cannot be stopped from outside).  The pieces of a back projection are multiples
of its worker count, so every worker gets the very LORs, in the very order, of one
call over the whole range: the result does not depend on the split.
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, prange

from ..errors import Cancelled, GeometryError
from .jit import cached_njit

__all__ = [
    "forward_lors",
    "back_lors",
    "forward_tables",
    "back_tables",
    "reduce_slabs",
    "extra_slabs",
    "back_project",
    "WorkerImages",
    "lor_ranges",
    "CANCEL_CHECK_LORS",
]


# --------------------------------------------------------------------------------------
# per-LOR building blocks (docs/joseph.md, steps 1-6)
# --------------------------------------------------------------------------------------
@cached_njit(fastmath=False)
def _lor_setup(p0z, p0y, p0x, p1z, p1y, p1x, oz, oy, ox, vz, vy, vx, nz, ny, nx):
    """Clip a LOR to the image box and derive its Joseph stepping parameters.

    Returns ``(direction, istart, iend, cf, a_u, b_u, a_w, b_w)``; ``istart > iend``
    means "no plane is crossed" (the line integral is 0).  ``direction`` is the
    principal axis (0=z, 1=y, 2=x); ``u`` < ``w`` are the two other axes.  In plane
    ``i`` of the principal axis the ray is at index coordinates
    ``(i*a_u + b_u, i*a_w + b_w)`` along (u, w).  ``cf`` = voxel size along the
    principal axis / |cos(angle to that axis)|.
    """
    p0 = (p0z, p0y, p0x)
    d = (p1z - p0z, p1y - p0y, p1x - p0x)
    o = (oz, oy, ox)
    v = (vz, vy, vx)
    n = (nz, ny, nx)

    # zero-length LOR (e.g. |s| >= FOV radius): no direction, integral 0
    if d[0] == 0.0 and d[1] == 0.0 and d[2] == 0.0:
        return 0, 0, -1, 0.0, 0.0, 0.0, 0.0, 0.0

    # 1. slab clipping of p0 + t d, t in [0, 1], to the box of voxel *edges*
    tmin = 0.0
    tmax = 1.0
    for k in range(3):
        lo = o[k] - 0.5 * v[k]
        hi = lo + n[k] * v[k]
        if d[k] != 0.0:
            t1 = (lo - p0[k]) / d[k]
            t2 = (hi - p0[k]) / d[k]
            tmin = max(tmin, min(t1, t2))
            tmax = min(tmax, max(t1, t2))
        elif not (lo < p0[k] < hi):
            # parallel to axis k and not strictly inside the slab (2.0.3's inf/NaN
            # arithmetic treats a ray lying exactly on a face as a miss too)
            return 0, 0, -1, 0.0, 0.0, 0.0, 0.0, 0.0
    if tmax < tmin:
        return 0, 0, -1, 0.0, 0.0, 0.0, 0.0, 0.0

    # 2. principal axis = largest squared direction cosine; ties prefer y, then x, over z
    ss = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    c0 = d[0] * d[0] / ss
    c1 = d[1] * d[1] / ss
    c2 = d[2] * d[2] / ss
    if c1 >= c0 and c1 >= c2:
        di = 1
    elif c2 >= c0 and c2 >= c1:
        di = 2
    else:
        di = 0
    cosq = c0 if di == 0 else (c1 if di == 1 else c2)
    cf = v[di] / math.sqrt(cosq)

    # 3. planes of the principal axis crossed between the clipped entry and exit
    f1 = (p0[di] + tmin * d[di] - o[di]) / v[di]
    f2 = (p0[di] + tmax * d[di] - o[di]) / v[di]
    # 2.0.3 compares the *truncated* (toward zero) plane coordinates; see docs
    if int(f1) == int(f2):
        return di, 0, -1, cf, 0.0, 0.0, 0.0, 0.0
    if f1 > f2:
        f1, f2 = f2, f1
    istart = int(math.floor(f1)) + 1
    iend = int(math.floor(f2))
    # no-ops for rays that really intersect the box; they guard memory against rounding
    if istart < 0:
        istart = 0
    if iend > n[di] - 1:
        iend = n[di] - 1

    # 4. index coordinates of the ray in plane i along the two other axes
    if di == 0:
        u = 1
        w = 2
    elif di == 1:
        u = 0
        w = 2
    else:
        u = 0
        w = 1
    a_u = (d[u] * v[di]) / (v[u] * d[di])
    b_u = (p0[u] - o[u] + d[u] * (o[di] - p0[di]) / d[di]) / v[u]
    a_w = (d[w] * v[di]) / (v[w] * d[di])
    b_w = (p0[w] - o[w] + d[w] * (o[di] - p0[di]) / d[di]) / v[w]
    return di, istart, iend, cf, a_u, b_u, a_w, b_w


@cached_njit(fastmath=False)
def _strides(di, nz, ny, nx):
    """(stride of the principal axis, stride of u, extent of u, stride of w, extent of w)
    in elements of the C-ordered (z, y, x) image."""
    sz = np.int64(ny) * np.int64(nx)
    sy = np.int64(nx)
    if di == 0:
        return sz, sy, ny, np.int64(1), nx
    elif di == 1:
        return sy, sz, nz, np.int64(1), nx
    return np.int64(1), sz, nz, sy, ny


@cached_njit(inline="always", fastmath=False)
def _floor_split(x):
    """(``np.int64(math.floor(x))``, ``x - math.floor(x)``) wherever the floor is an image
    index (|x| < 2**53): ``x`` minus the floor as a float64 is ``x`` minus that int converted
    back, to the bit.  ``np.floor`` is LLVM's floor (one ``roundsd``), and the weight taken from
    it spares the conversion back."""
    fl = np.floor(x)
    return np.int64(fl), x - fl


@cached_njit(inline="always", fastmath=False)
def _inside(iu, nu, iw, nw):
    """All four corners (iu .. iu + 1, iw .. iw + 1) lie in the plane (unsigned compares)."""
    return np.uint64(iu) < np.uint64(nu - 1) and np.uint64(iw) < np.uint64(nw - 1)


@cached_njit(inline="always", fastmath=False)
def _forward_one(p0z, p0y, p0x, p1z, p1y, p1x, img, oz, oy, ox, vz, vy, vx, nz, ny, nx):
    """Line integral of one LOR through the flat float32 image ``img`` (steps 1-6).  Inlined
    into the parallel loops, which hold the image for all their LORs: a function of its own
    taking the image increfs and decrefs it on every call (two calls and two atomic updates of
    a reference count all threads share, per LOR)."""
    di, istart, iend, cf, a_u, b_u, a_w, b_w = _lor_setup(
        p0z, p0y, p0x, p1z, p1y, p1x, oz, oy, ox, vz, vy, vx, nz, ny, nx
    )
    if istart > iend:
        return 0.0
    sd, su, nu, sw, nw = _strides(di, nz, ny, nx)
    acc = 0.0
    for i in range(istart, iend + 1):
        fu = i * a_u + b_u
        fw = i * a_w + b_w
        iu, wu = _floor_split(fu)
        iw, ww = _floor_split(fw)
        base = np.int64(i) * sd
        if _inside(iu, nu, iw, nw):
            # all four corners inside: unchecked loads with unsigned indices (no wraparound)
            k = np.uint64(base + iu * su + iw * sw)
            ku, kw = np.uint64(su), np.uint64(sw)
            acc += (1.0 - wu) * (1.0 - ww) * img[k]
            acc += (1.0 - wu) * ww * img[k + kw]
            acc += wu * (1.0 - ww) * img[k + ku]
            acc += wu * ww * img[k + ku + kw]
            continue
        # bilinear interpolation; corners outside the image contribute 0
        if 0 <= iu < nu:
            if 0 <= iw < nw:
                acc += (1.0 - wu) * (1.0 - ww) * img[base + iu * su + iw * sw]
            if 0 <= iw + 1 < nw:
                acc += (1.0 - wu) * ww * img[base + iu * su + (iw + 1) * sw]
        if 0 <= iu + 1 < nu:
            if 0 <= iw < nw:
                acc += wu * (1.0 - ww) * img[base + (iu + 1) * su + iw * sw]
            if 0 <= iw + 1 < nw:
                acc += wu * ww * img[base + (iu + 1) * su + (iw + 1) * sw]
    return cf * acc


@cached_njit(inline="always", fastmath=False)
def _back_one(p0z, p0y, p0x, p1z, p1y, p1x, value, img, oz, oy, ox, vz, vy, vx, nz, ny, nx):
    """Add ``value`` times the Joseph weights of one LOR into the flat float32 ``img``
    (the exact adjoint of :func:`_forward_one`; inlined, as that is)."""
    di, istart, iend, cf, a_u, b_u, a_w, b_w = _lor_setup(
        p0z, p0y, p0x, p1z, p1y, p1x, oz, oy, ox, vz, vy, vx, nz, ny, nx
    )
    if istart > iend:
        return
    sd, su, nu, sw, nw = _strides(di, nz, ny, nx)
    val = cf * value
    for i in range(istart, iend + 1):
        fu = i * a_u + b_u
        fw = i * a_w + b_w
        iu, wu = _floor_split(fu)
        iw, ww = _floor_split(fw)
        base = np.int64(i) * sd
        if _inside(iu, nu, iw, nw):
            k = np.uint64(base + iu * su + iw * sw)
            ku, kw = np.uint64(su), np.uint64(sw)
            img[k] += np.float32(val * ((1.0 - wu) * (1.0 - ww)))
            img[k + kw] += np.float32(val * ((1.0 - wu) * ww))
            img[k + ku] += np.float32(val * (wu * (1.0 - ww)))
            img[k + ku + kw] += np.float32(val * (wu * ww))
            continue
        if 0 <= iu < nu:
            if 0 <= iw < nw:
                img[base + iu * su + iw * sw] += np.float32(val * ((1.0 - wu) * (1.0 - ww)))
            if 0 <= iw + 1 < nw:
                img[base + iu * su + (iw + 1) * sw] += np.float32(val * ((1.0 - wu) * ww))
        if 0 <= iu + 1 < nu:
            if 0 <= iw < nw:
                img[base + (iu + 1) * su + iw * sw] += np.float32(val * (wu * (1.0 - ww)))
            if 0 <= iw + 1 < nw:
                img[base + (iu + 1) * su + (iw + 1) * sw] += np.float32(val * (wu * ww))


@cached_njit(fastmath=False)
def _table_endpoints(tables_f64, iv, ia, it):
    """Endpoints of bin (view iv, axial ia, tangential it) of a chunk, from the packed
    ChunkTables (geometry.ChunkTables docstring): start at a = -half_chord, end at +."""
    cos_phi, sin_phi, s, half_chord, tantheta, m = tables_f64
    h = half_chord[it]
    c = cos_phi[iv]
    sn = sin_phi[iv]
    sj = s[it]
    tt = tantheta[it]
    mk = m[ia]
    xc = sj * c
    yc = sj * sn
    # a = -h
    p0x = xc - h * sn
    p0y = yc + h * c
    p0z = mk + h * tt
    # a = +h
    p1x = xc + h * sn
    p1y = yc - h * c
    p1z = mk - h * tt
    return p0z, p0y, p0x, p1z, p1y, p1x


# --------------------------------------------------------------------------------------
# explicit endpoints: parallel over LORs
# --------------------------------------------------------------------------------------
@cached_njit(parallel=True, nogil=True, fastmath=False)
def forward_lors(xstart, xend, img, nz, ny, nx, oz, oy, ox, vz, vy, vx, scale, out):
    """``out[i] = scale * line integral of LOR i``; xstart/xend (N, 3) (z, y, x)."""
    n = xstart.shape[0]
    for i in prange(n):
        r = _forward_one(
            np.float64(xstart[i, 0]),
            np.float64(xstart[i, 1]),
            np.float64(xstart[i, 2]),
            np.float64(xend[i, 0]),
            np.float64(xend[i, 1]),
            np.float64(xend[i, 2]),
            img,
            oz,
            oy,
            ox,
            vz,
            vy,
            vx,
            nz,
            ny,
            nx,
        )
        out[i] = np.float32(scale * r)


@cached_njit(parallel=True, nogil=True, fastmath=False)
def back_lors(xstart, xend, values, out, extra, nz, ny, nx, oz, oy, ox, vz, vy, vx, scale, lo, hi):
    """Back project ``values[lo:hi]`` (of (N,)) with K = 1 + len(extra) workers: worker k takes
    LORs lo+k, lo+k+K, ... and adds into its own image -- worker 0 into ``out`` (flat), worker
    k > 0 into ``extra[k-1]`` -- so no two threads write the same memory."""
    nk = extra.shape[0] + 1
    for k in prange(nk):
        img = out if k == 0 else extra[k - 1]
        for i in range(np.int64(lo) + k, np.int64(hi), np.int64(nk)):
            y = values[i]
            if y == 0.0:
                continue
            _back_one(
                np.float64(xstart[i, 0]),
                np.float64(xstart[i, 1]),
                np.float64(xstart[i, 2]),
                np.float64(xend[i, 0]),
                np.float64(xend[i, 1]),
                np.float64(xend[i, 2]),
                scale * np.float64(y),
                img,
                oz,
                oy,
                ox,
                vz,
                vy,
                vx,
                nz,
                ny,
                nx,
            )


# --------------------------------------------------------------------------------------
# geometry-aware chunks: endpoints computed per LOR from ChunkTables
# --------------------------------------------------------------------------------------
@cached_njit(fastmath=False)
def chunk_bin(idx, na, nt):
    """(view, axial, tangential) index of flat bin ``idx`` of a chunk ([view][axial][tangential])."""
    rest = idx // nt
    return rest // na, rest % na, idx % nt


@cached_njit(parallel=True, nogil=True, fastmath=False)
def forward_tables(tables_f64, img, nz, ny, nx, oz, oy, ox, vz, vy, vx, scale, out, lo, hi):
    """Bins ``[lo, hi)`` of ``out`` (nv*na*nt,), flat in [view][axial][tangential] order."""
    na = tables_f64[5].shape[0]
    nt = tables_f64[2].shape[0]
    for idx in prange(np.int64(lo), np.int64(hi)):
        iv, ia, it = chunk_bin(idx, na, nt)
        if tables_f64[3][it] == 0.0:  # LOR misses the FOV cylinder
            out[idx] = np.float32(0.0)
            continue
        p0z, p0y, p0x, p1z, p1y, p1x = _table_endpoints(tables_f64, iv, ia, it)
        r = _forward_one(p0z, p0y, p0x, p1z, p1y, p1x, img, oz, oy, ox, vz, vy, vx, nz, ny, nx)
        out[idx] = np.float32(scale * r)


@cached_njit(parallel=True, nogil=True, fastmath=False)
def back_tables(tables_f64, values, out, extra, nz, ny, nx, oz, oy, ox, vz, vy, vx, scale, lo, hi):
    """Back project bins ``[lo, hi)`` of flat ``values`` ([view][axial][tangential]); workers
    as in :func:`back_lors`."""
    na = tables_f64[5].shape[0]
    nt = tables_f64[2].shape[0]
    nk = extra.shape[0] + 1
    for k in prange(nk):
        img = out if k == 0 else extra[k - 1]
        for idx in range(np.int64(lo) + k, np.int64(hi), np.int64(nk)):
            y = values[idx]
            if y == 0.0:
                continue
            iv, ia, it = chunk_bin(idx, na, nt)
            if tables_f64[3][it] == 0.0:
                continue
            p0z, p0y, p0x, p1z, p1y, p1x = _table_endpoints(tables_f64, iv, ia, it)
            _back_one(p0z, p0y, p0x, p1z, p1y, p1x, scale * np.float64(y), img, oz, oy, ox, vz, vy, vx, nz, ny, nx)


@cached_njit(parallel=True, nogil=True, fastmath=False)
def reduce_slabs(extra, out):
    """``out += sum_k extra[k]`` (the sum formed in float64, added once per voxel)."""
    nk = extra.shape[0]
    nvox = out.shape[0]
    for j in prange(nvox):
        acc = 0.0
        for k in range(nk):
            acc += extra[k, j]
        out[j] = np.float32(out[j] + acc)


# --------------------------------------------------------------------------------------
# host-side helpers (plain Python)
# --------------------------------------------------------------------------------------
#: default byte budget for the extra per-worker images of a back projection
DEFAULT_SLAB_BYTES = 1 << 30


def extra_slabs(nvox: int, num_lors: int, max_slab_bytes: int = DEFAULT_SLAB_BYTES) -> np.ndarray:
    """Zeroed (K-1, nvox) float32 images for the workers k >= 1 of a back projection
    (worker 0 writes into the output itself).

    K = min(numba threads, LORs, 1 + images that fit in ``max_slab_bytes``), at least 1;
    with K == 1 the result has no rows and nothing needs reducing.
    """
    k = min(get_num_threads(), max(int(num_lors), 1), 1 + int(max_slab_bytes) // max(4 * int(nvox), 1))
    return np.zeros((max(k, 1) - 1, int(nvox)), dtype=np.float32)


class WorkerImages:
    """The extra per-worker images of back projections into one flat ``target``, kept over
    several calls (a pipeline call's chunks and their parts) and added into it once by
    :meth:`reduce`, instead of being made, zeroed and added for every part (each an
    image-sized write and read).  Made with the calling thread's numba thread count."""

    def __init__(self, target: np.ndarray, max_slab_bytes: int = DEFAULT_SLAB_BYTES):
        self.target = target
        self.extra = extra_slabs(target.shape[0], target.shape[0], max_slab_bytes)

    def adds_into(self, flat: np.ndarray) -> bool:
        """``flat`` is (a view of) the very memory of the target."""
        return flat.shape == self.target.shape and flat.ctypes.data == self.target.ctypes.data

    def reduce(self) -> None:
        """Add the extra images into the target and zero them (ready for more calls)."""
        if self.extra.shape[0]:
            reduce_slabs(self.extra, self.target)
            self.extra.fill(0)


def back_project(
    kernel,
    args_before,
    out_flat: np.ndarray,
    num_lors: int,
    args_after,
    max_slab_bytes: int = DEFAULT_SLAB_BYTES,
    cancel=None,
    workers: WorkerImages | None = None,
) -> None:
    """Run a back-projection kernel (:func:`back_lors` or :func:`back_tables`) race-free:
    ``kernel(*args_before, out_flat, extra, *args_after, lo, hi)`` over the LOR ranges of
    :func:`lor_ranges` (one without ``cancel``), then add the extra images -- or, with
    ``workers`` (whose target must be ``out_flat``), into its images, which its owner reduces."""
    if workers is not None and not workers.adds_into(out_flat):
        raise GeometryError("workers: the worker images belong to another target image")
    extra = extra_slabs(out_flat.shape[0], num_lors, max_slab_bytes) if workers is None else workers.extra
    for lo, hi in lor_ranges(num_lors, cancel, multiple=extra.shape[0] + 1):
        kernel(*args_before, out_flat, extra, *args_after, lo, hi)
    if workers is None and extra.shape[0]:
        reduce_slabs(extra, out_flat)


#: LORs a kernel call projects between two looks at its cancellation flag (about 0.1 s of a
#: forward projection on two cores; a launch of the parallel loop costs tens of microseconds)
CANCEL_CHECK_LORS = 1 << 16


def lor_ranges(num_lors: int, cancel=None, multiple: int = 1):
    """``[lo, hi)`` ranges covering ``range(num_lors)``: the whole range without ``cancel``;
    with it (anything with ``is_set()``, e.g. a :class:`threading.Event`), pieces of about
    :data:`CANCEL_CHECK_LORS` LORs (multiples of ``multiple``: a back projection's worker
    count), raising :class:`~stirgpu.errors.Cancelled` before the next piece once it is set."""
    n = int(num_lors)
    if cancel is None:
        if n > 0:
            yield 0, n
        return
    step = max(CANCEL_CHECK_LORS // int(multiple), 1) * int(multiple)
    for lo in range(0, n, step):
        if cancel.is_set():
            raise Cancelled(f"cancelled after {lo} of {n} LORs")
        yield lo, min(lo + step, n)
