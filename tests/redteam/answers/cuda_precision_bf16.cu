// expect: runtime:precision verdict:flagged
// task: cuda2cuda/vadd_loose
// fp32 inputs rounded to bf16 before the arithmetic: under the task's loose tolerance, far from float64.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>

__global__ void vadd_kernel(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float a = __bfloat162float(__float2bfloat16(x[i])), b = __bfloat162float(__float2bfloat16(y[i]));
        out[i] = 2.0f * a + b;
    }
}
extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    vadd_kernel<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(x, y, out, N);
    return (int)cudaGetLastError();
}
