// STIR's kernelised image of KOSMAPOSL (KOSMAPOSLReconstruction::compute_kernelised_image, its
// compact form) on the GPU: one thread per voxel walking its neighbourhood.
//
// stirgpu/kernels/kernelised/cpu.py (numba) states the formula and is the reference this kernel
// mirrors operation for operation: each kernel value in double, the voxel's sum accumulated in a
// float (STIR's += into a float image), the division by the double sum of the kernel values
// rounded once more; compiled with --fmad=false, as numba does not contract either.  So the two
// agree to float32 rounding (exp is CUDA's, within an ulp of the host's).
//
// I is the index type (int, or long long for images of 2^31 voxels or more: kernelised/cuda.py
// decides).  Images are C-ordered (z, y, x) floats of n = nz * ny * nx voxels; `anatomical` holds
// n_anatomical such images one after the other; `distance` is the (2 hz + 1, 2 hy + 1, 2 hx + 1)
// float table of STIR's distances, centred.
//
// Launch: 1-D grid of ceil(n / blockDim.x) blocks.

__device__ __forceinline__ double sg_kernel_term(double diff, double sq_sigma_int, double sq_denominator,
                                                 double sq_distance, double sq_sigma_dist) {
    // STIR's calc_kernel_compact
    const double norm_sq = (diff / sq_denominator / sq_sigma_int) * (diff / 2.0) + sq_distance / sq_sigma_dist / 2.0;
    return exp(-norm_sq);
}

template <typename I>
__global__ void kernelised_image(const float* image, const float* alpha, const float* anatomical, int n_anatomical,
                                 const double* sq_sigma_m, const double* sq_sd, double sq_sigma_p, double sq_sigma_dp,
                                 double sq_sigma_dm, const float* distance, int hz, int hy, int hx, int hybrid,
                                 I nz, I ny, I nx, float* out) {
    const I n = nz * ny * nx;
    const I j = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x);
    if (j >= n) return;
    const I x = j % nx;
    const I y = (j / nx) % ny;
    const I z = j / (nx * ny);
    const double a_j = static_cast<double>(alpha[j]);
    if (hybrid && a_j == 0.0) {  // STIR skips every neighbour
        out[j] = 0.0f;
        return;
    }
    const I dz0 = z - hz < 0 ? -z : -static_cast<I>(hz);
    const I dz1 = z + hz > nz - 1 ? nz - 1 - z : static_cast<I>(hz);
    const I dy0 = y - hy < 0 ? -y : -static_cast<I>(hy);
    const I dy1 = y + hy > ny - 1 ? ny - 1 - y : static_cast<I>(hy);
    const I dx0 = x - hx < 0 ? -x : -static_cast<I>(hx);
    const I dx1 = x + hx > nx - 1 ? nx - 1 - x : static_cast<I>(hx);
    const I wy = 2 * hy + 1, wx = 2 * hx + 1;
    float acc = 0.0f;
    double kernel_sum = 0.0;
    for (I dz = dz0; dz <= dz1; ++dz) {
        for (I dy = dy0; dy <= dy1; ++dy) {
            for (I dx = dx0; dx <= dx1; ++dx) {
                const double d = static_cast<double>(distance[((dz + hz) * wy + (dy + hy)) * wx + (dx + hx)]);
                const double sq_d = d * d;
                const I l = j + (dz * ny + dy) * nx + dx;
                double emission = 1.0;
                if (hybrid) {
                    const double diff = a_j - static_cast<double>(alpha[l]);
                    emission = sg_kernel_term(diff, sq_sigma_p, a_j * a_j, sq_d, sq_sigma_dp);
                }
                double anatomical_kernel = 1.0;
                for (int i = 0; i < n_anatomical; ++i) {
                    const float* m = anatomical + static_cast<I>(i) * n;
                    const double diff = static_cast<double>(m[j]) - static_cast<double>(m[l]);
                    anatomical_kernel *= sg_kernel_term(diff, sq_sigma_m[i], sq_sd[i], sq_d, sq_sigma_dm);
                }
                const double kernel = anatomical_kernel * emission;
                acc = static_cast<float>(static_cast<double>(acc) + kernel * static_cast<double>(image[l]));
                kernel_sum += kernel;
            }
        }
    }
    out[j] = a_j == 0.0 ? acc : static_cast<float>(static_cast<double>(acc) / kernel_sum);  // (non-hybrid: undivided)
}
