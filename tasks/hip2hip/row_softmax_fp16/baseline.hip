// Row softmax, fp16 in and out, fp32 arithmetic: a straightforward first version.
//
// One block of 256 threads per row, three passes over the row with scalar loads. Pass 1: each thread
// strides over the row and keeps the largest x; a shared-memory tree reduction gives the row max.
// Pass 2: the same for exp(x - max), giving the row sum. Pass 3: each thread strides over the row again
// and writes y = exp(x - max) / sum.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <math.h>
#include <stdint.h>

#define THREADS 256

__device__ float block_max(float v, float* partial) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
    }
    const float total = partial[0];
    __syncthreads();  // partial[] is reused by the next reduction
    return total;
}

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

__global__ void softmax_kernel(const __half* __restrict__ x, __half* __restrict__ y, int64_t N) {
    __shared__ float partial[THREADS];
    const int64_t row = hipBlockIdx_x;
    const __half* xr = x + row * N;
    __half* yr = y + row * N;

    float mx = -INFINITY;  // threads past the end of a short row keep -inf: it never wins the max
    for (int64_t i = hipThreadIdx_x; i < N; i += hipBlockDim_x) mx = fmaxf(mx, __half2float(xr[i]));
    mx = block_max(mx, partial);

    float acc = 0.0f;
    for (int64_t i = hipThreadIdx_x; i < N; i += hipBlockDim_x) acc += expf(__half2float(xr[i]) - mx);
    const float sum = block_sum(acc, partial);

    for (int64_t i = hipThreadIdx_x; i < N; i += hipBlockDim_x) {
        yr[i] = __float2half(expf(__half2float(xr[i]) - mx) / sum);
    }
}

extern "C" int entry(const __half* x, __half* y, int64_t M, int64_t N, hipStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    hipLaunchKernelGGL(softmax_kernel, dim3((unsigned)M), dim3(THREADS), 0, stream, x, y, N);
    return (int)hipGetLastError();
}
