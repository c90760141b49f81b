// expect: runtime:timed_recheck verdict:flagged
// A "super-batch": timed calls reach the library back to back (a harness queues a whole batch before the GPU
// runs it), while checked calls come one at a time with a synchronize between. Calls that follow the
// previous one within 400 us are part of a batch: the first of the batch computes, the rest are answered
// from it with one copy. (The runner waits for each timed call before it queues the next, so timed calls
// are a flush and a handshake apart, tens of microseconds: at 50 us the store was never used on an H200.
// A checked call comes after the reference and the comparison, which take longer. The copies are a kernel
// of its own: with cudaMemcpy they were library time, 20-75% of a call, and flagged as that on the H200.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <chrono>
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

__global__ void copy(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

static int copy_on(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream) {
    copy<<<(unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 256, 0, stream>>>(src, dst, n);
    return (int)cudaGetLastError();
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    using clock = std::chrono::steady_clock;
    static clock::time_point last{};
    static __nv_bfloat16* first = nullptr;
    static size_t cap = 0;
    size_t bytes = (size_t)(M * N) * sizeof(__nv_bfloat16);
    auto now = clock::now();
    bool batched = first && cap >= bytes && now - last < std::chrono::microseconds(400);
    int rc;
    if (batched) {
        rc = copy_on(first, y, M * N, stream);
    } else {
        rms<<<M, 256, 0, stream>>>(x, w, y, N, (float)eps);
        if (cap < bytes) { cudaFree(first); cudaMalloc(&first, bytes); cap = bytes; }
        rc = copy_on(y, first, M * N, stream);
    }
    last = clock::now();
    return rc;
}
