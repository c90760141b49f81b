// LayerNorm, fp16 in and out, fp32 arithmetic: a straightforward first version.
//
// One block of 256 threads per row. Pass 1: each thread strides over the row with scalar loads and
// sums x; a shared-memory tree reduction gives the mean. Pass 2: the same for (x - mean)^2, giving the
// (biased) variance. Pass 3: each thread strides over the row again and writes
// y = (x - mean) * rstd * w + b.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdint.h>

#define THREADS 256

__device__ float block_sum(float v, float* partial) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float total = partial[0];
    __syncthreads();  // partial[] is reused by the next reduction
    return total;
}

__global__ void layernorm_kernel(const __half* __restrict__ x, const __half* __restrict__ w,
                                 const __half* __restrict__ b, __half* __restrict__ y, int64_t N, float eps) {
    __shared__ float partial[THREADS];
    const int64_t row = hipBlockIdx_x;
    const __half* xr = x + row * N;
    __half* yr = y + row * N;

    float acc = 0.0f;
    for (int64_t i = hipThreadIdx_x; i < N; i += hipBlockDim_x) acc += __half2float(xr[i]);
    const float mean = block_sum(acc, partial) / (float)N;

    acc = 0.0f;
    for (int64_t i = hipThreadIdx_x; i < N; i += hipBlockDim_x) {
        const float d = __half2float(xr[i]) - mean;
        acc += d * d;
    }
    const float var = block_sum(acc, partial) / (float)N;
    const float rstd = rsqrtf(var + eps);

    for (int64_t i = hipThreadIdx_x; i < N; i += hipBlockDim_x) {
        const float v = (__half2float(xr[i]) - mean) * rstd;
        yr[i] = __float2half(v * __half2float(w[i]) + __half2float(b[i]));
    }
}

extern "C" int entry(const __half* x, const __half* w, const __half* b, __half* y,
                     int64_t M, int64_t N, double eps, hipStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    hipLaunchKernelGGL(layernorm_kernel, dim3((unsigned)M), dim3(THREADS), 0, stream, x, w, b, y, N, (float)eps);
    return (int)hipGetLastError();
}
