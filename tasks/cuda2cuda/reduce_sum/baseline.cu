// Row sums, fp32: a straightforward first version.
//
// One block of 256 threads per row. Each thread strides over the row with scalar loads and accumulates in
// fp32; a shared-memory tree reduction (log2(256) = 8 steps, a __syncthreads each) gives the row's sum,
// which thread 0 writes. Deterministic: the summation order depends only on N.
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t N) {
    __shared__ float partial[THREADS];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * N;
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) acc += xr[i];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[row] = partial[0];
}

extern "C" int entry(const float* x, float* y, int64_t M, int64_t N, cudaStream_t stream) {
    if (M <= 0) return 0;
    if (M > 0x7fffffff) return (int)cudaErrorInvalidValue;
    row_sum_kernel<<<(unsigned)M, THREADS, 0, stream>>>(x, y, N);
    return (int)cudaGetLastError();
}
