// Per-LOR building blocks of the Joseph projector, shared by every CUDA kernel of
// joseph.cu and by a host-side C++ check (they compile as plain C++ too).
//
// Semantics follow libparallelproj 2.0.x (joseph3d, non-TOF):
//   * coordinates in the image axis order (0, 1, 2) = (z, y, x); `origin` is the
//     centre of voxel [0,0,0]; the image box spans origin - voxel/2 ... + n*voxel;
//   * the ray is clipped to the box with the slab method (t in [0, 1]);
//   * principal axis = largest squared direction cosine (ties: 1 before 2 before 0);
//   * one sample per principal-axis plane crossed (index istart..iend), bilinear in
//     the other two axes with zero outside the image;
//   * weight = voxel_size[axis] / |cos(axis)|.
// docs/joseph.md is the specification and stirgpu/kernels/cpu.py the reference.
// Every discrete decision (miss, principal axis, plane range) is computed in float64
// with explicitly rounded operations, operation for operation as the CPU reference,
// so both backends pick the same planes; the inner loop (interpolation coordinates,
// weights, the sum) runs in float32, which is where the two differ, by float32
// rounding.
#pragma once

#if defined(__CUDACC__)
#define SG_HD __host__ __device__ __forceinline__
#else
#define SG_HD inline
#include <math.h>
#endif

#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__)
#include <stdint.h>
#endif

namespace sg {

// --- explicitly rounded float64 arithmetic (no contraction into FMA) ---------------
SG_HD double dadd_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
SG_HD double dsub_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
SG_HD double dmul_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
SG_HD float to_float_rn(double a)
{
#ifdef __CUDA_ARCH__
    return __double2float_rn(a);
#else
    return (float)a;
#endif
}

// floor(f) as float and int, for |f| < 2^22.  On the GPU this avoids the
// conversion pipe (F2I/FRND run at 1/8 of the FP32 rate on sm_80/sm_90): adding
// 1.5*2^23 with rounding towards -inf lands exactly on M + floor(f), whose bit
// pattern minus that of M is floor(f).  Same result as floorf/(int) bit for bit.
SG_HD void floor_split(float f, float &fl, int &i)
{
#ifdef __CUDA_ARCH__
    const float M = 12582912.0f;  // 1.5 * 2^23, bit pattern 0x4B400000
    float t = __fadd_rd(f, M);
    i = __float_as_int(t) - 0x4B400000;
    fl = t - M;  // exact
#else
    fl = floorf(f);
    i = (int)fl;
#endif
}

// --- geometry of one call --------------------------------------------------------------
struct Grid
{
    double org[3];  // centre of voxel [0,0,0] (z, y, x)
    double vs[3];   // voxel size (z, y, x)
    int n[3];       // image shape (z, y, x)
};

// One LOR reduced to Joseph's plane stepping.  dir < 0: nothing to project.
// Along the principal axis `dir`, plane p (istart <= p <= iend) is sampled at the
// continuous indices fu = p*au + bu (axis u) and fv = p*av + bv (axis v), where
// (u, v) are the two other axes in increasing order.  The plane range and the axis
// are decided in float64 exactly as the CPU reference decides them; the stepping
// coefficients are then rounded to float32 for the inner loop.
struct JosephLine
{
    int dir;
    int istart, iend;
    float cf;
    float au, bu, av, bv;
};

template <typename T>
SG_HD T pick3(const T a[3], int k)
{
    return k == 0 ? a[0] : (k == 1 ? a[1] : a[2]);
}

SG_HD void other_axes(int dir, int &u, int &v)
{
    u = (dir == 0) ? 1 : 0;
    v = (dir == 2) ? 1 : 2;
}

SG_HD JosephLine no_line()
{
    JosephLine L;
    L.dir = -1;
    L.istart = 0;
    L.iend = -1;
    L.cf = 0.0f;
    L.au = L.bu = L.av = L.bv = 0.0f;
    return L;
}

SG_HD double ddiv_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}

SG_HD double dsqrt_rn(double a)
{
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}

// trunc toward zero of a plane coordinate, kept in int range (values beyond the
// image never reach a decision that this clamp could change)
SG_HD int trunc_plane(double f, int n)
{
    const double lim = (double)n + 2.0;
    f = f < -2.0 ? -2.0 : (f > lim ? lim : f);
    return (int)f;
}

// docs/joseph.md steps 1-4, operation for operation as stirgpu/kernels/cpu.py
// (_lor_setup), in float64 without contraction, so every discrete decision (miss,
// principal axis, plane range) is the CPU's.
SG_HD JosephLine joseph_setup(const double p0[3], const double p1[3], const Grid &g)
{
    JosephLine L = no_line();
    double d[3];
    for (int k = 0; k < 3; ++k)
        d[k] = dsub_rn(p1[k], p0[k]);
    if (d[0] == 0.0 && d[1] == 0.0 && d[2] == 0.0)
        return L;  // zero-length LOR

    // 1. slab clipping to the box of voxel edges, t in [0, 1]
    double tmin = 0.0, tmax = 1.0;
    for (int k = 0; k < 3; ++k)
    {
        const double lo = dsub_rn(g.org[k], dmul_rn(0.5, g.vs[k]));
        const double hi = dadd_rn(lo, dmul_rn((double)g.n[k], g.vs[k]));
        if (d[k] != 0.0)
        {
            const double t1 = ddiv_rn(dsub_rn(lo, p0[k]), d[k]);
            const double t2 = ddiv_rn(dsub_rn(hi, p0[k]), d[k]);
            tmin = fmax(tmin, fmin(t1, t2));
            tmax = fmin(tmax, fmax(t1, t2));
        }
        else if (!(lo < p0[k] && p0[k] < hi))
        {
            return L;  // parallel to axis k and not strictly inside its slab
        }
    }
    if (tmax < tmin)
        return L;

    // 2. principal axis: largest squared direction cosine, ties to y, then x
    const double q0 = dmul_rn(d[0], d[0]), q1 = dmul_rn(d[1], d[1]), q2 = dmul_rn(d[2], d[2]);
    const double ss = dadd_rn(dadd_rn(q0, q1), q2);
    const double c0 = ddiv_rn(q0, ss), c1 = ddiv_rn(q1, ss), c2 = ddiv_rn(q2, ss);
    int dir;
    if (c1 >= c0 && c1 >= c2)
        dir = 1;
    else if (c2 >= c0 && c2 >= c1)
        dir = 2;
    else
        dir = 0;

    // select by ternaries: a dynamic index would put these arrays in local memory
    int u, v;
    other_axes(dir, u, v);
    const double p_d = pick3(p0, dir), p_u = pick3(p0, u), p_v = pick3(p0, v);
    const double d_d = pick3(d, dir), d_u = pick3(d, u), d_v = pick3(d, v);
    const double o_d = pick3(g.org, dir), o_u = pick3(g.org, u), o_v = pick3(g.org, v);
    const double s_d = pick3(g.vs, dir), s_u = pick3(g.vs, u), s_v = pick3(g.vs, v);
    const int n_d = pick3(g.n, dir);
    const double cosq = dir == 0 ? c0 : (dir == 1 ? c1 : c2);

    // 3. planes crossed between the clipped entry and exit (2.0.3 compares truncations)
    double f1 = ddiv_rn(dsub_rn(dadd_rn(p_d, dmul_rn(tmin, d_d)), o_d), s_d);
    double f2 = ddiv_rn(dsub_rn(dadd_rn(p_d, dmul_rn(tmax, d_d)), o_d), s_d);
    if (trunc_plane(f1, n_d) == trunc_plane(f2, n_d))
        return L;
    if (f1 > f2)
    {
        const double t = f1;
        f1 = f2;
        f2 = t;
    }
    const double lim = (double)n_d + 2.0;
    int istart = (int)floor(f1 < -2.0 ? -2.0 : f1) + 1;
    int iend = (int)floor(f2 > lim ? lim : f2);
    if (istart < 0)
        istart = 0;
    if (iend > n_d - 1)
        iend = n_d - 1;
    if (istart > iend)
        return L;

    // 4. stepping coefficients (continuous quantities: exact operation order no longer
    //    matters beyond float32, so one reciprocal replaces four divisions)
    const double inv = ddiv_rn(1.0, d_d);
    const double od = dsub_rn(o_d, p_d);
    L.au = to_float_rn(d_u * s_d * inv / s_u);
    L.bu = to_float_rn((p_u - o_u + d_u * od * inv) / s_u);
    L.av = to_float_rn(d_v * s_d * inv / s_v);
    L.bv = to_float_rn((p_v - o_v + d_v * od * inv) / s_v);
    L.cf = to_float_rn(ddiv_rn(s_d, dsqrt_rn(cosq)));
    L.dir = dir;
    L.istart = istart;
    L.iend = iend;
    return L;
}

// Endpoints of bin (view i, axial k, tangential j) of a chunk, from ChunkTables
// values, in float64 exactly as the CPU reference (_table_endpoints):
// start at a = -half_chord, end at a = +half_chord, axis order (z, y, x).
SG_HD void chunk_endpoints(double c, double sn, double s, double h, double tt, double m,
                           double p0[3], double p1[3])
{
    const double xc = dmul_rn(s, c), yc = dmul_rn(s, sn);
    const double hs = dmul_rn(h, sn), hc = dmul_rn(h, c), ht = dmul_rn(h, tt);
    p0[0] = dadd_rn(m, ht);
    p0[1] = dadd_rn(yc, hc);
    p0[2] = dsub_rn(xc, hs);
    p1[0] = dsub_rn(m, ht);
    p1[1] = dsub_rn(yc, hc);
    p1[2] = dadd_rn(xc, hs);
}

// --- bilinear weights in libparallelproj's order ------------------------------------
SG_HD float bilinear(float v00, float v10, float v01, float v11, float wu, float wv)
{
#ifdef SG_LERP
    // algebraically equal, fewer operations, different float32 rounding
    float a = v00 + wv * (v01 - v00);
    float b = v10 + wv * (v11 - v10);
    return a + wu * (b - a);
#else
    return v00 * (1 - wu) * (1 - wv) + v10 * (wu) * (1 - wv) + v01 * (1 - wu) * (wv) + v11 * (wu) * (wv);
#endif
}

// --- checked sampling on the plain (z, y, x) image ----------------------------------
// Used by the "simple" kernels and by LORs that the padded fast path cannot take.
// Per-LOR constants of the checked path.
template <typename Idx>
struct PlainLine
{
    Idx sp, su, sv;  // element strides of the principal axis, u and v
    int nu, nv;      // image extent along u and v
};

template <typename Idx>
SG_HD PlainLine<Idx> plain_line(const JosephLine &L, const Grid &g)
{
    const Idx st[3] = {(Idx)g.n[1] * (Idx)g.n[2], (Idx)g.n[2], (Idx)1};
    int u, v;
    other_axes(L.dir, u, v);
    PlainLine<Idx> P;
    P.sp = pick3(st, L.dir);
    P.su = pick3(st, u);
    P.sv = pick3(st, v);
    P.nu = pick3(g.n, u);
    P.nv = pick3(g.n, v);
    return P;
}

SG_HD void atomic_add_f(float *addr, float x)
{
#ifdef __CUDA_ARCH__
    atomicAdd(addr, x);
#else
    *addr += x;
#endif
}

// Continuous index f, clamped where any sample would be zero anyway, split into the
// lower neighbour and its weight.
SG_HD void checked_split(float f, int n, int &i0, float &w)
{
    f = fminf(fmaxf(f, -2.0f), (float)n + 1.0f);
    float fl;
    floor_split(f, fl, i0);
    w = f - fl;
}

template <typename Idx>
SG_HD float sample_plain(const float *img, const PlainLine<Idx> &P, const JosephLine &L, int p)
{
    float pf = (float)p;
    int iu, iv;
    float wu, wv;
    checked_split(pf * L.au + L.bu, P.nu, iu, wu);
    checked_split(pf * L.av + L.bv, P.nv, iv, wv);
    const bool u0 = (unsigned)iu < (unsigned)P.nu, u1 = (unsigned)(iu + 1) < (unsigned)P.nu;
    const bool v0 = (unsigned)iv < (unsigned)P.nv, v1 = (unsigned)(iv + 1) < (unsigned)P.nv;
    const Idx o = (Idx)p * P.sp + (Idx)iu * P.su + (Idx)iv * P.sv;
    float v00 = (u0 && v0) ? img[o] : 0.0f;
    float v10 = (u1 && v0) ? img[o + P.su] : 0.0f;
    float v01 = (u0 && v1) ? img[o + P.sv] : 0.0f;
    float v11 = (u1 && v1) ? img[o + P.su + P.sv] : 0.0f;
    return bilinear(v00, v10, v01, v11, wu, wv);
}

template <typename Idx>
SG_HD void scatter_plain(float *img, const PlainLine<Idx> &P, const JosephLine &L, int p, float val)
{
    float pf = (float)p;
    int iu, iv;
    float wu, wv;
    checked_split(pf * L.au + L.bu, P.nu, iu, wu);
    checked_split(pf * L.av + L.bv, P.nv, iv, wv);
    const bool u0 = (unsigned)iu < (unsigned)P.nu, u1 = (unsigned)(iu + 1) < (unsigned)P.nu;
    const bool v0 = (unsigned)iv < (unsigned)P.nv, v1 = (unsigned)(iv + 1) < (unsigned)P.nv;
    const Idx o = (Idx)p * P.sp + (Idx)iu * P.su + (Idx)iv * P.sv;
    if (u0 && v0)
        atomic_add_f(img + o, val * ((1 - wu) * (1 - wv)));
    if (u1 && v0)
        atomic_add_f(img + o + P.su, val * ((wu) * (1 - wv)));
    if (u0 && v1)
        atomic_add_f(img + o + P.sv, val * ((1 - wu) * (wv)));
    if (u1 && v1)
        atomic_add_f(img + o + P.su + P.sv, val * ((wu) * (wv)));
}

// --- padded layouts of the fast ("tiled") path --------------------------------------
// A: (nz+2, ny+2, nx+2), element (z, y, x) at [z+1][y+1][x+1]   (axes 0 and 1 principal)
// B: (nz+2, nx+2, ny+2), element (z, y, x) at [z+1][x+1][y+1]   (axis 2 principal)
// The one-voxel zero frame makes bounds checks unnecessary, and in both layouts the
// in-plane axis v is the contiguous one, so a warp of neighbouring parallel LORs reads
// (and, for the back projection, atomically adds to) a few contiguous segments.
struct PaddedLine
{
    long long base;  // element offset of (plane 0, u 0, v 0) in its buffer, frame included
    long long sp;    // stride between planes
    long long su;    // stride along u (v has stride 1)
    int use_b;       // 1: layout B
};

SG_HD PaddedLine padded_line(int dir, const Grid &g)
{
    long long ny2 = g.n[1] + 2, nx2 = g.n[2] + 2;
    PaddedLine Q;
    if (dir == 0)
    {
        Q.sp = ny2 * nx2;
        Q.su = nx2;
        Q.use_b = 0;
    }
    else if (dir == 1)
    {
        Q.sp = nx2;
        Q.su = ny2 * nx2;
        Q.use_b = 0;
    }
    else
    {
        Q.sp = ny2;
        Q.su = nx2 * ny2;
        Q.use_b = 1;
    }
    Q.base = Q.sp + Q.su + 1;
    return Q;
}

// The fast path needs every sample of the LOR inside the zero frame.  fu and fv are
// monotone in p, so checking both end planes (with a margin far above rounding)
// suffices; a LOR that fails (only possible for absurd coordinates) takes the checked
// path instead.
SG_HD bool padded_ok(const JosephLine &L, const Grid &g)
{
    if (L.dir < 0)
        return false;
    int u, v;
    other_axes(L.dir, u, v);
    float p0 = (float)L.istart, p1 = (float)L.iend;
    float fu0 = p0 * L.au + L.bu, fu1 = p1 * L.au + L.bu;
    float fv0 = p0 * L.av + L.bv, fv1 = p1 * L.av + L.bv;
    float hu = (float)pick3(g.n, u) - 0.25f, hv = (float)pick3(g.n, v) - 0.25f;
    return (fu0 >= -0.75f && fu0 <= hu && fu1 >= -0.75f && fu1 <= hu &&
            fv0 >= -0.75f && fv0 <= hv && fv1 >= -0.75f && fv1 <= hv);
}

// offset of the (u, v) lower corner of plane p inside the padded buffer
template <typename Idx>
SG_HD Idx padded_offset(Idx base, Idx sp, Idx su, int p, int iu, int iv)
{
    return base + (Idx)p * sp + (Idx)iu * su + (Idx)iv;
}

// One step of the fast path: plane p (pf == (float)p) of a LOR that passed padded_ok.
// Returns the offset of the lower (u, v) corner and the two in-plane weights.
template <typename Idx>
SG_HD Idx padded_step(const JosephLine &L, Idx base, Idx sp, Idx su, int p, float pf, float &wu, float &wv,
                      int &iu, int &iv)
{
    const float fu = pf * L.au + L.bu;
    const float fv = pf * L.av + L.bv;
    float flu, flv;
    floor_split(fu, flu, iu);
    floor_split(fv, flv, iv);
    wu = fu - flu;
    wv = fv - flv;
    return padded_offset<Idx>(base, sp, su, p, iu, iv);
}

#ifdef __CUDA_ARCH__
#define SG_LOAD(p) __ldg(p)
#else
#define SG_LOAD(p) (*(p))
#endif

template <typename Idx>
SG_HD float padded_sample(const float *buf, const JosephLine &L, Idx base, Idx sp, Idx su, int p, float pf)
{
    float wu, wv;
    int iu, iv;
    const float *q = buf + padded_step<Idx>(L, base, sp, su, p, pf, wu, wv, iu, iv);
    const float v00 = SG_LOAD(q), v01 = SG_LOAD(q + 1);
    const float v10 = SG_LOAD(q + su), v11 = SG_LOAD(q + su + 1);
    return bilinear(v00, v10, v01, v11, wu, wv);
}

}  // namespace sg
