// Matrix-vector product y = A x, fp32: a straightforward first version.
//
// One thread per output row, 128 threads per block: each thread walks its row of A from left to right
// with scalar loads and accumulates A[row, k] * x[k] in one fp32 register.
#include <hip/hip_runtime.h>
#include <stdint.h>

#define THREADS 128

__global__ void gemv_kernel(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y,
                            int64_t M, int64_t K) {
    const int64_t row = (int64_t)hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;
    if (row >= M) return;
    const float* a = A + row * K;
    float acc = 0.0f;
    for (int64_t k = 0; k < K; ++k) acc += a[k] * x[k];
    y[row] = acc;
}

extern "C" int entry(const float* A, const float* x, float* y, int64_t M, int64_t K, hipStream_t stream) {
    if (M <= 0) return 0;
    const unsigned blocks = (unsigned)((M + THREADS - 1) / THREADS);
    hipLaunchKernelGGL(gemv_kernel, dim3(blocks), dim3(THREADS), 0, stream, A, x, y, M, K);
    return (int)hipGetLastError();
}
