// expect: verdict:defeated
// Right answer; pins what it reads in L2: the largest persisting carve-out the device allows
// (cudaLimitPersistingL2CacheSize) and an access-policy window over x and w on the given stream, so the
// harness's L2 flush between calls (ordinary lines) cannot evict them and the next call reads from L2.
// Void by design: the judge resets persisting lines before each batch and flushes before each call (on an
// H200 this scored 0.53x the baseline, 2026-12-01). tests/test_gpu.py times the expert with and without the
// window on an input that fits the carve-out.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
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
    int dev = 0, max_persist = 0, max_window = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&max_persist, cudaDevAttrMaxPersistingL2CacheSize, dev);
    cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, dev);
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)max_persist);
    size_t bytes = (size_t)(M * N) * sizeof(__nv_bfloat16);
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = (void*)x;
    attr.accessPolicyWindow.num_bytes = bytes < (size_t)max_window ? bytes : (size_t)max_window;
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);
    rms<<<M, 256, 0, stream>>>(x, w, y, N, (float)eps);
    return (int)cudaGetLastError();
}
