// Fused residual add + RMSNorm, bf16 in and out, fp32 accumulation: a straightforward first version.
//
// One block of 256 threads per row. Pass 1: each thread strides over the row with scalar loads, forms
// h = bf16(x + residual), writes it to residual_out and accumulates h^2; a shared-memory tree reduction
// gives the row's sum. Pass 2: each thread strides over the row again, reading x and residual again to
// form h, and w, and writes y = h * rstd * w.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256

__global__ void fused_add_rmsnorm_kernel(const __nv_bfloat16* __restrict__ x,
                                         const __nv_bfloat16* __restrict__ residual,
                                         const __nv_bfloat16* __restrict__ w, __nv_bfloat16* __restrict__ y,
                                         __nv_bfloat16* __restrict__ residual_out, int64_t N, float eps) {
    __shared__ float partial[THREADS];
    const int64_t row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * N;
    const __nv_bfloat16* rr = residual + row * N;
    __nv_bfloat16* yr = y + row * N;
    __nv_bfloat16* hr = residual_out + row * N;

    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const __nv_bfloat16 h = __float2bfloat16(__bfloat162float(xr[i]) + __bfloat162float(rr[i]));
        hr[i] = h;
        const float v = __bfloat162float(h);
        acc += v * v;
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float rstd = rsqrtf(partial[0] / (float)N + eps);

    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
        const float v = __bfloat162float(__float2bfloat16(__bfloat162float(xr[i]) + __bfloat162float(rr[i])));
        yr[i] = __float2bfloat16(v * rstd * __bfloat162float(w[i]));
    }
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* w,
                     __nv_bfloat16* y, __nv_bfloat16* residual_out,
                     int64_t M, int64_t N, double eps, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    if (M > 0x7fffffff) return (int)cudaErrorInvalidValue;
    fused_add_rmsnorm_kernel<<<(unsigned)M, THREADS, 0, stream>>>(x, residual, w, y, residual_out, N, (float)eps);
    return (int)cudaGetLastError();
}
