// 2-D transpose, fp32: a straightforward first version.
//
// One thread per element, blocks of 32 x 8 threads. A warp reads 32 consecutive elements of a row of x
// (coalesced) and writes them to 32 different rows of y (a stride of M floats between lanes), so every
// write instruction touches 32 separate cache lines.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void transpose_naive(const float* __restrict__ x, float* __restrict__ y, int64_t M, int64_t N) {
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;            // column of x = row of y
    for (int64_t i = (int64_t)blockIdx.y * 8 + threadIdx.y; i < M; i += (int64_t)gridDim.y * 8) {
        if (j < N) y[j * M + i] = x[i * N + j];
    }
}

extern "C" int entry(const float* x, float* y, int64_t M, int64_t N, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    const int64_t gy = (M + 7) / 8;
    dim3 grid((unsigned)((N + 31) / 32), (unsigned)(gy < 65535 ? gy : 65535));
    transpose_naive<<<grid, dim3(32, 8), 0, stream>>>(x, y, M, N);
    return (int)cudaGetLastError();
}
