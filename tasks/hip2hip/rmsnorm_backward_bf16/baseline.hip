// RMSNorm backward, bf16 activations, fp32 arithmetic: a straightforward first version.
//
// Two kernels. dx: one block of 256 threads per row; pass 1 strides over the row with scalar loads and
// sums g * xhat (g = dy * w, xhat = x * rstd), a shared-memory tree reduction gives the row's mean;
// pass 2 strides again and writes dx = rstd * (g - xhat * mean). dw: one thread per column, summing
// dy * xhat down all M rows in order (deterministic: no atomics).
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

#define THREADS 256

typedef __hip_bfloat16 bf16;

__device__ float block_sum(float v, float* partial) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float total = partial[0];
    __syncthreads();
    return total;
}

__global__ void rmsnorm_bwd_dx(const bf16* __restrict__ x, const bf16* __restrict__ w, const float* __restrict__ rstd,
                               const bf16* __restrict__ dy, bf16* __restrict__ dx, int64_t N) {
    __shared__ float partial[THREADS];
    const int64_t row = hipBlockIdx_x;
    const bf16* xr = x + row * N;
    const bf16* dyr = dy + row * N;
    bf16* dxr = dx + row * N;
    const float r = rstd[row];

    float acc = 0.0f;
    for (int64_t j = hipThreadIdx_x; j < N; j += hipBlockDim_x) {
        const float xhat = __bfloat162float(xr[j]) * r;
        const float g = __bfloat162float(dyr[j]) * __bfloat162float(w[j]);
        acc += g * xhat;
    }
    const float mean = block_sum(acc, partial) / (float)N;

    for (int64_t j = hipThreadIdx_x; j < N; j += hipBlockDim_x) {
        const float xhat = __bfloat162float(xr[j]) * r;
        const float g = __bfloat162float(dyr[j]) * __bfloat162float(w[j]);
        dxr[j] = __float2bfloat16(r * (g - xhat * mean));
    }
}

__global__ void rmsnorm_bwd_dw(const bf16* __restrict__ x, const float* __restrict__ rstd, const bf16* __restrict__ dy,
                               float* __restrict__ dw, int64_t M, int64_t N) {
    const int64_t j = (int64_t)hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;
    if (j >= N) return;
    float acc = 0.0f;
    for (int64_t i = 0; i < M; ++i) acc += __bfloat162float(dy[i * N + j]) * (__bfloat162float(x[i * N + j]) * rstd[i]);
    dw[j] = acc;
}

extern "C" int entry(const __hip_bfloat16* x, const __hip_bfloat16* w, const float* rstd, const __hip_bfloat16* dy,
                     __hip_bfloat16* dx, float* dw, int64_t M, int64_t N, hipStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    hipLaunchKernelGGL(rmsnorm_bwd_dx, dim3((unsigned)M), dim3(THREADS), 0, stream, x, w, rstd, dy, dx, N);
    hipLaunchKernelGGL(rmsnorm_bwd_dw, dim3((unsigned)((N + THREADS - 1) / THREADS)), dim3(THREADS), 0, stream,
                       x, rstd, dy, dw, M, N);
    return (int)hipGetLastError();
}
