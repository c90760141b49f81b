// SGEMM, fp32: C = A @ B, a straightforward first version (the textbook shared-memory tiling).
//
// One thread per element of C, blocks of 16 x 16 threads. For each 16-wide step along K the block stages
// a 16 x 16 tile of A and of B in shared memory, then every thread does 16 multiply-adds, each reading
// one value of A and one of B from shared memory. Edge tiles are zero-filled.
#include <cuda_runtime.h>
#include <stdint.h>

#define TS 16

__global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                            int64_t M, int64_t N, int64_t K) {
    __shared__ float As[TS][TS];
    __shared__ float Bs[TS][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * TS + ty;
    const int64_t col = (int64_t)blockIdx.x * TS + tx;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TS) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TS; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}

extern "C" int entry(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                     cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    const int64_t gy = (M + TS - 1) / TS;
    if (gy > 65535) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)((N + TS - 1) / TS), (unsigned)gy);
    sgemm_tiled<<<grid, dim3(TS, TS), 0, stream>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
