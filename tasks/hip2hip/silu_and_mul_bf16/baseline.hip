// SiLU-and-mul, bf16 in and out, fp32 arithmetic: a straightforward first version (the shape of vLLM's
// original act_and_mul kernel).
//
// One block per row (token), min(H, 1024) threads; each thread strides over the row with scalar 2-byte
// loads of the gate a = x[row, j] and the up value b = x[row, H + j], and writes
// y[row, j] = a / (1 + exp(-a)) * b.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <math.h>
#include <stdint.h>

__global__ void silu_and_mul_kernel(const __hip_bfloat16* __restrict__ x, __hip_bfloat16* __restrict__ y,
                                    int64_t H) {
    const int64_t row = hipBlockIdx_x;
    const __hip_bfloat16* xr = x + row * 2 * H;
    __hip_bfloat16* yr = y + row * H;
    for (int64_t j = hipThreadIdx_x; j < H; j += hipBlockDim_x) {
        const float a = __bfloat162float(xr[j]);
        const float b = __bfloat162float(xr[H + j]);
        yr[j] = __float2bfloat16(a / (1.0f + expf(-a)) * b);
    }
}

extern "C" int entry(const __hip_bfloat16* x, __hip_bfloat16* y, int64_t M, int64_t H, hipStream_t stream) {
    if (M <= 0 || H <= 0) return 0;
    const int threads = (int)(H < 1024 ? H : 1024);
    hipLaunchKernelGGL(silu_and_mul_kernel, dim3((unsigned)M), dim3(threads), 0, stream, x, y, H);
    return (int)hipGetLastError();
}
