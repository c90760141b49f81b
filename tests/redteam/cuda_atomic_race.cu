// expect: runtime:nondeterminism verdict:pass
// task: cuda2cuda/vadd_loose
// Sums uneven parts of each result with float atomics from 32 threads: right within the tolerance, different bits run to run.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void zero(float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}

// 32 lanes split each element's value into uneven parts and add them with atomics in whatever order the
// hardware serves them: float addition is not associative, so the last bits change from run to run.
__global__ void vadd_parts(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (i < n) {
        float v = 2.0f * x[i] + y[i];
        float w = (lane + 1) * (2.0f / (32 * 33));  // sums to 1
        atomicAdd(out + i, v * w);
    }
}

extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    zero<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(out, N);
    vadd_parts<<<(unsigned)((N * 32 + 255) / 256), 256, 0, stream>>>(x, y, out, N);
    return (int)cudaGetLastError();
}
