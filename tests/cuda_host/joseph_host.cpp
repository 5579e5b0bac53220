// stirgpu/kernels/cuda/joseph.cu + joseph_tof.cu (the TOF kernels with STIR's numerics)
// compiled for the host (tests/test_kernels_cuda_host.py).  The kernels use one thread per LOR
// and no shared memory, so a launch is its threads run one after the other; the float32
// intrinsics are the host's IEEE float operations (built with -ffp-contract=off; __fmaf_rn the
// host's fused multiply-add), the wide kernels' erff the host libm's and atomicAdd a plain
// addition.  Each kernel is a C function of its own parameters, named after it (fwd_stir_tof_8
// for fwd_stir_tof<8>), taking the number of blocks first (a chunk's parts' blocks: one launch
// per chunk); tof_erf_ is tof_erf on an array.
#include <algorithm>
#include <cmath>
#include <cstring>

struct dim3
{
    unsigned x = 0, y = 0, z = 0;
};
static dim3 threadIdx, blockIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define STIR_THREADS SG_STIR_THREADS
using std::max;
using std::min;
#define __restrict__
#define __fadd_rn(a, b) ((float)(a) + (float)(b))
#define __fsub_rn(a, b) ((float)(a) - (float)(b))
#define __fmul_rn(a, b) ((float)(a) * (float)(b))
#define __fdiv_rn(a, b) ((float)(a) / (float)(b))
#define __fsqrt_rn(a) std::sqrt((float)(a))
#define __dadd_rn(a, b) ((double)(a) + (double)(b))
#define __dmul_rn(a, b) ((double)(a) * (double)(b))
#define __double2float_rn(a) ((float)(a))
#define __fmaf_rn(a, b, c) std::fma((float)(a), (float)(b), (float)(c))
inline int __float_as_int(float v)
{
    int i;
    std::memcpy(&i, &v, sizeof i);
    return i;
}
inline float __int_as_float(int v)
{
    float f;
    std::memcpy(&f, &v, sizeof f);
    return f;
}
// x + y rounded down: the nearest float, one float lower where it lies above the exact sum (the
// sum's rounding error, exactly, by Knuth's two-sum)
inline float __fadd_rd(float a, float b)
{
    const float s = a + b;
    const float bb = s - a;
    const float err = (a - (s - bb)) + (b - bb);
    return err < 0.0f ? std::nextafter(s, -INFINITY) : s;
}
// a launch's threads run one after the other: each is a warp of one lane, and the back
// projection adds each lane's corners itself (STIR_HOST_LANES: no warp sums, warp_segsum.cuh,
// whose intrinsics are declared here only for its template to compile)
inline unsigned __match_any_sync(unsigned, int) { return 1u; }
inline int __reduce_min_sync(unsigned, int v) { return v; }
inline int __reduce_max_sync(unsigned, int v) { return v; }
#define STIR_HOST_LANES 1
template <typename T>
T __shfl_up_sync(unsigned, T v, int);
template <typename T>
T __shfl_sync(unsigned, T v, int);
unsigned __ballot_sync(unsigned, bool);
int __clz(unsigned);
inline float atomicAdd(float *p, float v)
{
    const float old = *p;
    *p = old + v;
    return old;
}

#include "joseph.cu"
#include "joseph_tof.cu"

#define SG_PARTS_PARAMS const float *X, const unsigned char *H, const float *A, const long long *parts, int n_parts
#define SG_TOF_PARAMS                                                                                             \
    unsigned blocks, SG_PARTS_PARAMS, int n0, int n1, int n2, float o0, float o1, float o2, float v0, float v1,  \
        float v2, float rescale, float width, float sigma, float n_sigmas, float c0, int first, int nb, float *a,   \
        float *b
#define SG_TOF_PASS                                                                                               \
    X, H, A, parts, n_parts, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, width, sigma, n_sigmas, c0, first, nb, a, b
#define SG_TOF_PARAMS_BACK SG_TOF_PARAMS, float *c
#define SG_TOF_PASS_BACK SG_TOF_PASS, c

template <typename F>
static void sg_serial(unsigned blocks, F kernel)
{
    blockDim.x = SG_STIR_THREADS;
    for (unsigned bl = 0; bl < blocks; ++bl)
        for (unsigned t = 0; t < SG_STIR_THREADS; ++t)
        {
            blockIdx.x = bl;
            threadIdx.x = t;
            kernel();
        }
}

#define SG_TOF_ENTRIES(NW)                                                                                        \
    extern "C" void fwd_stir_tof_##NW(SG_TOF_PARAMS) { sg_serial(blocks, [&] { fwd_stir_tof<NW>(SG_TOF_PASS); }); } \
    extern "C" void back_stir_tof_##NW(SG_TOF_PARAMS_BACK) { sg_serial(blocks, [&] { back_stir_tof<NW>(SG_TOF_PASS_BACK); }); }

SG_TOF_ENTRIES(4)
SG_TOF_ENTRIES(5)
SG_TOF_ENTRIES(6)
SG_TOF_ENTRIES(7)
SG_TOF_ENTRIES(8)
SG_TOF_ENTRIES(10)
SG_TOF_ENTRIES(12)
SG_TOF_ENTRIES(14)
SG_TOF_ENTRIES(16)
SG_TOF_ENTRIES(20)
SG_TOF_ENTRIES(24)
SG_TOF_ENTRIES(32)
extern "C" void fwd_stir_tof_wide_(SG_TOF_PARAMS) { sg_serial(blocks, [&] { fwd_stir_tof_wide(SG_TOF_PASS); }); }
extern "C" void back_stir_tof_wide_(SG_TOF_PARAMS_BACK) { sg_serial(blocks, [&] { back_stir_tof_wide(SG_TOF_PASS_BACK); }); }

// the non-TOF kernels of joseph.cu, and its endpoints (benchmarks/kernels.py's baseline input)
extern "C" void fwd_stir_(unsigned blocks, SG_PARTS_PARAMS, const float *img, const float *framed_a,
                          const float *framed_b, int n0, int n1, int n2, float o0, float o1, float o2, float v0,
                          float v1, float v2, float rescale, float *out)
{
    sg_serial(blocks, [&] {
        fwd_stir(X, H, A, parts, n_parts, img, framed_a, framed_b, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, out);
    });
}
extern "C" void back_stir_(unsigned blocks, SG_PARTS_PARAMS, const float *values, float *img, float *img_xy, int n0,
                           int n1, int n2, float o0, float o1, float o2, float v0, float v1, float v2, float rescale,
                           int z_lo, int z_hi)
{
    sg_serial(blocks, [&] {
        back_stir(X, H, A, parts, n_parts, values, img, img_xy, n0, n1, n2, o0, o1, o2, v0, v1, v2, rescale, z_lo,
                  z_hi);
    });
}
// the explicit-endpoint kernels of joseph.cu
#define SG_LORS_FRAME int n0, int n1, int n2, float o0, float o1, float o2, float v0, float v1, float v2
#define SG_LORS_FRAME_PASS n0, n1, n2, o0, o1, o2, v0, v1, v2
extern "C" void fwd_lors_(unsigned blocks, const float *xs, const float *xe, long long n, const float *img,
                          const float *framed_a, const float *framed_b, SG_LORS_FRAME, float *out)
{
    sg_serial(blocks, [&] { fwd_lors(xs, xe, n, img, framed_a, framed_b, SG_LORS_FRAME_PASS, out); });
}
extern "C" void back_lors_(unsigned blocks, const float *xs, const float *xe, long long n, const float *values,
                           float *img, float *img_xy, SG_LORS_FRAME)
{
    sg_serial(blocks, [&] { back_lors(xs, xe, n, values, img, img_xy, SG_LORS_FRAME_PASS); });
}
extern "C" void endpoints_stir_(unsigned blocks, SG_PARTS_PARAMS, float rescale, float *start, float *end)
{
    sg_serial(blocks, [&] { endpoints_stir(X, H, A, parts, n_parts, rescale, start, end); });
}

// the register kernels' erf, element by element
extern "C" void tof_erf_(int n, const float *x, float *y)
{
    for (int i = 0; i < n; ++i)
        y[i] = tof_erf(x[i]);
}
