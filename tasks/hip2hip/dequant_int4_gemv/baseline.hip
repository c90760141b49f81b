// Int4 weight-only GEMV (group 128), fp16 activations, fp32 accumulation: a straightforward first version.
//
// One block of 128 threads per output column n (a row of the weight). Each thread strides over the row's
// packed words: it loads a word (8 codes), the group's scale and zero point, dequantizes the 8 codes to
// w = (q - zero) * scale in fp32, and for every token b multiplies them with x[b, k] (scalar fp16 loads)
// into one fp32 accumulator per token. A shared-memory tree reduction per token gives y[b, n].
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdint.h>

#define THREADS 128
#define GROUP 128
#define MAX_B 8

__global__ void gemv_int4_kernel(const __half* __restrict__ x, const int32_t* __restrict__ qweight,
                                 const __half* __restrict__ scales, const __half* __restrict__ zeros,
                                 __half* __restrict__ y, int64_t B, int64_t N, int64_t K) {
    __shared__ float partial[MAX_B][THREADS];
    const int64_t n = hipBlockIdx_x;
    const int64_t words = K / 8, groups = K / GROUP;
    float acc[MAX_B];
    for (int b = 0; b < MAX_B; ++b) acc[b] = 0.0f;
    for (int64_t j = hipThreadIdx_x; j < words; j += hipBlockDim_x) {
        const uint32_t word = (uint32_t)qweight[n * words + j];
        const int64_t g = (j * 8) / GROUP;
        const float s = __half2float(scales[n * groups + g]);
        const float z = __half2float(zeros[n * groups + g]);
        for (int e = 0; e < 8; ++e) {
            const float w = ((float)((word >> (4 * e)) & 15u) - z) * s;
            const int64_t k = j * 8 + e;
#pragma unroll
            for (int b = 0; b < MAX_B; ++b)
                if (b < B) acc[b] += w * __half2float(x[b * K + k]);
        }
    }
    for (int b = 0; b < MAX_B; ++b) partial[b][hipThreadIdx_x] = acc[b];
    __syncthreads();
    for (int s = hipBlockDim_x / 2; s > 0; s >>= 1) {
        if ((int)hipThreadIdx_x < s)
            for (int b = 0; b < MAX_B; ++b) partial[b][hipThreadIdx_x] += partial[b][hipThreadIdx_x + s];
        __syncthreads();
    }
    if (hipThreadIdx_x < B) y[hipThreadIdx_x * N + n] = __float2half(partial[hipThreadIdx_x][0]);
}

extern "C" int entry(const __half* x, const int32_t* qweight, const __half* scales, const __half* zeros,
                     __half* y, int64_t B, int64_t N, int64_t K, hipStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    if (B > MAX_B || K % GROUP != 0) return (int)hipErrorInvalidValue;
    hipLaunchKernelGGL(gemv_int4_kernel, dim3((unsigned)N), dim3(THREADS), 0, stream, x, qweight, scales, zeros,
                       y, B, N, K);
    return (int)hipGetLastError();
}
