// Decode-time GEMV, y[B, N] = x[B, K] W[N, K]^T, bf16 in and out, fp32 accumulation: a straightforward
// first version.
//
// One block of 128 threads per output row n (a row of W). Each thread strides over K with scalar loads:
// one W element, then the matching element of every token's x (B scalar loads), B fp32 accumulators in
// registers. A shared-memory tree reduction per token gives the B sums of the row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 128
#define MAX_B 16

__global__ void gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ W,
                            __nv_bfloat16* __restrict__ y, int B, int64_t N, int64_t K) {
    __shared__ float partial[MAX_B][THREADS];
    const int64_t n = blockIdx.x;
    const __nv_bfloat16* wr = W + n * K;

    float acc[MAX_B];
#pragma unroll
    for (int b = 0; b < MAX_B; ++b) acc[b] = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
        const float w = __bfloat162float(wr[k]);
#pragma unroll
        for (int b = 0; b < MAX_B; ++b)
            if (b < B) acc[b] += w * __bfloat162float(x[b * K + k]);
    }
#pragma unroll
    for (int b = 0; b < MAX_B; ++b) partial[b][threadIdx.x] = acc[b];
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            for (int b = 0; b < B; ++b) partial[b][threadIdx.x] += partial[b][threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x < B) y[threadIdx.x * N + n] = __float2bfloat16(partial[threadIdx.x][0]);
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y,
                     int64_t B, int64_t N, int64_t K, cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    if (N > 0x7fffffff) return (int)cudaErrorInvalidValue;
    for (int64_t b0 = 0; b0 < B; b0 += MAX_B) {  // tokens in groups of at most MAX_B
        const int nb = (int)(B - b0 < MAX_B ? B - b0 : MAX_B);
        gemv_kernel<<<(unsigned)N, THREADS, 0, stream>>>(x + b0 * K, W, y + b0 * N, nb, N, K);
    }
    return (int)cudaGetLastError();
}
