// expect: runtime:nondeterminism verdict:pass
// task: cuda2cuda/vadd_loose
// Sums uneven parts of each result with float atomics from 32 blocks: right within the tolerance, different bits run to run.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void zero(float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.0f;
}

// 32 blocks, side by side on different SMs, each add one uneven part of every element of their tile with
// atomics, in whatever order the memory system serves them: float addition is not associative, so the
// last bits change from run to run. (One warp's atomics on one address are served in lane order, which
// is why the parts come from different blocks.)
__global__ void vadd_parts(const float* x, const float* y, float* out, int64_t n) {
    const int part = blockIdx.x;  // 0..31, the fastest-varying block index: neighbours in launch order
    const float w = (part + 1) * (2.0f / (32 * 33));  // the 32 weights sum to 1
    for (int64_t i = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.y * blockDim.x)
        atomicAdd(out + i, (2.0f * x[i] + y[i]) * w);
}

extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    zero<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(out, N);
    const int64_t tiles = (N + 255) / 256;
    vadd_parts<<<dim3(32, (unsigned)(tiles < 65535 ? tiles : 65535)), 256, 0, stream>>>(x, y, out, N);
    return (int)cudaGetLastError();
}
