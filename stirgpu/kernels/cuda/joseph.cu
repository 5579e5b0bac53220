// Joseph forward and back projection kernels (non-TOF), compiled at run time by
// stirgpu.kernels.cuda_backend through NVRTC (cupy.RawModule).  The per-LOR
// arithmetic lives in joseph_common.cuh; this file maps threads to LORs.
//
// Two families:
//   *_simple : one thread per LOR, libparallelproj's mapping, bounds-checked reads of
//              the plain (z, y, x) image, plain atomicAdd into it.  No extra memory.
//   *_tiled  : reads / accumulates in zero-framed copies of the image (layout A for
//              principal axis z or y, layout B = x<->y transposed for principal axis
//              x), so the in-plane axis a warp moves along is always the contiguous
//              one; the lanes of one warp that share a principal axis step through
//              the same planes at the same time (warp-uniform plane loop), so a
//              warp of neighbouring parallel LORs touches a few contiguous segments
//              per step instead of 32 scattered voxels.
// Chunk kernels compute each LOR's endpoints from packed ChunkTables of one or more
// parts (segments) of a chunk; explicit kernels read
// them from (N, 3) float32 arrays.  Idx is int when every index fits, else long long.
//
// Compile-time options (set by the Python side): SG_LERP (bilinear as two lerps),
// SG_FWD_ILP=n (branch-free forward steps unrolled n times), SG_BACK_MERGE
// (neighbouring lanes merge the back-projection atomics that hit the same voxel before
// issuing them), SG_BACK_SEGSUM (exact aggregation of runs of lanes with equal footprints by
// register shuffles, no shared memory; replaces SG_BACK_MERGE's merging).
#include "joseph_common.cuh"
#include "warp_segsum.cuh"

#define SG_FULL 0xffffffffu

namespace sg {

__device__ __forceinline__ int warp_min_i(int v)
{
#if __CUDA_ARCH__ >= 800
    return __reduce_min_sync(SG_FULL, v);
#else
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(SG_FULL, v, o));
    return v;
#endif
}

__device__ __forceinline__ int warp_max_i(int v)
{
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(SG_FULL, v);
#else
    for (int o = 16; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(SG_FULL, v, o));
    return v;
#endif
}

__device__ __forceinline__ Grid make_grid(double oz, double oy, double ox, double vz, double vy, double vx,
                                          int nz, int ny, int nx)
{
    Grid g;
    g.org[0] = oz;
    g.org[1] = oy;
    g.org[2] = ox;
    g.vs[0] = vz;
    g.vs[1] = vy;
    g.vs[2] = vx;
    g.n[0] = nz;
    g.n[1] = ny;
    g.n[2] = nx;
    return g;
}

// LOR endpoints of bin (iv, ia, it) of a chunk; false if the LOR misses the cylinder.
__device__ __forceinline__ bool chunk_lor(const double *__restrict__ T, int nv, int na, int nt,
                                          int iv, int ia, int it, double xs[3], double xe[3])
{
    const double h = T[2 * nv + nt + it];
    chunk_endpoints(T[iv], T[nv + iv], T[2 * nv + it], h, T[2 * nv + 2 * nt + it],
                    T[2 * nv + 3 * nt + ia], xs, xe);
    return h > 0.0;
}

// Warp-cooperative plan of the fast path for this lane's LOR.
template <typename Idx>
struct TiledLane
{
    JosephLine L;
    bool fast;   // takes the padded path
    int key;     // principal axis for fast lanes, 3 otherwise
    int lo;      // first plane of this lane's group (warp-uniform within the group)
    int trips;   // warp-uniform number of loop trips
    Idx base, sp, su;
    int use_b;
};

template <typename Idx>
__device__ __forceinline__ TiledLane<Idx> tiled_plan(bool has, const double xs[3], const double xe[3],
                                                     const Grid &g)
{
    TiledLane<Idx> T;
    T.L = has ? joseph_setup(xs, xe, g) : no_line();
    T.fast = padded_ok(T.L, g);
    T.key = T.fast ? T.L.dir : 3;
    int lo = 0, hi = -1;
    for (int k = 0; k < 3; ++k)
    {
        // every lane takes part in every reduction (no early exits before this point)
        int mlo = warp_min_i(T.key == k ? T.L.istart : 0x7fffffff);
        int mhi = warp_max_i(T.key == k ? T.L.iend : -0x7fffffff);
        if (T.key == k)
        {
            lo = mlo;
            hi = mhi;
        }
    }
    T.lo = lo;
    T.trips = warp_max_i(hi - lo + 1);
    PaddedLine Q = padded_line(T.fast ? T.L.dir : 0, g);
    T.base = (Idx)Q.base;
    T.sp = (Idx)Q.sp;
    T.su = (Idx)Q.su;
    T.use_b = Q.use_b;
    return T;
}

template <typename Idx>
__device__ __forceinline__ float tiled_forward_lane(const TiledLane<Idx> &T, const float *__restrict__ A,
                                                    const float *__restrict__ B)
{
    const float *__restrict__ buf = T.use_b ? B : A;
    const JosephLine &L = T.L;
    float sum = 0.0f;
    float pf = (float)T.lo;
#ifdef SG_FWD_ILP
    // Branch-free steps: a lane outside its own plane range samples its nearest own
    // plane and adds 0 times the value.  Without the branch the compiler can unroll
    // and issue the loads of several planes before the first one returns.
    // lanes off the fast path read the frame corner (zero coefficients, plane 0)
    const JosephLine Lc = T.fast ? L : no_line();
    const int ilo = T.fast ? L.istart : 0, ihi = T.fast ? L.iend : 0;
    const float flo = (float)ilo, fhi = (float)ihi;
    constexpr int unroll = SG_FWD_ILP;
#pragma unroll unroll
    for (int j = 0; j < T.trips; ++j, pf += 1.0f)
    {
        const int p = T.lo + j;
        const int pc = min(max(p, ilo), ihi);
        const float pfc = fminf(fmaxf(pf, flo), fhi);
        const float m = (T.fast && p == pc) ? 1.0f : 0.0f;
        sum += m * padded_sample<Idx>(buf, Lc, T.base, T.sp, T.su, pc, pfc);
    }
#else
    for (int j = 0; j < T.trips; ++j, pf += 1.0f)
    {
        const int p = T.lo + j;
        if (T.fast && p >= L.istart && p <= L.iend)
            sum += padded_sample<Idx>(buf, L, T.base, T.sp, T.su, p, pf);
    }
#endif
    return sum;
}

// Add (left, right) to the two neighbouring floats at q (one row of the 2x2 footprint);
// `left_only`: the right one was handed to the neighbouring lane (SG_BACK_MERGE).
__device__ __forceinline__ void add_pair(float *q, float left, float right, bool left_only)
{
    if (left_only)
    {
        atomicAdd(q, left);
        return;
    }
    atomicAdd(q, left);
    atomicAdd(q + 1, right);
}


template <typename Idx>
__device__ __forceinline__ void tiled_back_lane(const TiledLane<Idx> &T, float val, float *A, float *B)
{
    float *buf = T.use_b ? B : A;
    const JosephLine &L = T.L;
    const int lane = (int)(threadIdx.x & 31u);
#if defined(SG_BACK_SEGSUM)
    const int key_left = __shfl_up_sync(SG_FULL, T.key, 1);
    (void)lane;
#elif defined(SG_BACK_MERGE)
    const int key_left = __shfl_up_sync(SG_FULL, T.key, 1);
    const int key_right = __shfl_down_sync(SG_FULL, T.key, 1);
#endif
    float pf = (float)T.lo;
    for (int j = 0; j < T.trips; ++j, pf += 1.0f)
    {
        const int p = T.lo + j;
        const bool act = T.fast && p >= L.istart && p <= L.iend;
#if defined(SG_BACK_SEGSUM)
        const unsigned amask = __ballot_sync(SG_FULL, act);
        if (amask == 0u)
            continue;  // warp-uniform (a ballot): no lane adds anything at this plane
#endif
        Idx o = (Idx)-1;
        int iu = 0, iv = 0;
        float c00 = 0.0f, c10 = 0.0f, c01 = 0.0f, c11 = 0.0f;
        if (act)
        {
            float wu, wv;
            o = padded_step<Idx>(L, T.base, T.sp, T.su, p, pf, wu, wv, iu, iv);
            c00 = val * ((1 - wu) * (1 - wv));
            c10 = val * ((wu) * (1 - wv));
            c01 = val * ((1 - wu) * (wv));
            c11 = val * ((wu) * (wv));
        }
#if defined(SG_BACK_SEGSUM)
        (void)iu;
        (void)iv;
        segsum_step<Idx>(amask, act, T.key, key_left, o, T.su, buf, c00, c01, c10, c11);
#else
#ifdef SG_BACK_MERGE
        // The left neighbour's right column (v+1) is often this lane's left column:
        // take it over, so the pair issues 2 instead of 4 atomics there.  Lanes of one
        // key sit on the same plane and buffer, so equal offsets mean equal voxels.
        const Idx o_left = __shfl_up_sync(SG_FULL, o, 1);
        const Idx o_right = __shfl_down_sync(SG_FULL, o, 1);
        const float r01 = __shfl_up_sync(SG_FULL, c01, 1);
        const float r11 = __shfl_up_sync(SG_FULL, c11, 1);
        const bool take = act && lane > 0 && key_left == T.key && o_left + 1 == o;
        const bool given = act && lane < 31 && key_right == T.key && o + 1 == o_right;
        if (take)
        {
            c00 += r01;
            c10 += r11;
        }
#else
        const bool given = false;
        (void)lane;
        (void)iu;
        (void)iv;
#endif
        if (act)
        {
            float *q = buf + o;
            add_pair(q, c00, c01, given);
            add_pair(q + T.su, c10, c11, given);
        }
#endif
    }
}

template <typename Idx>
__device__ __forceinline__ float simple_forward_lor(const JosephLine &L, const float *__restrict__ img,
                                                    const Grid &g)
{
    const PlainLine<Idx> P = plain_line<Idx>(L, g);
    float sum = 0.0f;
    for (int p = L.istart; p <= L.iend; ++p)
        sum += sample_plain<Idx>(img, P, L, p);
    return sum;
}

template <typename Idx>
__device__ __forceinline__ void simple_back_lor(const JosephLine &L, float val, float *img, const Grid &g)
{
    const PlainLine<Idx> P = plain_line<Idx>(L, g);
    for (int p = L.istart; p <= L.iend; ++p)
        scatter_plain<Idx>(img, P, L, p, val);
}

template <typename E>
__device__ __forceinline__ void load_lor(const E *__restrict__ xstart, const E *__restrict__ xend,
                                         long long i, double xs[3], double xe[3])
{
    for (int k = 0; k < 3; ++k)
    {
        xs[k] = (double)xstart[3 * i + k];
        xe[k] = (double)xend[3 * i + k];
    }
}

}  // namespace sg

#define SG_GRID_ARGS double oz, double oy, double ox, double vz, double vy, double vx, int nz, int ny, int nx
#define SG_GRID sg::make_grid(oz, oy, ox, vz, vy, vx, nz, ny, nx)

// ------------------------------------------------------------------------------------
// explicit endpoints: one thread per LOR, 1-D grid (blockDim.x a multiple of 32)
// ------------------------------------------------------------------------------------
template <typename E, typename Idx>
__global__ void fwd_explicit_simple(const E *__restrict__ xstart, const E *__restrict__ xend,
                                    const float *__restrict__ img, float *__restrict__ out,
                                    long long nlors, SG_GRID_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nlors)
        return;
    const sg::Grid g = SG_GRID;
    double xs[3], xe[3];
    sg::load_lor(xstart, xend, i, xs, xe);
    const sg::JosephLine L = sg::joseph_setup(xs, xe, g);
    float r = 0.0f;
    if (L.dir >= 0)
        r = sg::simple_forward_lor<Idx>(L, img, g) * L.cf;
    out[i] = r;
}

template <typename E, typename Idx>
__global__ void back_explicit_simple(const E *__restrict__ xstart, const E *__restrict__ xend,
                                     const float *__restrict__ values, float *img,
                                     long long nlors, SG_GRID_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nlors)
        return;
    const float v = values[i];
    if (v == 0.0f)
        return;
    const sg::Grid g = SG_GRID;
    double xs[3], xe[3];
    sg::load_lor(xstart, xend, i, xs, xe);
    const sg::JosephLine L = sg::joseph_setup(xs, xe, g);
    if (L.dir >= 0)
        sg::simple_back_lor<Idx>(L, L.cf * v, img, g);
}

template <typename E, typename Idx>
__global__ void fwd_explicit_tiled(const E *__restrict__ xstart, const E *__restrict__ xend,
                                   const float *__restrict__ img, const float *__restrict__ A,
                                   const float *__restrict__ B, float *__restrict__ out,
                                   long long nlors, SG_GRID_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool in_range = i < nlors;
    const sg::Grid g = SG_GRID;
    double xs[3] = {0.0, 0.0, 0.0}, xe[3] = {0.0, 0.0, 0.0};
    if (in_range)
        sg::load_lor(xstart, xend, i, xs, xe);
    const sg::TiledLane<Idx> T = sg::tiled_plan<Idx>(in_range, xs, xe, g);
    float sum = sg::tiled_forward_lane<Idx>(T, A, B);
    if (T.L.dir >= 0 && !T.fast)
        sum = sg::simple_forward_lor<Idx>(T.L, img, g);
    if (in_range)
        out[i] = T.L.dir >= 0 ? sum * T.L.cf : 0.0f;
}

template <typename E, typename Idx>
__global__ void back_explicit_tiled(const E *__restrict__ xstart, const E *__restrict__ xend,
                                    const float *__restrict__ values, float *img, float *A, float *B,
                                    long long nlors, SG_GRID_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const sg::Grid g = SG_GRID;
    double xs[3] = {0.0, 0.0, 0.0}, xe[3] = {0.0, 0.0, 0.0};
    float v = 0.0f;
    if (i < nlors)
    {
        v = values[i];
        sg::load_lor(xstart, xend, i, xs, xe);
    }
    const sg::TiledLane<Idx> T = sg::tiled_plan<Idx>(v != 0.0f, xs, xe, g);
    const float val = T.L.cf * v;
    sg::tiled_back_lane<Idx>(T, val, A, B);
    if (T.L.dir >= 0 && !T.fast)
        sg::simple_back_lor<Idx>(T.L, val, img, g);
}

// ------------------------------------------------------------------------------------
// chunk: endpoints from packed tables (stirgpu/kernels/tables.py): a header of 4 doubles
// per part [offset of its tables, offset of its first bin, nv, na], then per part
// [cos nv][sin nv][s nt][half_chord nt][tantheta nt][m na]; part k's bins are
// [view][axial][tangential] from its bin offset on.  One launch covers every part of a
// chunk (one segment each), so a multi-segment chunk has one launch tail, not one per
// segment.
// ------------------------------------------------------------------------------------
namespace sg {

struct Part
{
    const double *T;  // this part's tables
    long long bin0;   // its first bin in the chunk
    int nv, na;
};

__device__ __forceinline__ Part chunk_part(const double *__restrict__ P, int k)
{
    Part c;
    c.T = P + (long long)P[4 * k];
    c.bin0 = (long long)P[4 * k + 1];
    c.nv = (int)P[4 * k + 2];
    c.na = (int)P[4 * k + 3];
    return c;
}

// The part holding bin i (the parts' bins follow each other).
__device__ __forceinline__ Part part_of_bin(const double *__restrict__ P, int nparts, long long i)
{
    int k = 0;
    while (k + 1 < nparts && (long long)P[4 * (k + 1) + 1] <= i)
        ++k;
    return chunk_part(P, k);
}

// Tiled kernels: the part `k` of this block, and the block's index `b` within the part
// (each part has nv * ceil(na / blockDim.y) * ceil(nt / 32) blocks; block-uniform).
__device__ __forceinline__ Part part_of_block(const double *__restrict__ P, int nparts, int nt, long long &b, int &k)
{
    const long long tiles_t = (nt + 31) / 32, w = blockDim.y;
    b = blockIdx.x;
    k = 0;
    for (; k + 1 < nparts; ++k)
    {
        const long long nb = (long long)P[4 * k + 2] * (((long long)P[4 * k + 3] + w - 1) / w) * tiles_t;
        if (b < nb)
            break;
        b -= nb;
    }
    return chunk_part(P, k);
}

// Offset of bin (iv, ia, it) of part k in the chunk's values, the part's header read again
// (through L2: the compiler must not keep the first reads alive across the projection loop,
// whose register budget they would take).
__device__ __forceinline__ long long part_bin(const double *P, int k, int nt, int iv, int ia, int it)
{
    const long long bin0 = (long long)__ldcg(P + 4 * k + 1);
    const int na = (int)__ldcg(P + 4 * k + 3);
    return bin0 + ((long long)iv * na + ia) * nt + it;
}

// Bin (iv, ia, it) of local block b: blockDim = (32, W); each warp takes 32 consecutive
// tangential bins of one (view, axial position); the W warps of a block take W
// consecutive axial positions of the same view; tangential tiles fastest, then axial
// tiles, then views -- or, with ``axial`` (uniform over the launch), then views, then
// axial tiles: the blocks running at one time cover a slab of planes of every view
// rather than every plane of a few views.
__device__ __forceinline__ void chunk_tile(long long b, int nv, int na, int nt, int axial, int &iv, int &ia,
                                           int &it)
{
    const int tiles_t = (nt + 31) / 32;
    const int tiles_a = (na + (int)blockDim.y - 1) / (int)blockDim.y;
    const int tt = (int)(b % tiles_t);
    b /= tiles_t;
    int at;
    if (axial)
    {
        iv = (int)(b % nv);
        at = (int)(b / nv);
    }
    else
    {
        at = (int)(b % tiles_a);
        iv = (int)(b / tiles_a);
    }
    it = tt * 32 + (int)threadIdx.x;
    ia = at * (int)blockDim.y + (int)threadIdx.y;
}

}  // namespace sg

template <typename Idx>
__global__ void fwd_chunk_simple(const double *__restrict__ P, int nparts, int nt, long long nlors,
                                 const float *__restrict__ img, float *__restrict__ out, float scale,
                                 SG_GRID_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nlors)
        return;
    const sg::Part c = sg::part_of_bin(P, nparts, i);
    const long long j = i - c.bin0;
    const int it = (int)(j % nt);
    const long long r = j / nt;
    const int ia = (int)(r % c.na), iv = (int)(r / c.na);
    const sg::Grid g = SG_GRID;
    double xs[3], xe[3];
    float res = 0.0f;
    if (sg::chunk_lor(c.T, c.nv, c.na, nt, iv, ia, it, xs, xe))
    {
        const sg::JosephLine L = sg::joseph_setup(xs, xe, g);
        if (L.dir >= 0)
            res = (sg::simple_forward_lor<Idx>(L, img, g) * L.cf) * scale;
    }
    out[i] = res;
}

template <typename Idx>
__global__ void back_chunk_simple(const double *__restrict__ P, int nparts, int nt, long long nlors,
                                  const float *__restrict__ values, float *img, float scale,
                                  SG_GRID_ARGS)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nlors)
        return;
    const float v = values[i];
    if (v == 0.0f)
        return;
    const sg::Part c = sg::part_of_bin(P, nparts, i);
    const long long j = i - c.bin0;
    const int it = (int)(j % nt);
    const long long r = j / nt;
    const int ia = (int)(r % c.na), iv = (int)(r / c.na);
    const sg::Grid g = SG_GRID;
    double xs[3], xe[3];
    if (!sg::chunk_lor(c.T, c.nv, c.na, nt, iv, ia, it, xs, xe))
        return;
    const sg::JosephLine L = sg::joseph_setup(xs, xe, g);
    if (L.dir >= 0)
        sg::simple_back_lor<Idx>(L, L.cf * (v * scale), img, g);
}

// The two tiled chunk kernels' arguments are also packed, in this order, by
// cuda_backend._RawLaunch (ChunkLauncher's driver-level launch): change both together.
template <typename Idx>
__global__ void fwd_chunk_tiled(const double *__restrict__ P, int nparts, int nt, int axial,
                                const float *__restrict__ img, const float *__restrict__ A,
                                const float *__restrict__ B, float *__restrict__ out, float scale,
                                SG_GRID_ARGS)
{
    long long b;
    int k;
    const sg::Part c = sg::part_of_block(P, nparts, nt, b, k);
    int iv, ia, it;
    sg::chunk_tile(b, c.nv, c.na, nt, axial, iv, ia, it);
    const bool in_range = it < nt && ia < c.na;
    const sg::Grid g = SG_GRID;
    double xs[3] = {0.0, 0.0, 0.0}, xe[3] = {0.0, 0.0, 0.0};
    bool has = false;
    if (in_range)
        has = sg::chunk_lor(c.T, c.nv, c.na, nt, iv, ia, it, xs, xe);
    const sg::TiledLane<Idx> T = sg::tiled_plan<Idx>(has, xs, xe, g);
    float sum = sg::tiled_forward_lane<Idx>(T, A, B);
    if (T.L.dir >= 0 && !T.fast)
        sum = sg::simple_forward_lor<Idx>(T.L, img, g);
    if (in_range)
        out[sg::part_bin(P, k, nt, iv, ia, it)] = T.L.dir >= 0 ? (sum * T.L.cf) * scale : 0.0f;
}

template <typename Idx>
__global__ void back_chunk_tiled(const double *__restrict__ P, int nparts, int nt, int axial,
                                 const float *__restrict__ values, float *img, float *A, float *B,
                                 float scale, SG_GRID_ARGS)
{
    long long b;
    int k;
    const sg::Part c = sg::part_of_block(P, nparts, nt, b, k);
    int iv, ia, it;
    sg::chunk_tile(b, c.nv, c.na, nt, axial, iv, ia, it);
    const sg::Grid g = SG_GRID;
    double xs[3] = {0.0, 0.0, 0.0}, xe[3] = {0.0, 0.0, 0.0};
    float v = 0.0f;
    bool has = false;
    if (it < nt && ia < c.na)
    {
        v = values[c.bin0 + ((long long)iv * c.na + ia) * nt + it];
        if (v != 0.0f)
            has = sg::chunk_lor(c.T, c.nv, c.na, nt, iv, ia, it, xs, xe);
    }
    const sg::TiledLane<Idx> T = sg::tiled_plan<Idx>(has, xs, xe, g);
    const float val = T.L.cf * (v * scale);
    sg::tiled_back_lane<Idx>(T, val, A, B);
    if (T.L.dir >= 0 && !T.fast)
        sg::simple_back_lor<Idx>(T.L, val, img, g);
}

// ------------------------------------------------------------------------------------
// layout kernels of the tiled path (blockDim = (32, 8); grid (tiles, tiles, planes))
// ------------------------------------------------------------------------------------
#define SG_TILE 32
#define SG_ROWS 8

// A[z+1][y+1][x+1] = B[z+1][x+1][y+1] = img[z][y][x], zero frame.  One read of the
// image, both layouts written with coalesced rows (B through a shared-memory transpose).
// grid = (tiles over nx+2, tiles over ny+2, nz+2), block = (32, 8).
extern "C" __global__ void pad_ab(const float *__restrict__ img, float *__restrict__ A,
                                  float *__restrict__ B, int nz, int ny, int nx)
{
    __shared__ float tile[SG_TILE][SG_TILE + 1];
    const int zp = blockIdx.z;  // padded coordinates
    const int x0 = blockIdx.x * SG_TILE, y0 = blockIdx.y * SG_TILE;
    const int ny2 = ny + 2, nx2 = nx + 2;
    const long long plane_a = (long long)zp * ny2 * nx2, plane_b = (long long)zp * nx2 * ny2;
    const int z = zp - 1;
    for (int r = threadIdx.y; r < SG_TILE; r += SG_ROWS)
    {
        const int yp = y0 + r, xp = x0 + (int)threadIdx.x;
        const int y = yp - 1, x = xp - 1;
        float val = 0.0f;
        if ((unsigned)z < (unsigned)nz && (unsigned)y < (unsigned)ny && (unsigned)x < (unsigned)nx)
            val = img[((long long)z * ny + y) * nx + x];
        tile[r][threadIdx.x] = val;
        if (yp < ny2 && xp < nx2)
            A[plane_a + (long long)yp * nx2 + xp] = val;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < SG_TILE; r += SG_ROWS)
    {
        const int xp = x0 + r, yp = y0 + (int)threadIdx.x;
        if (xp < nx2 && yp < ny2)
            B[plane_b + (long long)xp * ny2 + yp] = tile[threadIdx.x][r];
    }
}

// out[z][y][x] += A[z+1][y+1][x+1] + B[z+1][x+1][y+1] (add != 0), or = (add == 0: out is not
// read, so it need not be initialised).  grid = (tiles over x, tiles over y, nz).
extern "C" __global__ void combine_back(float *__restrict__ out, const float *__restrict__ A,
                                        const float *__restrict__ B, int nz, int ny, int nx, int add)
{
    __shared__ float tile[SG_TILE][SG_TILE + 1];
    const int z = blockIdx.z;
    const int x0 = blockIdx.x * SG_TILE, y0 = blockIdx.y * SG_TILE;
    const long long ny2 = ny + 2, nx2 = nx + 2;
    for (int r = threadIdx.y; r < SG_TILE; r += SG_ROWS)
    {
        const int x = x0 + r, y = y0 + (int)threadIdx.x;
        float val = 0.0f;
        if (x < nx && y < ny)
            val = B[((long long)(z + 1) * nx2 + (x + 1)) * ny2 + (y + 1)];
        tile[r][threadIdx.x] = val;  // tile[x - x0][y - y0]
    }
    __syncthreads();
    for (int r = threadIdx.y; r < SG_TILE; r += SG_ROWS)
    {
        const int y = y0 + r, x = x0 + (int)threadIdx.x;
        if (x < nx && y < ny)
        {
            const long long o = ((long long)z * ny + y) * nx + x;
            const float a = A[((long long)(z + 1) * ny2 + (y + 1)) * nx2 + (x + 1)];
            const float sum = a + tile[threadIdx.x][r];
            out[o] = add ? out[o] + sum : sum;
        }
    }
}
