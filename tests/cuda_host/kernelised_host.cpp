// kernelised.cu's kernel as C functions of the host (see cuda_shim.h), for ctypes.  Each takes the
// number of blocks and then exactly the kernel's parameters, so that the argument tuple
// stirgpu.kernels.kernelised.cuda.kernel_arguments builds for cupy can be passed as is:
// kernelised_image_i32 for the int instantiation, kernelised_image_i64 for the long long one.
#include "cuda_shim.h"
#include "kernelised.cu"

template <typename I>
void run(unsigned blocks, const float* image, const float* alpha, const float* anatomical, int n_anatomical,
         const double* sq_sigma_m, const double* sq_sd, double sq_sigma_p, double sq_sigma_dp, double sq_sigma_dm,
         const float* distance, int hz, int hy, int hx, int hybrid, I nz, I ny, I nx, float* out) {
    sg_launch(blocks, [=] {
        kernelised_image<I>(image, alpha, anatomical, n_anatomical, sq_sigma_m, sq_sd, sq_sigma_p, sq_sigma_dp,
                            sq_sigma_dm, distance, hz, hy, hx, hybrid, nz, ny, nx, out);
    });
}

#define SG_ENTRY(SUFFIX, I)                                                                                        \
    extern "C" void kernelised_image_##SUFFIX(unsigned blocks, const float* image, const float* alpha,             \
                                              const float* anatomical, int n_anatomical, const double* sq_sigma_m, \
                                              const double* sq_sd, double sq_sigma_p, double sq_sigma_dp,          \
                                              double sq_sigma_dm, const float* distance, int hz, int hy, int hx,   \
                                              int hybrid, I nz, I ny, I nx, float* out) {                          \
        run<I>(blocks, image, alpha, anatomical, n_anatomical, sq_sigma_m, sq_sd, sq_sigma_p, sq_sigma_dp,        \
               sq_sigma_dm, distance, hz, hy, hx, hybrid, nz, ny, nx, out);                                        \
    }

SG_ENTRY(i32, int)
SG_ENTRY(i64, long long)
