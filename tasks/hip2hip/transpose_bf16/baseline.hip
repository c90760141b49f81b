// Batched transpose y[b, j, i] = x[b, i, j], bf16: a straightforward first version.
//
// One thread per element, blocks of 32 x 8 threads, each block a 8 x 32 patch of x (blockIdx.x numbers
// the patches of a matrix, blockIdx.y the matrix): threadIdx.x runs along a row of x, so the reads are
// coalesced; each thread writes its element straight to its transposed place in y.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

__global__ void transpose_kernel(const __hip_bfloat16* __restrict__ x, __hip_bfloat16* __restrict__ y,
                                 int64_t M, int64_t N, int64_t patches_n) {
    const int64_t pn = hipBlockIdx_x % patches_n, pm = hipBlockIdx_x / patches_n;
    const int64_t j = pn * 32 + hipThreadIdx_x;  // column of x
    const int64_t i = pm * 8 + hipThreadIdx_y;   // row of x
    const int64_t b = hipBlockIdx_y;
    if (i < M && j < N) y[b * M * N + j * M + i] = x[b * M * N + i * N + j];
}

extern "C" int entry(const __hip_bfloat16* x, __hip_bfloat16* y, int64_t B, int64_t M, int64_t N,
                     hipStream_t stream) {
    if (B <= 0 || M <= 0 || N <= 0) return 0;
    const int64_t patches_n = (N + 31) / 32, patches_m = (M + 7) / 8;
    if (patches_n * patches_m > INT32_MAX || B > 65535) return (int)hipErrorInvalidValue;
    const dim3 block(32, 8);
    const dim3 grid((unsigned)(patches_n * patches_m), (unsigned)B);
    hipLaunchKernelGGL(transpose_kernel, grid, block, 0, stream, x, y, M, N, patches_n);
    return (int)hipGetLastError();
}
