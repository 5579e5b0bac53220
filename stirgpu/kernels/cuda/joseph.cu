// The Joseph projector on the GPU: STIR's float32 LOR endpoints and libparallelproj 2.0.7's float32
// Joseph projector, operation for operation as stirgpu/kernels/joseph/cpu.py (the reference);
// chunk kernels (endpoints computed from a chunk's tables) and explicit-endpoint kernels (*_lors).
// Every float operation is an explicit round-to-nearest intrinsic, so NVRTC cannot contract
// or reorder them: forward projections equal the CPU's (and STIR's) bit for bit.  One thread
// per LOR, all parts of a chunk in one launch (stir_part_of_thread), each part's bins in
// [view][axial][tangential] order, the parts one after the other.  The forward projection reads
// the image's zero-framed copies where the engine has made them (stir_framed: unchecked loads,
// the lanes of a warp on one plane at a time; the same sums).  The back projection adds with
// atomics, the lanes of a warp summing what they add into one voxel first (warp_segsum.cuh):
// the order of additions differs from the CPU's (float32 rounding).
//
// Tables (float32, see stirgpu/kernels/joseph/lors.py): the transaxial tables of a geometry's
// views, which every segment shares (TransaxialTables), packed once per device as
//   X[0 .. 6*NV*nt)   x1, y1, dx, dy, l1, l2   (each [view][tangential], all NV views)
//   H[0 .. NV*nt)     unsigned char: 1 where the LOR meets the FOV cylinder
// (several such sets one after the other where parts differ in tangential positions or radii),
// and per part of a chunk, in A, its na values m then its nt values mt = max_a * tan(theta).
// The parts' directory (STIR_PART_FIELDS int64 per part, then each part's views as indices into
// its set's rows) gives each part's offsets into X, H, A and the directory, its sizes, its first
// block and its first LOR.  So a chunk's own tables are a few floats per axial and tangential
// position, not six per view and tangential position of every segment.

#define F_ADD(a, b) __fadd_rn((a), (b))
#define F_SUB(a, b) __fsub_rn((a), (b))
#define F_MUL(a, b) __fmul_rn((a), (b))
#define F_DIV(a, b) __fdiv_rn((a), (b))

#include "warp_segsum.cuh"

struct StirLine
{
    int dir, istart, iend;
    float cf, au, bu, aw, bw;
};

// A thread's part and LOR: where the LOR's transaxial values lie in its part's set (T, H: the
// element vt of each [view][tangential] table, `plane` elements apart), its axial values m and
// mt, the part's size and first LOR in the chunk's bins, and the LOR's index in the part's bins
struct StirPart
{
    const float *T;
    const unsigned char *H;
    long long vt, plane;
    float m, mt;
    long long n_lors, lor0, idx;
};

// STIR's endpoints of the LOR of part P (stir_part_of_thread)
__device__ __forceinline__ void stir_endpoints(const StirPart &P, float rescale, float s[3], float e[3], bool &hit)
{
    const float *__restrict__ T = P.T;
    const long long vt = P.vt, plane = P.plane;
    hit = P.H[vt] != 0;
    if (!hit)
    {
        s[0] = s[1] = s[2] = e[0] = e[1] = e[2] = 0.0f;
        return;
    }
    const float x1 = T[vt], y1 = T[plane + vt], dx = T[2 * plane + vt], dy = T[3 * plane + vt];
    const float l1 = T[4 * plane + vt], l2 = T[5 * plane + vt];
    const float z1 = F_SUB(P.m, P.mt);
    const float dz = F_SUB(F_ADD(P.m, P.mt), z1);
    s[0] = F_MUL(F_ADD(F_MUL(dz, l1), z1), rescale);
    s[1] = F_MUL(F_ADD(F_MUL(dy, l1), y1), rescale);
    s[2] = F_MUL(F_ADD(F_MUL(dx, l1), x1), rescale);
    e[0] = F_MUL(F_ADD(F_MUL(dz, l2), z1), rescale);
    e[1] = F_MUL(F_ADD(F_MUL(dy, l2), y1), rescale);
    e[2] = F_MUL(F_ADD(F_MUL(dx, l2), x1), rescale);
}

// The order in which threads take a part's LORs (each module is compiled with one; see
// joseph/cuda.py's axial_major for which): 0 in the bins' own [view][axial][tangential] order, 1 axial
// position outermost, then view, then tangential position.  With 1 the blocks in flight cover a
// thin slab of axial positions of every view of the part instead of every axial position of a
// few views, so the image planes they touch are few enough to stay in the L2 cache of an image
// much larger than it (long axial FOV).  Neighbouring threads keep neighbouring tangential positions.
#ifndef STIR_AXIAL_MAJOR
#define STIR_AXIAL_MAJOR 0
#endif
// threads per block of every launch (joseph/cuda.py's THREADS, passed by its compile_options)
#ifndef STIR_THREADS
#define STIR_THREADS 256
#endif
// blocks of STIR_THREADS each SM should hold at once (launch bounds: the register budget is what
// 65536 registers leave to that many blocks; 6 blocks: at most 40 registers, docs/kernel-tuning.md)
#ifndef STIR_FWD_MIN_BLOCKS
#define STIR_FWD_MIN_BLOCKS 4
#endif
#ifndef STIR_BACK_MIN_BLOCKS
#define STIR_BACK_MIN_BLOCKS 6
#endif

// The LOR of a part's thread tid: its index in the part's [view][axial][tangential] bins (past
// the part's end for the threads past it)
__device__ __forceinline__ long long stir_lor_of_thread(long long tid, int nv, int na, int nt)
{
#if STIR_AXIAL_MAJOR
    const long long row = tid / nt; // axial * nv + view
    const long long ia = row / nv;
    if (ia >= na)
        return tid;
    const long long iv = row - ia * nv;
    return (iv * na + ia) * nt + (tid - row * nt);
#else
    return tid;
#endif
}

// One launch covers all parts of a chunk, each part whole blocks of it, so that a chunk pays one
// launch's tail (its last blocks running on a part of the GPU) instead of one per part: a
// subset's parts (one per segment, a few views each) are often less than a wave of the GPU
// each (docs/kernel-tuning.md, "One launch per chunk").  Directory row of a part:
// X offset (floats), H offset, nv, na, nt, first block, first LOR, A offset (floats), offset of its
// views in the directory, NV (the views of its transaxial set), and the range [first, end) of the
// part's threads (in stir_lor_of_thread's order) that the launch runs: all of them, or, in the
// axial-major order, the LORs of a range of axial positions (a slab launch of the back projection)
#define STIR_PART_FIELDS 12
#define STIR_PARTS_ARGS                                                                                              \
    const float *__restrict__ X, const unsigned char *__restrict__ H, const float *__restrict__ A,                  \
        const long long *__restrict__ parts, int n_parts
#define STIR_PARTS_PASS X, H, A, parts, n_parts

// The part of this thread's block (the last part starting at or before it: parts without LORs
// take no blocks), the thread's LOR in it and that LOR's places in the tables; false for the
// threads past the part's LORs
__device__ __forceinline__ bool stir_part_of_thread(STIR_PARTS_ARGS, StirPart &P)
{
    const long long block = blockIdx.x;
    int lo = 0, hi = n_parts - 1;
    while (lo < hi)
    {
        const int mid = (lo + hi + 1) / 2;
        if (parts[(long long)mid * STIR_PART_FIELDS + 5] <= block)
            lo = mid;
        else
            hi = mid - 1;
    }
    const long long *row = parts + (long long)lo * STIR_PART_FIELDS;
    const int nv = (int)row[2], na = (int)row[3], nt = (int)row[4];
    P.n_lors = (long long)nv * na * nt;
    const long long tid = row[10] + (block - row[5]) * blockDim.x + threadIdx.x;
    if (tid >= row[11])
        return false;
    P.lor0 = row[6];
    P.idx = stir_lor_of_thread(tid, nv, na, nt);
    const int it = (int)(P.idx % nt);
    const long long rest = P.idx / nt;
    const int ia = (int)(rest % na);
    const long long iv = rest / na;
    P.T = X + row[0];
    P.H = H + row[1];
    P.vt = parts[row[8] + iv] * nt + it;
    P.plane = row[9] * nt;
    P.m = A[row[7] + ia];
    P.mt = A[row[7] + na + it];
    return true;
}

// libparallelproj 2.0.7's ray_cube_intersection_joseph and the plane coefficients: a zero-length LOR
// misses; a ray parallel to an axis misses where its start lies outside that axis's slab (faces
// included) and is not constrained by it otherwise; planes are crossed where the floors of the
// entry and exit plane coordinates differ
__device__ __forceinline__ StirLine stir_setup(const float s[3], const float e[3], const float org[3],
                                               const float vs[3], const int n[3])
{
    StirLine L;
    L.dir = 0;
    L.istart = -1;
    L.iend = -1;
    L.cf = 1.0f;
    L.au = L.bu = L.aw = L.bw = 0.0f;
    float d[3];
    for (int k = 0; k < 3; ++k)
        d[k] = F_SUB(e[k], s[k]);
    if (d[0] == 0.0f && d[1] == 0.0f && d[2] == 0.0f)
        return L;
    float tmin = 0.0f, tmax = 1.0f;
    for (int k = 0; k < 3; ++k)
    {
        const float lo = F_SUB(org[k], F_MUL(0.5f, vs[k]));
        const float hi = F_ADD(lo, F_MUL((float)n[k], vs[k]));
        if (d[k] != 0.0f)
        {
            const float inv = F_DIV(1.0f, d[k]);
            const float t1 = F_MUL(F_SUB(lo, s[k]), inv);
            const float t2 = F_MUL(F_SUB(hi, s[k]), inv);
            tmin = fmaxf(tmin, fminf(t1, t2));
            tmax = fminf(tmax, fmaxf(t1, t2));
        }
        else if (s[k] < lo || s[k] > hi)
            return L;
    }
    if (tmax < tmin)
        return L;
    const float q0 = F_MUL(d[0], d[0]), q1 = F_MUL(d[1], d[1]), q2 = F_MUL(d[2], d[2]);
    const float total = F_ADD(F_ADD(q0, q1), q2);
    const float c0 = F_DIV(q0, total), c1 = F_DIV(q1, total), c2 = F_DIV(q2, total);
    int di = 0;
    if (c1 >= c0 && c1 >= c2)
        di = 1;
    else if (c2 >= c0 && c2 >= c1)
        di = 2;
    const float cq = di == 0 ? c0 : (di == 1 ? c1 : c2);
    L.dir = di;
    L.cf = F_DIV(vs[di], __fsqrt_rn(cq));
    float f1 = F_DIV(F_SUB(F_ADD(s[di], F_MUL(tmin, d[di])), org[di]), vs[di]);
    float f2 = F_DIV(F_SUB(F_ADD(s[di], F_MUL(tmax, d[di])), org[di]), vs[di]);
    if ((int)floorf(f1) == (int)floorf(f2))
        return L;
    if (f1 > f2)
    {
        const float t = f1;
        f1 = f2;
        f2 = t;
    }
    // -1 is libparallelproj's "no intersection"; the clamp to the image's planes is never active for
    // a clipped ray (f1 >= -0.5, f2 <= n - 0.5) but where float32 clipping of coordinates millions
    // of voxels away goes astray, where libparallelproj reads outside the image (joseph/cpu.py)
    const int first = (int)floorf(f1) + 1, last = min((int)floorf(f2), n[di] - 1);
    if (first == -1 || max(first, 0) > last)
        return L;
    L.istart = max(first, 0);
    L.iend = last;
    const int u = di == 0 ? 1 : 0;
    const int w = di == 2 ? 1 : 2;
    const float dr = d[di];
    const float od = F_SUB(org[di], s[di]);
    L.au = F_DIV(F_MUL(d[u], vs[di]), F_MUL(vs[u], dr));
    L.bu = F_DIV(F_ADD(F_SUB(s[u], org[u]), F_DIV(F_MUL(d[u], od), dr)), vs[u]);
    L.aw = F_DIV(F_MUL(d[w], vs[di]), F_MUL(vs[w], dr));
    L.bw = F_DIV(F_ADD(F_SUB(s[w], org[w]), F_DIV(F_MUL(d[w], od), dr)), vs[w]);
    return L;
}

__device__ __forceinline__ void stir_strides(int di, const int n[3], long long &sd, long long &su, int &nu,
                                             long long &sw, int &nw)
{
    const long long s0 = (long long)n[1] * n[2], s1 = n[2];
    if (di == 0)
    {
        sd = s0; su = s1; nu = n[1]; sw = 1; nw = n[2];
    }
    else if (di == 1)
    {
        sd = s1; su = s0; nu = n[0]; sw = 1; nw = n[2];
    }
    else
    {
        sd = 1; su = s0; nu = n[0]; sw = s1; nw = n[1];
    }
}

// One LOR's walk through the image: its setup and the strides of its principal and other axes.
// ulo: the first plane along u that the back projection adds into, nu the number of them (the
// image's 0 and n, or a slab's: stir_clip_to_slab)
struct StirWalk
{
    StirLine L;
    long long sd, su, sw;
    int nu, nw, ulo;
};

// The interpolation coordinates in plane pf (a plane index, as a float: exact below 2^24) of a
// walk: i * a + b, recomputed at every plane in float32 as libparallelproj 2.0.7 does (2.0.6 and
// older stepped them by += a, whose rounding drifted along the ray)
__device__ __forceinline__ float stir_coord(float a, float b, float pf)
{
    return F_ADD(F_MUL(pf, a), b);
}

// The walk from s to e; false where it adds nothing (misses the image)
__device__ __forceinline__ bool stir_walk_between(const float s[3], const float e[3], int n0, int n1, int n2,
                                                  float o0, float o1, float o2, float v0, float v1, float v2,
                                                  StirWalk &W)
{
    const float org[3] = {o0, o1, o2}, vs[3] = {v0, v1, v2};
    const int n[3] = {n0, n1, n2};
    W.L = stir_setup(s, e, org, vs, n);
    if (W.L.istart == -1)
        return false;
    stir_strides(W.L.dir, n, W.sd, W.su, W.nu, W.sw, W.nw);
    W.ulo = 0;
    return true;
}

// false where the LOR adds nothing (misses the FOV cylinder or the image)
__device__ __forceinline__ bool stir_walk(const StirPart &P, int n0, int n1, int n2, float o0, float o1, float o2,
                                          float v0, float v1, float v2, float rescale, StirWalk &W)
{
    float s[3], e[3];
    bool hit;
    stir_endpoints(P, rescale, s, e, hit);
    return stir_walk_between(s, e, n0, n1, n2, o0, o1, o2, v0, v1, v2, W);
}

// The bilinear sample at plane i of the walk, libparallelproj's float32 operations in its order
// (zero outside the image)
__device__ __forceinline__ float stir_sample(const float *__restrict__ img, const StirWalk &W, int i)
{
    const float fu = stir_coord(W.L.au, W.L.bu, (float)i), fw = stir_coord(W.L.aw, W.L.bw, (float)i);
    const int u0 = (int)floorf(fu), w0 = (int)floorf(fw);
    const float wu = F_SUB(fu, (float)u0), ww = F_SUB(fw, (float)w0);
    const long long base = (long long)i * W.sd;
    const bool u0in = u0 >= 0 && u0 < W.nu, u1in = u0 + 1 >= 0 && u0 + 1 < W.nu;
    const bool w0in = w0 >= 0 && w0 < W.nw, w1in = w0 + 1 >= 0 && w0 + 1 < W.nw;
    const float v00 = (u0in && w0in) ? img[base + u0 * W.su + w0 * W.sw] : 0.0f;
    const float v10 = (u1in && w0in) ? img[base + (u0 + 1) * W.su + w0 * W.sw] : 0.0f;
    const float v01 = (u0in && w1in) ? img[base + u0 * W.su + (w0 + 1) * W.sw] : 0.0f;
    const float v11 = (u1in && w1in) ? img[base + (u0 + 1) * W.su + (w0 + 1) * W.sw] : 0.0f;
    const float mu = F_SUB(1.0f, wu), mw = F_SUB(1.0f, ww);
    const float r = F_ADD(F_ADD(F_MUL(F_MUL(v00, mu), mw), F_MUL(F_MUL(v10, wu), mw)), F_MUL(F_MUL(v01, mu), ww));
    return F_ADD(r, F_MUL(F_MUL(v11, wu), ww));
}

// The adjoint of stir_sample: add float32(val * weight) to each corner (atomically)
__device__ __forceinline__ void stir_scatter(float *__restrict__ img, const StirWalk &W, int i, float val)
{
    const float fu = stir_coord(W.L.au, W.L.bu, (float)i), fw = stir_coord(W.L.aw, W.L.bw, (float)i);
    const int u0 = (int)floorf(fu), w0 = (int)floorf(fw);
    const float wu = F_SUB(fu, (float)u0), ww = F_SUB(fw, (float)w0);
    const float mu = F_SUB(1.0f, wu), mw = F_SUB(1.0f, ww);
    const long long base = (long long)i * W.sd;
    const bool u0in = u0 >= 0 && u0 < W.nu, u1in = u0 + 1 >= 0 && u0 + 1 < W.nu;
    const bool w0in = w0 >= 0 && w0 < W.nw, w1in = w0 + 1 >= 0 && w0 + 1 < W.nw;
    if (u0in && w0in)
        atomicAdd(img + base + u0 * W.su + w0 * W.sw, F_MUL(val, F_MUL(mu, mw)));
    if (u1in && w0in)
        atomicAdd(img + base + (u0 + 1) * W.su + w0 * W.sw, F_MUL(val, F_MUL(wu, mw)));
    if (u0in && w1in)
        atomicAdd(img + base + u0 * W.su + (w0 + 1) * W.sw, F_MUL(val, F_MUL(mu, ww)));
    if (u1in && w1in)
        atomicAdd(img + base + (u0 + 1) * W.su + (w0 + 1) * W.sw, F_MUL(val, F_MUL(wu, ww)));
}

// floor(x) as a float and as an int, exact for |x| < 2^22, without the conversion pipe's
// instructions (floorf and the float-int conversions issue at 1/8 of the float rate on sm_90): in
// round-down mode x + 1.5 * 2^23 lands on the float M + floor(x), whose bits are M's plus floor(x)
__device__ __forceinline__ void stir_floor(float x, float &f, int &i)
{
    const float M = 12582912.0f;
    const float y = __fadd_rd(x, M);
    f = F_SUB(y, M);
    i = __float_as_int(y) - 0x4B400000;
}

// A walk's samples in the image's zero-framed copies (cuda_workspaces.padded_copies: A (z, y, x)
// and B (z, x, y), a voxel of zeros around): walks along x read B, where the neighbouring LORs of a
// warp, spread along y, read contiguous voxels, as walks along z and y do in A.  A sample whose
// corners all lie in the copy needs no bounds check and reads zero where the image has none, so
// the sums are those of stir_sample.  `row` points at plane `plane`'s voxel (u, w) = (0, 0).
struct StirFramed
{
    const float *row;
    long long sd;
    int su;
};

// The framed walk of W, or false where a sample's corners might leave the frame: floor(fu) and
// floor(fw) must stay in [-1, n - 1] at every plane.  The coordinates i * a + b, each operation
// rounded, are monotone in i, so their ends, at the walk's first and last planes, bound them all.
// (the coordinates' bound; the host build of the tests lowers it, so that one launch takes both paths)
#ifndef STIR_FRAMED_LIMIT
#define STIR_FRAMED_LIMIT 1024.0f
#endif
__device__ __forceinline__ bool stir_framed_ends_inside(float a, float b, int istart, int iend, int n)
{
    const float first = stir_coord(a, b, (float)istart), last = stir_coord(a, b, (float)iend);
    const float lo = fminf(first, last), hi = fmaxf(first, last);
    return lo >= -1.0f && hi < (float)n && hi < STIR_FRAMED_LIMIT;
}

// Whether a walk's coordinate stays within (-limit, limit) at every plane (monotone, as above)
#define STIR_SMALL 1048576.0f
__device__ __forceinline__ bool stir_ends_within(float a, float b, int istart, int iend, float limit)
{
    return fabsf(stir_coord(a, b, (float)istart)) < limit && fabsf(stir_coord(a, b, (float)iend)) < limit;
}

// floor(x) as a float and an int: by stir_floor where |x| < 2^22 (`small`), else floorf's
__device__ __forceinline__ void stir_floor_any(float x, bool small, float &f, int &i)
{
    if (small)
        stir_floor(x, f, i);
    else
    {
        f = floorf(x);
        i = (int)f;
    }
}

__device__ __forceinline__ bool stir_framed(const StirWalk &W, const float *__restrict__ framed_a,
                                            const float *__restrict__ framed_b, int n0, int n1, int n2, int plane,
                                            StirFramed &F)
{
    if (framed_a == nullptr || !stir_framed_ends_inside(W.L.au, W.L.bu, W.L.istart, W.L.iend, W.nu) ||
        !stir_framed_ends_inside(W.L.aw, W.L.bw, W.L.istart, W.L.iend, W.nw))
        return false;
    const int p1 = n1 + 2, p2 = n2 + 2;
    const float *base;
    if (W.L.dir == 0)
    {
        base = framed_a;
        F.sd = (long long)p1 * p2;
        F.su = p2;
    }
    else if (W.L.dir == 1)
    {
        base = framed_a;
        F.sd = p2;
        F.su = p1 * p2;
    }
    else
    {
        base = framed_b;
        F.sd = p1;
        F.su = p2 * p1;
    }
    F.row = base + (long long)(plane + 1) * F.sd + F.su + 1;
    return true;
}

// stir_sample at plane coordinate pf of a framed walk whose plane starts at `row`: the same float32
// operations on the same values
__device__ __forceinline__ float stir_framed_sample(const float *__restrict__ row, int su, const StirLine &L, float pf)
{
    float flu, flw;
    int u0, w0;
    const float fu = stir_coord(L.au, L.bu, pf), fw = stir_coord(L.aw, L.bw, pf);
    stir_floor(fu, flu, u0);
    stir_floor(fw, flw, w0);
    const float wu = F_SUB(fu, flu), ww = F_SUB(fw, flw);
    const float *__restrict__ p = row + (u0 * su + w0);
    const float v00 = p[0], v01 = p[1];
    const float v10 = p[su], v11 = p[su + 1];
    const float mu = F_SUB(1.0f, wu), mw = F_SUB(1.0f, ww);
    const float r = F_ADD(F_ADD(F_MUL(F_MUL(v00, mu), mw), F_MUL(F_MUL(v10, wu), mw)), F_MUL(F_MUL(v01, mu), ww));
    return F_ADD(r, F_MUL(F_MUL(v11, wu), ww));
}

// The sum along a walk in the image itself (bounds checked at every sample)
__device__ __forceinline__ float stir_line_sum(const float *__restrict__ img, const StirWalk &W)
{
    float acc = 0.0f;
    for (int i = W.L.istart; i <= W.L.iend; ++i)
        acc = F_ADD(acc, stir_sample(img, W, i));
    return acc;
}

// Planes a framed walk samples per trip of its loop, their loads issued before the first of
// their sums (the coordinates of a plane no longer depend on the last plane's: 2.0.7)
#ifndef STIR_FWD_ILP
#define STIR_FWD_ILP 4
#endif

// The sum along a framed walk, the planes from lo to hi in step with the warp's other lanes of
// the same group (each adding only on its own planes): the lanes of a warp, neighbouring LORs,
// then read one plane together, a few contiguous runs of voxels, instead of each its own plane.
// On a plane outside its walk a lane samples at its nearest end plane's coordinates (inside the
// frame) and adds 0, which leaves a float32 sum unchanged (it is never -0: it starts at +0).  So
// the sum's order and value are the walk's own: it equals stir_line_sum's.
__device__ __forceinline__ float stir_framed_line_sum(const StirFramed &F, const StirLine &L, int lo, int hi)
{
    const float first = (float)L.istart, last = (float)L.iend;
    const float *__restrict__ row = F.row;
    float pf = (float)lo;
    float acc = 0.0f;
    int i = lo;
    for (; i + STIR_FWD_ILP - 1 <= hi; i += STIR_FWD_ILP)
    {
        float v[STIR_FWD_ILP];
#pragma unroll
        for (int k = 0; k < STIR_FWD_ILP; ++k)
        {
            const float pk = F_ADD(pf, (float)k);
            v[k] = stir_framed_sample(row + k * F.sd, F.su, L, fminf(fmaxf(pk, first), last));
        }
#pragma unroll
        for (int k = 0; k < STIR_FWD_ILP; ++k)
            acc = F_ADD(acc, (i + k >= L.istart && i + k <= L.iend) ? v[k] : 0.0f);
        row += STIR_FWD_ILP * F.sd;
        pf = F_ADD(pf, (float)STIR_FWD_ILP);
    }
    for (; i <= hi; ++i)
    {
        const float v = stir_framed_sample(row, F.su, L, fminf(fmaxf(pf, first), last));
        acc = F_ADD(acc, (i >= L.istart && i <= L.iend) ? v : 0.0f);
        row += F.sd;
        pf = F_ADD(pf, 1.0f);
    }
    return acc;
}

// A forward walk's sum (before the correction factor cf): the framed walks of the lanes of a warp
// that share a principal axis take one range of planes together; other walks read the image
// with bounds checks.  framed_a / framed_b: the image's zero-framed copies (null: every walk reads
// the image itself).  All 32 lanes of the warp must call it (the launch's blocks are whole warps).
__device__ __forceinline__ float stir_forward_sum(bool walks, const StirWalk &W, const float *__restrict__ img,
                                                  const float *__restrict__ framed_a,
                                                  const float *__restrict__ framed_b, int n0, int n1, int n2)
{
    StirFramed F;
    // 0-2: a framed walk along that axis; 3: a checked walk; 4: nothing to add
    int group_key = 4;
    if (walks)
        group_key = stir_framed(W, framed_a, framed_b, n0, n1, n2, W.L.istart, F) ? W.L.dir : 3;
    const unsigned group = __match_any_sync(0xffffffffu, group_key);
    float acc = 0.0f;
    if (group_key < 3)
    {
        const int lo = __reduce_min_sync(group, W.L.istart), hi = __reduce_max_sync(group, W.L.iend);
        F.row -= (long long)(W.L.istart - lo) * F.sd;
        acc = stir_framed_line_sum(F, W.L, lo, hi);
    }
    else if (group_key == 3)
        acc = stir_line_sum(img, W);
    return acc;
}

#define STIR_FRAME_ARGS                                                                                              \
    int n0, int n1, int n2, float o0, float o1, float o2, float v0, float v1, float v2

// Forward projection of a chunk's parts, STIR's endpoints computed from its tables
extern "C" __global__ void __launch_bounds__(STIR_THREADS, STIR_FWD_MIN_BLOCKS)
    fwd_stir(STIR_PARTS_ARGS, const float *__restrict__ img, const float *__restrict__ framed_a,
             const float *__restrict__ framed_b, STIR_FRAME_ARGS, float rescale, float *__restrict__ out)
{
    StirPart P;
    const bool mine = stir_part_of_thread(STIR_PARTS_PASS, P);
    StirWalk W;
    const bool walks = mine && stir_walk(P, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, W);
    const float acc = stir_forward_sum(walks, W, img, framed_a, framed_b, n0, n1, n2);
    if (mine)
        out[P.lor0 + P.idx] = walks ? F_MUL(acc, W.L.cf) : 0.0f;
}

// LOR i's explicit endpoints ((n, 3) float32 arrays, (z, y, x)) and its walk; false past the
// LORs or where it adds nothing
__device__ __forceinline__ bool lor_walk(const float *__restrict__ xstart, const float *__restrict__ xend,
                                         long long i, long long n, STIR_FRAME_ARGS, StirWalk &W)
{
    if (i >= n)
        return false;
    const float s[3] = {xstart[3 * i], xstart[3 * i + 1], xstart[3 * i + 2]};
    const float e[3] = {xend[3 * i], xend[3 * i + 1], xend[3 * i + 2]};
    return stir_walk_between(s, e, n0, n1, n2, o0, o1, o2, v0, v1, v2, W);
}

// Forward projection of explicit LORs (libparallelproj's joseph3d_fwd), one thread per LOR
extern "C" __global__ void __launch_bounds__(STIR_THREADS, STIR_FWD_MIN_BLOCKS)
    fwd_lors(const float *__restrict__ xstart, const float *__restrict__ xend, long long n,
             const float *__restrict__ img, const float *__restrict__ framed_a, const float *__restrict__ framed_b,
             STIR_FRAME_ARGS, float *__restrict__ out)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    StirWalk W;
    const bool walks = lor_walk(xstart, xend, i, n, n0, n1, n2, o0, o1, o2, v0, v1, v2, W);
    const float acc = stir_forward_sum(walks, W, img, framed_a, framed_b, n0, n1, n2);
    if (i < n)
        out[i] = walks ? F_MUL(acc, W.L.cf) : 0.0f;
}

// The back projection's target for a walk: the image, or for walks along x (axis 2, whose
// neighbouring LORs spread along y, strided in the image) the transposed (z, x, y) accumulator,
// where they spread along its contiguous axis; the caller adds it into the image at the end.
// Returns the number of planes along the walk's principal axis.
__device__ __forceinline__ int stir_back_target(StirWalk &W, int n0, int n1, int n2, float *__restrict__ img,
                                                float *__restrict__ img_xy, float *&target)
{
    target = img;
    if (W.L.dir != 2)
        return W.L.dir == 0 ? n0 : n1;
    target = img_xy;
    W.sd = n1;                 // x
    W.su = (long long)n1 * n2; // z
    W.sw = 1;                  // y
    return n2;
}

// One plane's adds of a back-projection walk: the four corners' float32(val * weight), zero for a
// corner outside the target, and their in-plane offset o = u0 * su + w0 (w is the target's
// contiguous axis, stir_back_target)
template <typename Idx>
struct StirCorners
{
    Idx o;
    float c00, c01, c10, c11;
};

template <typename Idx>
__device__ __forceinline__ StirCorners<Idx> stir_corners(const StirWalk &W, float pf, float val, bool small)
{
    float flu, flw;
    int u0, w0;
    const float fu = stir_coord(W.L.au, W.L.bu, pf), fw = stir_coord(W.L.aw, W.L.bw, pf);
    stir_floor_any(fu, small, flu, u0);
    stir_floor_any(fw, small, flw, w0);
    const float wu = F_SUB(fu, flu), ww = F_SUB(fw, flw);
    const float mu = F_SUB(1.0f, wu), mw = F_SUB(1.0f, ww);
    const bool u0in = (unsigned)(u0 - W.ulo) < (unsigned)W.nu, u1in = (unsigned)(u0 + 1 - W.ulo) < (unsigned)W.nu;
    const bool w0in = (unsigned)w0 < (unsigned)W.nw, w1in = (unsigned)(w0 + 1) < (unsigned)W.nw;
    StirCorners<Idx> C;
    C.o = u0 * (Idx)W.su + w0;
    C.c00 = (u0in && w0in) ? F_MUL(val, F_MUL(mu, mw)) : 0.0f;
    C.c10 = (u1in && w0in) ? F_MUL(val, F_MUL(wu, mw)) : 0.0f;
    C.c01 = (u0in && w1in) ? F_MUL(val, F_MUL(mu, ww)) : 0.0f;
    C.c11 = (u1in && w1in) ? F_MUL(val, F_MUL(wu, ww)) : 0.0f;
    return C;
}

// How far (in voxels) float32's rounding of a walk's coordinate i * a + b may take it from the
// exact value: far less than this (|i * a|, |b| < 2^12 in any image the kernels take: ~1e-3 at most)
#ifndef STIR_SLAB_MARGIN
#define STIR_SLAB_MARGIN 0.0625f
#endif

// Cut a back-projection walk to the image planes [z_lo, z_hi) along z (a slab launch: the
// planes a launch adds into then fit the L2 cache however oblique its LORs are).  Its corners in
// other planes add nothing (stir_corners' test on u, which decides exactly), and its planes are
// cut to those where a corner may fall inside (a superset, found from the coordinate's
// monotone course with a margin for its rounding).  So the slab launches of a chunk add each
// corner once, in the slab of its plane.  False where the walk adds nothing to the slab.
__device__ __forceinline__ bool stir_clip_to_slab(StirWalk &W, int z_lo, int z_hi, int n0)
{
    if (z_lo <= 0 && z_hi >= n0)
        return true;
    if (W.L.dir == 0) // the planes are z
    {
        W.L.istart = max(W.L.istart, z_lo);
        W.L.iend = min(W.L.iend, z_hi - 1);
        return W.L.istart <= W.L.iend;
    }
    // z is the walk's u axis: its corners lie at floor(fu) and floor(fu) + 1, fu = i * au + bu
    const int lo = max(z_lo, 0), hi = min(z_hi, n0);
    W.ulo = lo;
    W.nu = hi - lo;
    const float f_lo = (float)(lo - 1) - STIR_SLAB_MARGIN, f_hi = (float)hi + STIR_SLAB_MARGIN;
    const float a = W.L.au, b = W.L.bu;
    if (a == 0.0f)
        return b >= f_lo && b < f_hi;
    const float t1 = (f_lo - b) / a, t2 = (f_hi - b) / a;
    const float first = fmaxf(floorf(fminf(t1, t2)) - 1.0f, (float)W.L.istart);
    const float last = fminf(ceilf(fmaxf(t1, t2)) + 1.0f, (float)W.L.iend);
    if (!(first <= last))
        return false;
    W.L.istart = (int)first;
    W.L.iend = (int)last;
    return true;
}

// Back projection.  The lanes of a warp step through one range of planes together (the
// smallest first plane to the largest last of its walks); at each plane those on the same
// principal axis (one target, one plane of it: `key`) add into a few contiguous runs of voxels,
// and a voxel that several lanes add into gets their sum in one atomic (segsum_step,
// warp_segsum.cuh).  What each lane adds is STIR's float32(val * weight) of each corner, so
// the image differs from adding them one by one in the order of the additions only.  Corners
// outside the target add zero, and sums of zero are never added, so offsets outside it (the
// frame of the walk's plane, or beyond the array) are never written.  On the host build
// (tests/cuda_host: the threads run one at a time) each lane adds its own corners.
// Idx: the offsets' type, int where the image has fewer than 2^31 voxels (back_stir), else
// long long (back_stir_wide).
template <typename Idx>
__device__ __forceinline__ void stir_back_add(bool walks, StirWalk &W, float y, float *img, float *img_xy, int n0,
                                              int n1, int n2, int z_lo, int z_hi)
{
    float val = 0.0f;
    float *target = img;
    int key = -1;
    bool small = false;
    walks = walks && stir_clip_to_slab(W, z_lo, z_hi, n0);
    if (walks)
    {
        val = F_MUL(W.L.cf, y);
        stir_back_target(W, n0, n1, n2, img, img_xy, target);
        key = W.L.dir;
        // (the floors without the conversion pipe where the walk's coordinates allow it)
        small = stir_ends_within(W.L.au, W.L.bu, W.L.istart, W.L.iend, STIR_SMALL) &&
                stir_ends_within(W.L.aw, W.L.bw, W.L.istart, W.L.iend, STIR_SMALL);
    }
#ifdef STIR_HOST_LANES
    if (!walks)
        return;
    for (int i = W.L.istart; i <= W.L.iend; ++i)
    {
        const StirCorners<Idx> C = stir_corners<Idx>(W, (float)i, val, small);
        float *q = target + (long long)i * W.sd + C.o;
        const float add[4] = {C.c00, C.c01, C.c10, C.c11};
        const long long at[4] = {0, 1, W.su, W.su + 1};
        for (int k = 0; k < 4; ++k)
            if (add[k] != 0.0f)
                atomicAdd(q + at[k], add[k]);
    }
#else
    const int lo = __reduce_min_sync(SG_FULL, walks ? W.L.istart : 0x7fffffff);
    const int hi = __reduce_max_sync(SG_FULL, walks ? W.L.iend : -1);
    const int key_left = __shfl_up_sync(SG_FULL, key, 1);
    float pf = (float)lo; // the plane index i as a float (exact): no conversion per plane
    for (int i = lo; i <= hi; ++i, pf = F_ADD(pf, 1.0f))
    {
        const bool act = walks && i >= W.L.istart && i <= W.L.iend;
        const unsigned amask = __ballot_sync(SG_FULL, act);
        if (amask == 0u)
            continue; // (warp-uniform: a ballot)
        StirCorners<Idx> C = {0, 0.0f, 0.0f, 0.0f, 0.0f};
        if (act)
            C = stir_corners<Idx>(W, pf, val, small);
        segsum_step<Idx>(amask, act, key, key_left, C.o, (Idx)W.su, target + (long long)i * W.sd, C.c00, C.c01,
                         C.c10, C.c11);
    }
#endif
}

// Back projection of a chunk's parts (STIR's endpoints from its tables) into the planes
// [z_lo, z_hi) along z (all planes, or a slab: stir_clip_to_slab)
template <typename Idx>
__device__ __forceinline__ void back_stir_walks(STIR_PARTS_ARGS, const float *__restrict__ values, float *img,
                                                float *img_xy, STIR_FRAME_ARGS, float rescale, int z_lo, int z_hi)
{
    StirPart P;
    const bool mine = stir_part_of_thread(STIR_PARTS_PASS, P);
    const float y = mine ? values[P.lor0 + P.idx] : 0.0f;
    StirWalk W;
    const bool walks = y != 0.0f && stir_walk(P, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, W);
    stir_back_add<Idx>(walks, W, y, img, img_xy, n0, n1, n2, z_lo, z_hi);
}

#define STIR_BACK_PARAMS                                                                                             \
    STIR_PARTS_ARGS, const float *__restrict__ values, float *__restrict__ img, float *__restrict__ img_xy,          \
        STIR_FRAME_ARGS, float rescale, int z_lo, int z_hi
#define STIR_BACK_PASS STIR_PARTS_PASS, values, img, img_xy, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, z_lo, z_hi

extern "C" __global__ void __launch_bounds__(STIR_THREADS, STIR_BACK_MIN_BLOCKS) back_stir(STIR_BACK_PARAMS)
{
    back_stir_walks<int>(STIR_BACK_PASS);
}

extern "C" __global__ void __launch_bounds__(STIR_THREADS) back_stir_wide(STIR_BACK_PARAMS)
{
    back_stir_walks<long long>(STIR_BACK_PASS);
}

// Back projection of explicit LORs (libparallelproj's joseph3d_back), one thread per LOR
template <typename Idx>
__device__ __forceinline__ void back_lor_walks(const float *__restrict__ xstart, const float *__restrict__ xend,
                                               long long n, const float *__restrict__ values, float *img,
                                               float *img_xy, STIR_FRAME_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const float y = i < n ? values[i] : 0.0f;
    StirWalk W;
    const bool walks = y != 0.0f && lor_walk(xstart, xend, i, n, n0, n1, n2, o0, o1, o2, v0, v1, v2, W);
    stir_back_add<Idx>(walks, W, y, img, img_xy, n0, n1, n2, 0, n0);
}

#define LORS_BACK_PARAMS                                                                                             \
    const float *__restrict__ xstart, const float *__restrict__ xend, long long n, const float *__restrict__ values, \
        float *__restrict__ img, float *__restrict__ img_xy, STIR_FRAME_ARGS
#define LORS_BACK_PASS xstart, xend, n, values, img, img_xy, n0, n1, n2, o0, o1, o2, v0, v1, v2

extern "C" __global__ void __launch_bounds__(STIR_THREADS, STIR_BACK_MIN_BLOCKS) back_lors(LORS_BACK_PARAMS)
{
    back_lor_walks<int>(LORS_BACK_PASS);
}

extern "C" __global__ void __launch_bounds__(STIR_THREADS) back_lors_wide(LORS_BACK_PARAMS)
{
    back_lor_walks<long long>(LORS_BACK_PASS);
}

// STIR's endpoints of every LOR of the parts, times rescale, (z, y, x) each: what STIR's
// Parallelproj projector hands libparallelproj (zero where the LOR misses the FOV cylinder)
extern "C" __global__ void endpoints_stir(STIR_PARTS_ARGS, float rescale, float *__restrict__ start,
                                          float *__restrict__ end)
{
    StirPart P;
    if (!stir_part_of_thread(STIR_PARTS_PASS, P))
        return;
    const long long idx = P.lor0 + P.idx;
    float s[3], e[3];
    bool hit;
    stir_endpoints(P, rescale, s, e, hit);
    for (int k = 0; k < 3; ++k)
    {
        start[3 * idx + k] = s[k];
        end[3 * idx + k] = e[k];
    }
}
