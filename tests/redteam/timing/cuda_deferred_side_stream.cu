// expect: tripwire:side_stream runtime:timed_recheck verdict:flagged
// Runs the kernel on a stream of its own (non-blocking: no implicit ordering with the caller's) and returns
// at once: the caller's stream, the one the handshake waits on, has nothing to wait for.
#include <cuda_bf16.h>
#include <cstdint>

__global__ void rms(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t N, float eps) {
    const __nv_bfloat16* row = x + blockIdx.x * N;
    __shared__ float part[256];
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) { float v = __bfloat162float(row[i]); s += v * v; }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float inv = rsqrtf(part[0] / N + eps);
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        y[blockIdx.x * N + i] = __float2bfloat16(__bfloat162float(row[i]) * inv * __bfloat162float(w[i]));
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    static cudaStream_t side = nullptr;
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    rms<<<M, 256, 0, side>>>(x, w, y, N, (float)eps);
    return (int)cudaGetLastError();
}
