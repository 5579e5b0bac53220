// STIR's neighbourhood priors (Quadratic, Relative Difference, Logcosh) on the GPU: the value,
// the gradient and the Hessian times a vector, one thread per voxel walking its neighbourhood.
//
// docs/priors.md states the formulas; stirgpu/kernels/prior_cpu.py (numba) is the reference
// these kernels mirror operation for operation: every pair term and every sum in double, the
// same expressions in the same order (compiled with --fmad=false, as numba does not contract
// either), results rounded once to the output's type T (float or double).  So the two agree
// to float32 rounding (to double rounding before the store).
//
// Template parameters: KIND (0 Quadratic, 1 Relative Difference with p1 = gamma, p2 =
// epsilon, 2 Logcosh with p1 = scalar; prior_api's constants), T the image type, I the index
// type (int, or long long for images of 2^31 voxels or more: prior_cuda.py decides).
// The image is C-ordered (z, y, x) of n = nz * ny * nx voxels; the weights a float array
// (wz, wy, wx) of odd sizes centred on the voxel; a pair whose neighbour lies outside the
// image is left out, as in STIR.  kappa (has_kappa != 0) multiplies each pair term by
// kappa_j kappa_k.
//
// Launch: 1-D grid of ceil(n / SG_PRIOR_THREADS) blocks of SG_PRIOR_THREADS threads.

#ifndef SG_PRIOR_THREADS
#define SG_PRIOR_THREADS 256
#endif

// +infinity in double (NVRTC has no INFINITY without host headers)
#define SG_INF __longlong_as_double(0x7ff0000000000000LL)

// STIR's LogcoshPrior::logcosh switches to |t| + log(1/2) from |t| = 30 on
#define SG_LOGCOSH_LINEAR_FROM 30.0

template <int KIND>
__device__ __forceinline__ double pair_value(double xj, double xk, double p1, double p2) {
    const double d = xj - xk;
    if (KIND == 0) return d * d / 4.0;
    if (KIND == 1) {
        if (p2 == 0.0 && xj == 0.0 && xk == 0.0) return 0.0;
        return 0.5 * d * d / (xj + xk + p1 * fabs(d) + p2);
    }
    const double t = fabs(p1 * d);  // STIR halves the whole Logcosh sum
    const double lc = t < SG_LOGCOSH_LINEAR_FROM ? log(cosh(t)) : t + log(0.5);
    return lc / (p1 * p1) / 2.0;
}

template <int KIND>
__device__ __forceinline__ double pair_d10(double xj, double xk, double p1, double p2) {
    const double d = xj - xk;
    if (KIND == 0) return d;
    if (KIND == 1) {
        if (p2 == 0.0 && xj == 0.0 && xk == 0.0) return 0.0;
        const double den = xj + xk + p1 * fabs(d) + p2;
        return d * (p1 * fabs(d) + xj + 3.0 * xk + 2.0 * p2) / (den * den);
    }
    return tanh(p1 * d) / p1;
}

template <int KIND>
__device__ __forceinline__ void pair_d20_d11(double xj, double xk, double p1, double p2, double& d20,
                                             double& d11) {
    if (KIND == 0) {
        d20 = 1.0;
        d11 = -1.0;
    } else if (KIND == 1) {
        if (xj > 0.0 || xk > 0.0 || p2 > 0.0) {
            const double den = xj + xk + p1 * fabs(xj - xk) + p2;
            const double den3 = den * den * den;
            const double bk = 2.0 * xk + p2;
            d20 = 2.0 * (bk * bk) / den3;
            d11 = -2.0 * (2.0 * xj + p2) * bk / den3;
        } else {  // STIR returns INFINITY for both at xj = xk = 0 without epsilon
            d20 = SG_INF;
            d11 = SG_INF;
        }
    } else {
        const double s = 1.0 / cosh((xj - xk) * p1);
        d20 = s * s;
        d11 = -(s * s);
    }
}

// The voxel (z, y, x) of linear index j, or false past the image's end.
template <typename I>
__device__ __forceinline__ bool voxel_of_thread(I n, I ny, I nx, I& j, I& z, I& y, I& x) {
    j = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
    if (j >= n) return false;
    x = j % nx;
    const I t = j / nx;
    y = t % ny;
    z = t / ny;
    return true;
}

// The sum over voxel j's neighbourhood of OP(xj, xk, w, kappa product, k, centre), with
// prior_cpu's loop order (z, then y, then x offsets) and its bounds rule.
template <typename T, typename I, typename Op>
__device__ __forceinline__ double neighbourhood_sum(const T* __restrict__ image, const T* __restrict__ kappa,
                                                    int has_kappa, const float* __restrict__ weights, int wz,
                                                    int wy, int wx, I nz, I ny, I nx, I z, I y, I x,
                                                    double xj, Op op) {
    const int hz = wz / 2, hy = wy / 2, hx = wx / 2;
    const double kj = has_kappa ? static_cast<double>(kappa[(z * ny + y) * nx + x]) : 1.0;
    double acc = 0.0;
    for (int a = 0; a < wz; ++a) {
        const I zk = z + a - hz;
        if (zk < 0 || zk >= nz) continue;
        for (int b = 0; b < wy; ++b) {
            const I yk = y + b - hy;
            if (yk < 0 || yk >= ny) continue;
            const I row = (zk * ny + yk) * nx;
            for (int c = 0; c < wx; ++c) {
                const I xk = x + c - hx;
                if (xk < 0 || xk >= nx) continue;
                const I k = row + xk;
                const double w = static_cast<double>(weights[(a * wy + b) * wx + c]);
                double t;
                if (!op(w, xj, static_cast<double>(image[k]), k, a == hz && b == hy && c == hx, t)) continue;
                if (has_kappa) t *= kj * static_cast<double>(kappa[k]);
                acc += t;
            }
        }
    }
    return acc;
}

template <int KIND>
struct ValueTerm {
    double p1, p2;
    template <typename I>
    __device__ bool operator()(double w, double xj, double xk, I, bool, double& t) const {
        t = w * pair_value<KIND>(xj, xk, p1, p2);
        return true;
    }
};

template <int KIND>
struct GradientTerm {
    double p1, p2;
    template <typename I>
    __device__ bool operator()(double w, double xj, double xk, I, bool, double& t) const {
        t = w * pair_d10<KIND>(xj, xk, p1, p2);
        return true;
    }
};

template <int KIND, typename T>
struct HessianTerm {
    double p1, p2, vj;
    const T* __restrict__ vector;
    template <typename I>
    __device__ bool operator()(double w, double xj, double xk, I k, bool centre, double& t) const {
        if (w == 0.0) return false;  // STIR skips zero weights here (not in value or gradient)
        double d20, d11;
        pair_d20_d11<KIND>(xj, xk, p1, p2, d20, d11);
        if (centre)
            t = w * d20 * vj;  // a non-zero centre weight: STIR's diagonal-only term
        else
            t = w * (d20 * vj + d11 * static_cast<double>(vector[k]));
        return true;
    }
};

// partials[block] = the sum over the block's voxels of their value terms (a fixed tree in
// shared memory: the same number on every run).
template <int KIND, typename T, typename I>
__global__ void __launch_bounds__(SG_PRIOR_THREADS)
    prior_value_blocks(const T* __restrict__ image, const T* __restrict__ kappa, int has_kappa,
                       const float* __restrict__ weights, int wz, int wy, int wx, double p1, double p2, I nz,
                       I ny, I nx, double* __restrict__ partials) {
    __shared__ double sums[SG_PRIOR_THREADS];
    I j, z, y, x;
    double acc = 0.0;
    if (voxel_of_thread<I>(nz * ny * nx, ny, nx, j, z, y, x))
        acc = neighbourhood_sum<T, I>(image, kappa, has_kappa, weights, wz, wy, wx, nz, ny, nx, z, y, x,
                                      static_cast<double>(image[j]), ValueTerm<KIND>{p1, p2});
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = SG_PRIOR_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

// out = scale * gradient (overwritten)
template <int KIND, typename T, typename I>
__global__ void __launch_bounds__(SG_PRIOR_THREADS)
    prior_gradient(const T* __restrict__ image, const T* __restrict__ kappa, int has_kappa,
                   const float* __restrict__ weights, int wz, int wy, int wx, double p1, double p2, double scale,
                   I nz, I ny, I nx, T* __restrict__ out) {
    I j, z, y, x;
    if (!voxel_of_thread<I>(nz * ny * nx, ny, nx, j, z, y, x)) return;
    const double acc = neighbourhood_sum<T, I>(image, kappa, has_kappa, weights, wz, wy, wx, nz, ny, nx, z, y,
                                               x, static_cast<double>(image[j]), GradientTerm<KIND>{p1, p2});
    out[j] = static_cast<T>(acc * scale);
}

// out += scale * H(image) vector (STIR's accumulate_Hessian_times_input)
template <int KIND, typename T, typename I>
__global__ void __launch_bounds__(SG_PRIOR_THREADS)
    prior_hessian_times(const T* __restrict__ image, const T* __restrict__ vector, const T* __restrict__ kappa,
                        int has_kappa, const float* __restrict__ weights, int wz, int wy, int wx, double p1,
                        double p2, double scale, I nz, I ny, I nx, T* __restrict__ out) {
    I j, z, y, x;
    if (!voxel_of_thread<I>(nz * ny * nx, ny, nx, j, z, y, x)) return;
    const HessianTerm<KIND, T> term{p1, p2, static_cast<double>(vector[j]), vector};
    const double acc = neighbourhood_sum<T, I>(image, kappa, has_kappa, weights, wz, wy, wx, nz, ny, nx, z, y,
                                               x, static_cast<double>(image[j]), term);
    out[j] = static_cast<T>(static_cast<double>(out[j]) + acc * scale);
}
