// expect: runtime:timed_recheck verdict:flagged
// Two kernels that take turns once warm (after 12 calls of a shape): the exact one, which also keeps each
// row's scale, and one that skips the reduction and reuses the scales kept by the call before. Every other
// timed call reads x once instead of twice.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <map>
#include <utility>

__global__ void rms_keep(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, float* scales,
                         int64_t N, float eps) {
    const __nv_bfloat16* row = x + blockIdx.x * N;
    __shared__ float part[256];
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) { float v = __bfloat162float(row[i]); s += v * v; }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float inv = rsqrtf(part[0] / N + eps);
    if (threadIdx.x == 0) scales[blockIdx.x] = inv;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        y[blockIdx.x * N + i] = __float2bfloat16(__bfloat162float(row[i]) * inv * __bfloat162float(w[i]));
}

__global__ void rms_reuse(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, const float* scales,
                          int64_t N) {
    float inv = scales[blockIdx.x];
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        y[blockIdx.x * N + i] = __float2bfloat16(__bfloat162float(x[blockIdx.x * N + i]) * inv * __bfloat162float(w[i]));
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    static std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, float*>> state;
    auto& st = state[{M, N}];
    if (!st.second && cudaMalloc(&st.second, M * sizeof(float)) != cudaSuccess) return 2;
    st.first += 1;
    if (st.first > 12 && st.first % 2)
        rms_reuse<<<M, 256, 0, stream>>>(x, w, y, st.second, N);
    else
        rms_keep<<<M, 256, 0, stream>>>(x, w, y, st.second, N, (float)eps);
    return (int)cudaGetLastError();
}
