// Dynamic per-token FP8 (e4m3) quantization, bf16 in: a straightforward first version.
//
// One block of 256 threads per row. Pass 1: each thread strides over the row with scalar loads and keeps
// the max of |x|; a shared-memory tree reduction gives the row's amax, from which every thread computes
// the scale (thread 0 writes it). Pass 2: each thread strides over the row again, reading x again, and
// writes q = e4m3(clamp(x / scale, -448, 448)) one byte at a time.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define THREADS 256
#define FP8_MAX 448.0f

__global__ void fp8_quant_kernel(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                                 float* __restrict__ scale, int64_t K) {
    __shared__ float partial[THREADS];
    const int64_t row = blockIdx.x;
    const __nv_bfloat16* xr = x + row * K;
    uint8_t* qr = q + row * K;

    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < K; i += blockDim.x) amax = fmaxf(amax, fabsf(__bfloat162float(xr[i])));
    partial[threadIdx.x] = amax;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
    }
    const float s = fmaxf(partial[0] / FP8_MAX, 1.0f / (FP8_MAX * 512.0f));
    if (threadIdx.x == 0) scale[row] = s;

    for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
        const float v = fminf(fmaxf(__bfloat162float(xr[i]) / s, -FP8_MAX), FP8_MAX);
        qr[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
    }
}

extern "C" int entry(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t M, int64_t K,
                     cudaStream_t stream) {
    if (M <= 0 || K <= 0) return 0;
    if (M > 0x7fffffff) return (int)cudaErrorInvalidValue;
    fp8_quant_kernel<<<(unsigned)M, THREADS, 0, stream>>>(x, q, scale, K);
    return (int)cudaGetLastError();
}
