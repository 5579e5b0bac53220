// TOF with STIR's numerics on the GPU: libparallelproj 2.0.7's TOF sinogram Joseph projector on
// STIR's float32 LOR endpoints computed in the kernel, as stirgpu/kernels/tof/cpu.py (the
// reference; docs/tof.md has the rules).  Compiled after joseph.cu (its endpoints, walk,
// sample and scatter), with --fmad=false and every float operation an explicit intrinsic.
//
// One thread per LOR, all parts of a chunk in one launch (joseph.cu's stir_part_of_thread).  The
// LOR is walked once, from STIR's second endpoint to its first (STIR hands libparallelproj xend as the start for TOF).  At each plane the window of
// TOF bins within n_sigmas of the plane's TOF coordinate it_f gets Gaussian bin integrals
// normalised by their sum over the window (bins outside the data included, then dropped); a
// window of more than MAX_NUM_TOF_WEIGHTS bins keeps the 64 around it_f (2.0.7's clamp).
//
// it_f = i * at + bt at plane i (recomputed per plane, as the interpolation coordinates) moves
// monotonically along the walk, so the window slides over the
// bins in one direction and every bin enters and leaves it once.  The kernels keep the window in
// NW registers (slots, lowest bin first): the forward projection accumulates there and writes
// each bin once as it leaves; the back projection loads each bin's value once as it enters.
// Sums over a window run from its lowest bin up, in the plane order of the walk, as on the CPU;
// the float32 results differ from the CPU's by the weights' rounding (shared bin edges, tof_erf).
// Windows wider than the largest NW take the *_wide kernels, which keep the weights in local
// memory and add into the output per plane (the CPU's operations, but CUDA's erff).
//
// Values of one part are [tof bin][view][axial][tangential] (TOF outermost), n_lors = nv*na*nt
// values per bin, the parts one after the other (a part's first at nb times its first LOR); it holds the data's bins first .. first + nb - 1, the TOF coordinate is
// counted from the data's bin 0.  TOF parameters (kernel units): bin width, sigma, n_sigmas and
// c0, the centre of the data's bin 0 in widths from the LOR's midpoint towards the walk's end.

// libparallelproj's MAX_NUM_TOF_WEIGHTS: the most bins of one plane's window (wider ones are clamped)
#define STIR_TOF_WIDE_MAX 64

struct StirTof
{
    float it_f, at, bt, max_diff, width, denom, half;
    float edge_step; // a bin width in erf's argument: width / (sqrt(2) sigma)
};

// The walk of part P's LOR P.idx for TOF (reversed: e to s) and its TOF stepping; false where it adds nothing
__device__ __forceinline__ bool stir_tof_walk(const StirPart &P, int n0, int n1, int n2, float o0, float o1, float o2,
                                              float v0, float v1, float v2, float rescale, float width, float sigma,
                                              float n_sigmas, float c0, StirWalk &W, StirTof &F)
{
    float s[3], e[3];
    bool hit;
    stir_endpoints(P, rescale, s, e, hit);
    if (!stir_walk_between(e, s, n0, n1, n2, o0, o1, o2, v0, v1, v2, W))
        return false;
    const int di = W.L.dir;
    const float vd = di == 0 ? v0 : (di == 1 ? v1 : v2);
    const float od = di == 0 ? o0 : (di == 1 ? o1 : o2);
    const float costheta = F_DIV(vd, W.L.cf);
    F.max_diff = F_DIV(F_MUL(n_sigmas, sigma), width);
    // the walk runs a = e -> b = s
    const float sign = s[di] >= e[di] ? 1.0f : -1.0f;
    // the centre of bin 0 on the principal axis, in double as libparallelproj evaluates it
    const double centre = __dadd_rn(__dmul_rn(0.5, (double)F_ADD(e[di], s[di])),
                                    __dmul_rn(__dmul_rn((double)sign, (double)c0), (double)F_MUL(width, costheta)));
    const float origin = __double2float_rn(centre);
    const float slope = F_MUL(F_MUL(sign, width), costheta);
    F.at = F_DIV(F_MUL(sign, W.L.cf), width);
    F.bt = F_DIV(F_SUB(od, origin), slope);
    F.it_f = F_ADD(F_MUL((float)W.L.istart, F.at), F.bt);
    F.width = width;
    F.denom = F_MUL(1.414213562373095f, sigma);
    F.half = F_MUL(0.5f, width);
    F.edge_step = F_DIV(width, F.denom);
    return true;
}

// it_f at plane pf (the plane index as a float)
__device__ __forceinline__ void tof_at_plane(StirTof &F, float pf)
{
    F.it_f = F_ADD(F_MUL(pf, F.at), F.bt);
}

// The window of bins of a plane: [lo, hi], at most STIR_TOF_WIDE_MAX bins around it_f
__device__ __forceinline__ void tof_window(const StirTof &F, int &lo, int &hi)
{
    lo = (int)floorf(F_SUB(F.it_f, F.max_diff));
    hi = (int)ceilf(F_ADD(F.it_f, F.max_diff));
    if (hi + 1 - lo > STIR_TOF_WIDE_MAX)
    {
        lo = (int)lroundf(F.it_f) - STIR_TOF_WIDE_MAX / 2;
        hi = lo + STIR_TOF_WIDE_MAX - 1;
    }
}

// What a plane's sample is divided by: the sum of its window's weights, 1 where that is not positive
__device__ __forceinline__ float tof_divisor(float total)
{
    return total > 0.0f ? total : 1.0f;
}

// erf for the register kernels' bin edges: within 1.1e-7 of erf for every float32 argument (CUDA's
// erff: 2 ulp, up to 1.2e-7 near 1), in about two thirds of erff's instructions and without its
// branch.  erf(x) = sign(x) (1 - 2^q(|x|)), q a degree-8 fit of log2(erfc) on [0, 3.92] (beyond, as
// at 3.92, float32's erf is 1); 2^q = 2^n 2^f, n = rint(q), |f| <= 1/2, 2^f a degree-6 polynomial
// (1.3 ulp), n added to the exponent.  Explicitly rounded operations only (no MUFU
// approximation), so the host build of this file computes the same bits.  Coefficients and
// accuracy: docs/tof.md, "The GPU kernels".
__device__ __forceinline__ float tof_erf(float x)
{
    const float t = fminf(fabsf(x), 3.92f);
    float q = -4.43550779891666e-05f;
    q = __fmaf_rn(q, t, 0.00043696005013771355f);
    q = __fmaf_rn(q, t, -0.0014604255557060242f);
    q = __fmaf_rn(q, t, -0.0008251037215813994f);
    q = __fmaf_rn(q, t, 0.028301840648055077f);
    q = __fmaf_rn(q, t, -0.14850662648677826f);
    q = __fmaf_rn(q, t, -0.9184098243713379f);
    q = __fmaf_rn(q, t, -1.6279093027114868f);
    q = __fmaf_rn(q, t, 2.171419488661286e-08f);
    const float shifted = __fadd_rn(q, 12582912.0f); // 1.5 * 2^23 + rint(q), exactly
    const float n = __fsub_rn(shifted, 12582912.0f);
    const float f = __fsub_rn(q, n);
    float p = 0.0001534580806037411f;
    p = __fmaf_rn(p, f, 0.0013399932067841291f);
    p = __fmaf_rn(p, f, 0.009618489071726799f);
    p = __fmaf_rn(p, f, 0.05550328642129898f);
    p = __fmaf_rn(p, f, 0.24022646248340607f);
    p = __fmaf_rn(p, f, 0.6931471824645996f);
    p = __fmaf_rn(p, f, 1.0f);
    const int scale = (__float_as_int(shifted) - 0x4B400000) * (1 << 23);
    return copysignf(__fsub_rn(1.0f, __int_as_float(__float_as_int(p) + scale)), x);
}

// libparallelproj's effective Gaussian TOF kernel of the bin m bins above the window's first,
// r = it_f - (the window's first bin)
__device__ __forceinline__ float tof_weight(const StirTof &F, float r, int m)
{
    const float dist = F_MUL(fabsf(F_SUB(r, (float)m)), F.width);
    const float x1 = F_DIV(F_ADD(dist, F.half), F.denom);
    const float x2 = F_DIV(F_SUB(dist, F.half), F.denom);
    return F_MUL(0.5f, F_SUB(erff(x1), erff(x2)));
}

// The bin of slot k: slots hold the bins base .. base + NW - 1 on an ascending walk (DIR > 0), and
// base - NW + 1 .. base on a descending one
template <int NW, int DIR>
__device__ __forceinline__ int tof_slot_bin(int base, int k)
{
    return DIR > 0 ? base + k : base - (NW - 1) + k;
}

// The weights of the window [lo, hi] into the slots (0 outside it); returns their sum, lowest bin
// first.  Neighbouring bins share an edge, and the edges of a plane are a bin width apart in
// erf's argument: the n bins of a window take n + 1 erf (tof_erf) and no division, where
// tof_weight (libparallelproj's; the wide kernels keep it) takes 2n erff and 2n divisions.  So the
// weights differ from the CPU's by float32 rounding.  A bin's edges are its centre -+ width / 2.  A slot
// outside the window takes the window's nearest edge (its index clamped), so that its two edges
// are equal and its weight 0 without a test per slot.
template <int NW, int DIR>
__device__ __forceinline__ float tof_slot_weights(const StirTof &F, int base, int lo, int hi, float w[NW])
{
    // edge of bin m's lower side, in erf's argument: (m - r - 1/2) * width / (sqrt(2) sigma)
    const float offset = F_ADD(F_SUB(F.it_f, (float)lo), 0.5f);
    const int first = tof_slot_bin<NW, DIR>(base, 0) - lo; // slot 0's lower edge, from lo's
    float lower = 0.0f, total = 0.0f;
#pragma unroll
    for (int k = 0; k <= NW; ++k)
    {
        // slot k's lower edge (k == NW: slot NW - 1's upper edge), within the window's edges
        const int j = min(max(first + k, 0), hi + 1 - lo);
        const float edge = tof_erf(F_MUL(F_SUB((float)j, offset), F.edge_step));
        if (k > 0)
        {
            w[k - 1] = F_MUL(0.5f, F_SUB(edge, lower));
            total = F_ADD(total, w[k - 1]);
        }
        lower = edge;
    }
    return total;
}

__device__ __forceinline__ void tof_store(float *__restrict__ out, int bin, int first, int nb, long long n_lors,
                                          long long idx, float v)
{
    const int t = bin - first;
    if (t >= 0 && t < nb)
        out[(long long)t * n_lors + idx] = v;
}

__device__ __forceinline__ float tof_load(const float *__restrict__ values, int bin, int first, int nb,
                                          long long n_lors, long long idx)
{
    const int t = bin - first;
    return (t >= 0 && t < nb) ? values[(long long)t * n_lors + idx] : 0.0f;
}

// Zero the part's bins in [lo, hi)
__device__ __forceinline__ void tof_zero(float *__restrict__ out, int lo, int hi, int first, int nb, long long n_lors,
                                         long long idx)
{
    for (int b = max(lo, first); b < min(hi, first + nb); ++b)
        out[(long long)(b - first) * n_lors + idx] = 0.0f;
}

template <int NW, int DIR>
__device__ void tof_forward_walk(const float *__restrict__ img, StirWalk &W, StirTof &F, int first, int nb,
                                 long long n_lors, long long idx, float *__restrict__ out)
{
    float acc[NW];
#pragma unroll
    for (int k = 0; k < NW; ++k)
        acc[k] = 0.0f;
    int lo, hi;
    tof_window(F, lo, hi);
    int base = DIR > 0 ? lo : hi;
    // the part's bins the walk's windows never reach before its first
    if (DIR > 0)
        tof_zero(out, first, base, first, nb, n_lors, idx);
    else
        tof_zero(out, base + 1, first + nb, first, nb, n_lors, idx);
    for (int i = W.L.istart; i <= W.L.iend; ++i)
    {
        const float sample = F_MUL(W.L.cf, stir_sample(img, W, i));
        tof_at_plane(F, (float)i);
        tof_window(F, lo, hi);
        // bins leaving the window are complete: write them once
        while (DIR > 0 ? base < lo : base > hi)
        {
            if (DIR > 0)
            {
                tof_store(out, base, first, nb, n_lors, idx, acc[0]);
#pragma unroll
                for (int k = 0; k < NW - 1; ++k)
                    acc[k] = acc[k + 1];
                acc[NW - 1] = 0.0f;
                ++base;
            }
            else
            {
                tof_store(out, base, first, nb, n_lors, idx, acc[NW - 1]);
#pragma unroll
                for (int k = NW - 1; k > 0; --k)
                    acc[k] = acc[k - 1];
                acc[0] = 0.0f;
                --base;
            }
        }
        float w[NW];
        const float total = tof_slot_weights<NW, DIR>(F, base, lo, hi, w);
        const float to_add = F_DIV(sample, tof_divisor(total));
        // (a slot outside the window has weight 0: its sum is unchanged)
#pragma unroll
        for (int k = 0; k < NW; ++k)
            acc[k] = F_ADD(acc[k], F_MUL(to_add, w[k]));
    }
    // the last window, then the bins beyond it
#pragma unroll
    for (int k = 0; k < NW; ++k)
        tof_store(out, tof_slot_bin<NW, DIR>(base, k), first, nb, n_lors, idx, acc[k]);
    if (DIR > 0)
        tof_zero(out, base + NW, first + nb, first, nb, n_lors, idx);
    else
        tof_zero(out, first, base - NW + 1, first, nb, n_lors, idx);
}

template <int NW, int DIR>
__device__ void tof_back_walk(const float *__restrict__ values, StirWalk &W, StirTof &F, int first, int nb,
                              long long n_lors, long long idx, int planes, float *__restrict__ img)
{
    int lo, hi;
    tof_window(F, lo, hi);
    int base = DIR > 0 ? lo : hi;
    float v[NW];
#pragma unroll
    for (int k = 0; k < NW; ++k)
        v[k] = tof_load(values, tof_slot_bin<NW, DIR>(base, k), first, nb, n_lors, idx);
    // every lane runs over all planes of its principal axis, adding on its own: the lanes of a
    // warp (neighbouring LORs) then add into the same plane together, into a few contiguous
    // runs of voxels, which reach L2 as a few requests instead of one per lane and corner
    for (int i = 0; i < planes; ++i)
    {
        if (i < W.L.istart || i > W.L.iend)
            continue;
        tof_at_plane(F, (float)i);
        tof_window(F, lo, hi);
        // bins entering the window: load each once
        while (DIR > 0 ? base < lo : base > hi)
        {
            if (DIR > 0)
            {
#pragma unroll
                for (int k = 0; k < NW - 1; ++k)
                    v[k] = v[k + 1];
                ++base;
                v[NW - 1] = tof_load(values, base + NW - 1, first, nb, n_lors, idx);
            }
            else
            {
#pragma unroll
                for (int k = NW - 1; k > 0; --k)
                    v[k] = v[k - 1];
                --base;
                v[0] = tof_load(values, base - NW + 1, first, nb, n_lors, idx);
            }
        }
        float w[NW];
        const float total = tof_slot_weights<NW, DIR>(F, base, lo, hi, w);
        float gathered = 0.0f;
#pragma unroll
        for (int k = 0; k < NW; ++k)
            gathered = F_ADD(gathered, F_MUL(v[k], w[k]));
        const float val = F_MUL(W.L.cf, F_DIV(gathered, tof_divisor(total)));
        if (val != 0.0f)
            stir_scatter(img, W, i, val);
    }
}

#define STIR_TOF_ARGS                                                                                        \
    STIR_PARTS_ARGS, int n0, int n1, int n2, float o0, float o1, float o2, float v0, float v1, float v2,             \
        float rescale, float width, float sigma, float n_sigmas, float c0, int first, int nb

template <int NW>
__global__ void fwd_stir_tof(STIR_TOF_ARGS, const float *__restrict__ img, float *__restrict__ out)
{
    StirPart P;
    if (!stir_part_of_thread(STIR_PARTS_PASS, P))
        return;
    out += nb * P.lor0;
    StirWalk W;
    StirTof F;
    if (!stir_tof_walk(P, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, width, sigma, n_sigmas, c0, W, F))
    {
        tof_zero(out, first, first + nb, first, nb, P.n_lors, P.idx);
        return;
    }
    if (F.at > 0.0f)
        tof_forward_walk<NW, 1>(img, W, F, first, nb, P.n_lors, P.idx, out);
    else
        tof_forward_walk<NW, -1>(img, W, F, first, nb, P.n_lors, P.idx, out);
}

// the TOF values of LOR idx sum to 0 (libparallelproj skips such a LOR), summed as on the CPU
__device__ __forceinline__ bool tof_lor_is_zero(const float *__restrict__ values, int nb, long long n_lors,
                                                long long idx)
{
    float total = 0.0f;
    for (int t = 0; t < nb; ++t)
        total = F_ADD(total, values[(long long)t * n_lors + idx]);
    return total == 0.0f;
}

template <int NW>
__global__ void back_stir_tof(STIR_TOF_ARGS, const float *__restrict__ values, float *__restrict__ img,
                              float *__restrict__ img_xy)
{
    StirPart P;
    if (!stir_part_of_thread(STIR_PARTS_PASS, P))
        return;
    values += nb * P.lor0;
    StirWalk W;
    StirTof F;
    if (tof_lor_is_zero(values, nb, P.n_lors, P.idx) ||
        !stir_tof_walk(P, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, width, sigma, n_sigmas, c0, W, F))
        return;
    float *target;
    const int planes = stir_back_target(W, n0, n1, n2, img, img_xy, target);
    if (F.at > 0.0f)
        tof_back_walk<NW, 1>(values, W, F, first, nb, P.n_lors, P.idx, planes, target);
    else
        tof_back_walk<NW, -1>(values, W, F, first, nb, P.n_lors, P.idx, planes, target);
}

// Windows of up to STIR_TOF_WIDE_MAX bins: the weights of a plane in local memory, the output
// added per plane, as the CPU reference does.
__device__ __forceinline__ float tof_wide_weights(const StirTof &F, int lo, int hi, float *w)
{
    const float r = F_SUB(F.it_f, (float)lo);
    float total = 0.0f;
    for (int m = 0; m <= hi - lo; ++m)
    {
        w[m] = tof_weight(F, r, m);
        total = F_ADD(total, w[m]);
    }
    return total;
}

extern "C" __global__ void fwd_stir_tof_wide(STIR_TOF_ARGS, const float *__restrict__ img, float *__restrict__ out)
{
    StirPart P;
    if (!stir_part_of_thread(STIR_PARTS_PASS, P))
        return;
    const long long n_lors = P.n_lors, idx = P.idx;
    out += nb * P.lor0;
    tof_zero(out, first, first + nb, first, nb, n_lors, idx);
    StirWalk W;
    StirTof F;
    if (!stir_tof_walk(P, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, width, sigma, n_sigmas, c0, W, F))
        return;
    float w[STIR_TOF_WIDE_MAX];
    for (int i = W.L.istart; i <= W.L.iend; ++i)
    {
        const float sample = F_MUL(W.L.cf, stir_sample(img, W, i));
        int lo, hi;
        tof_at_plane(F, (float)i);
        tof_window(F, lo, hi);
        const float to_add = F_DIV(sample, tof_divisor(tof_wide_weights(F, lo, hi, w)));
        for (int b = max(lo, first); b <= min(hi, first + nb - 1); ++b)
        {
            float *o = out + (long long)(b - first) * n_lors + idx;
            *o = F_ADD(*o, F_MUL(to_add, w[b - lo]));
        }
    }
}

extern "C" __global__ void back_stir_tof_wide(STIR_TOF_ARGS, const float *__restrict__ values,
                                              float *__restrict__ img, float *__restrict__ img_xy)
{
    StirPart P;
    if (!stir_part_of_thread(STIR_PARTS_PASS, P))
        return;
    const long long n_lors = P.n_lors, idx = P.idx;
    values += nb * P.lor0;
    if (tof_lor_is_zero(values, nb, n_lors, idx))
        return;
    StirWalk W;
    StirTof F;
    if (!stir_tof_walk(P, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, width, sigma, n_sigmas, c0, W, F))
        return;
    float *target;
    stir_back_target(W, n0, n1, n2, img, img_xy, target);
    float w[STIR_TOF_WIDE_MAX];
    for (int i = W.L.istart; i <= W.L.iend; ++i)
    {
        int lo, hi;
        tof_at_plane(F, (float)i);
        tof_window(F, lo, hi);
        const float total = tof_wide_weights(F, lo, hi, w);
        float gathered = 0.0f;
        for (int b = max(lo, first); b <= min(hi, first + nb - 1); ++b)
            gathered = F_ADD(gathered, F_MUL(values[(long long)(b - first) * n_lors + idx], w[b - lo]));
        const float val = F_MUL(W.L.cf, F_DIV(gathered, tof_divisor(total)));
        if (val != 0.0f)
            stir_scatter(target, W, i, val);
    }
}
