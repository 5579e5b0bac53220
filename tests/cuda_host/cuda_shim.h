// The few CUDA features stirgpu/kernels/cuda/priors.cu uses, emulated on the host, so that its
// kernels can be run and checked on a machine without a GPU (tests/test_kernels_prior_cuda_host.py).
// Each block runs as SG_PRIOR_THREADS std::threads meeting at a std::barrier for __syncthreads;
// blocks run one after the other (so a function-static array serves as __shared__ memory).
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim;
inline std::barrier<>* sg_block_barrier = nullptr;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

inline void __syncthreads() { sg_block_barrier->arrive_and_wait(); }
inline double __longlong_as_double(long long v) {
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
}
using std::cosh;
using std::fabs;
using std::log;
using std::tanh;

// Run kernel() as a 1-D grid of `blocks` blocks of SG_PRIOR_THREADS threads.
template <typename F>
void sg_launch(unsigned blocks, F kernel) {
    blockDim.x = SG_PRIOR_THREADS;
    for (unsigned b = 0; b < blocks; ++b) {
        std::barrier<> barrier(SG_PRIOR_THREADS);
        sg_block_barrier = &barrier;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < SG_PRIOR_THREADS; ++t)
            threads.emplace_back([=] {
                blockIdx.x = b;
                threadIdx.x = t;
                kernel();
            });
        for (auto& t : threads) t.join();
    }
}
