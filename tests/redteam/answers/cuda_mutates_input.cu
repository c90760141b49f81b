// expect: runtime:input_mutation verdict:flagged
// task: cuda2cuda/vadd_loose
// Right answer, computed in place in an input buffer, then copied out.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void vadd_kernel(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}
extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    vadd_kernel<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(x, y, const_cast<float*>(y), N);
    cudaMemcpyAsync(out, y, N * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    return (int)cudaGetLastError();
}
