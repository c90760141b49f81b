// expect: verdict:incorrect
// task: cuda2cuda/vadd_loose
// Computes on the first call only, trusting the output buffer to still hold an answer afterwards.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void vadd_kernel(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}

static int calls = 0;

extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    if (calls++ == 0) vadd_kernel<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(x, y, out, N);
    return (int)cudaGetLastError();
}
