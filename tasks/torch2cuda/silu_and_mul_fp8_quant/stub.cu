// SwiGLU (SiLU-and-mul) fused with dynamic per-token FP8 e4m3 quantization: write your kernel here.
//
//     y[t, j]  = bf16(bf16(silu(x[t, j])) * x[t, D + j]),   silu(a) = a / (1 + exp(-a))  (fp32 math)
//     scale[t] = max(max_j |y[t, j]| / 448, 1 / (448 * 512))                              (fp32)
//     q[t, j]  = e4m3(y[t, j] / scale[t])      (round to nearest even, saturating at +-448)
//     x: [T, 2*D] bf16, q: [T, D] float8_e4m3fn, scale: [T] fp32
// Launch on `stream`, return (int)cudaGetLastError().
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" int entry(const __nv_bfloat16* x, __nv_fp8_e4m3* q, float* scale, int64_t T, int64_t D,
                     cudaStream_t stream) {
    (void)x; (void)q; (void)scale; (void)T; (void)D; (void)stream;
    return (int)cudaErrorNotSupported;  // not implemented: a nonzero return is reported as an error
}
