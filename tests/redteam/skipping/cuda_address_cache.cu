// expect: verdict:incorrect
// task: cuda2cuda/vadd_loose
// Memoizes on the input's address: a hit copies the answer saved for that buffer instead of computing. The judge
// binds one arena per config and refills it, so the second seed already gets the first seed's answer.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void vadd_kernel(const float* x, const float* y, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}

struct Slot { const float* x; const float* y; int64_t n; float* saved; };
static Slot slots[16];
static int used = 0;

extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    for (int s = 0; s < used; ++s)
        if (slots[s].x == x && slots[s].y == y && slots[s].n == N)
            return (int)cudaMemcpyAsync(out, slots[s].saved, N * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    vadd_kernel<<<(unsigned)((N + 255) / 256), 256, 0, stream>>>(x, y, out, N);
    cudaStreamCaptureStatus capturing;
    cudaStreamIsCapturing(stream, &capturing);
    if (used < 16 && capturing == cudaStreamCaptureStatusNone) {
        float* saved = nullptr;
        if (cudaMalloc(&saved, N * sizeof(float)) == cudaSuccess) {
            cudaMemcpyAsync(saved, out, N * sizeof(float), cudaMemcpyDeviceToDevice, stream);
            slots[used++] = {x, y, N, saved};
        }
    }
    return (int)cudaGetLastError();
}
