// expect: verdict:incorrect
// task: cuda2cuda/vadd_loose
// Approximates y by a constant under a loose tolerance: one input stream saved.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void vadd_kernel(const float* x, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}

extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    vadd_kernel<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(x, out, N);
    return (int)cudaGetLastError();
}
