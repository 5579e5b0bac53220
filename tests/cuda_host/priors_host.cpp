// priors.cu's kernels as C functions of the host (see cuda_shim.h), for ctypes.  Each function
// takes (kind, f64, blocks) and then exactly the parameters of the kernel it runs, so that the
// argument tuple stirgpu.kernels.prior_cuda.kernel_arguments builds for cupy can be passed as is:
// <kernel>_i32 for the int instantiations, <kernel>_i64 for the long long ones.
#include <type_traits>

#include "cuda_shim.h"
#include "priors.cu"

// f(kind constant, a value of the image type) for the kind and type asked for
template <typename F>
void with_types(int kind, int f64, F f) {
    auto by_type = [&](auto k) {
        if (f64)
            f(k, double{});
        else
            f(k, float{});
    };
    if (kind == 0) by_type(std::integral_constant<int, 0>{});
    if (kind == 1) by_type(std::integral_constant<int, 1>{});
    if (kind == 2) by_type(std::integral_constant<int, 2>{});
}

template <typename I>
void value_blocks(int kind, int f64, unsigned blocks, const void* image, const void* kappa, int has_kappa,
                  const float* w, int wz, int wy, int wx, double p1, double p2, I nz, I ny, I nx, double* partials) {
    with_types(kind, f64, [&](auto k, auto t) {
        using T = decltype(t);
        auto im = static_cast<const T*>(image);
        auto ka = static_cast<const T*>(kappa);
        sg_launch(blocks, [=] {
            prior_value_blocks<decltype(k)::value, T, I>(im, ka, has_kappa, w, wz, wy, wx, p1, p2, nz, ny, nx,
                                                         partials);
        });
    });
}

template <typename I>
void gradient(int kind, int f64, unsigned blocks, const void* image, const void* kappa, int has_kappa,
              const float* w, int wz, int wy, int wx, double p1, double p2, double scale, I nz, I ny, I nx,
              void* out) {
    with_types(kind, f64, [&](auto k, auto t) {
        using T = decltype(t);
        auto im = static_cast<const T*>(image);
        auto ka = static_cast<const T*>(kappa);
        auto o = static_cast<T*>(out);
        sg_launch(blocks, [=] {
            prior_gradient<decltype(k)::value, T, I>(im, ka, has_kappa, w, wz, wy, wx, p1, p2, scale, nz, ny, nx, o);
        });
    });
}

template <typename I>
void hessian_times(int kind, int f64, unsigned blocks, const void* image, const void* vector, const void* kappa,
                   int has_kappa, const float* w, int wz, int wy, int wx, double p1, double p2, double scale, I nz,
                   I ny, I nx, void* out) {
    with_types(kind, f64, [&](auto k, auto t) {
        using T = decltype(t);
        auto im = static_cast<const T*>(image);
        auto v = static_cast<const T*>(vector);
        auto ka = static_cast<const T*>(kappa);
        auto o = static_cast<T*>(out);
        sg_launch(blocks, [=] {
            prior_hessian_times<decltype(k)::value, T, I>(im, v, ka, has_kappa, w, wz, wy, wx, p1, p2, scale, nz,
                                                          ny, nx, o);
        });
    });
}

#define SG_HOST_ENTRY_POINTS(SUFFIX, I)                                                                           \
    extern "C" void prior_value_blocks_##SUFFIX(int kind, int f64, unsigned blocks, const void* image,          \
                                                const void* kappa, int has_kappa, const float* w, int wz, int wy, \
                                                int wx, double p1, double p2, I nz, I ny, I nx,                   \
                                                double* partials) {                                               \
        value_blocks<I>(kind, f64, blocks, image, kappa, has_kappa, w, wz, wy, wx, p1, p2, nz, ny, nx, partials); \
    }                                                                                                             \
    extern "C" void prior_gradient_##SUFFIX(int kind, int f64, unsigned blocks, const void* image,              \
                                            const void* kappa, int has_kappa, const float* w, int wz, int wy,     \
                                            int wx, double p1, double p2, double scale, I nz, I ny, I nx,         \
                                            void* out) {                                                          \
        gradient<I>(kind, f64, blocks, image, kappa, has_kappa, w, wz, wy, wx, p1, p2, scale, nz, ny, nx, out);   \
    }                                                                                                             \
    extern "C" void prior_hessian_times_##SUFFIX(int kind, int f64, unsigned blocks, const void* image,         \
                                                 const void* vector, const void* kappa, int has_kappa,            \
                                                 const float* w, int wz, int wy, int wx, double p1, double p2,    \
                                                 double scale, I nz, I ny, I nx, void* out) {                     \
        hessian_times<I>(kind, f64, blocks, image, vector, kappa, has_kappa, w, wz, wy, wx, p1, p2, scale, nz,    \
                         ny, nx, out);                                                                            \
    }

SG_HOST_ENTRY_POINTS(i32, int)
SG_HOST_ENTRY_POINTS(i64, long long)
