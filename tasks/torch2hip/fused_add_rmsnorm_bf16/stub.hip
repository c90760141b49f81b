// Fused residual add + RMSNorm, bf16: write your HIP kernel here.
//
//   h[i, j]            = bf16(x[i, j] + residual[i, j])
//   residual_out[i, j] = h[i, j]
//   rstd[i]            = 1 / sqrt(mean_j(float(h[i, j])^2) + eps)        (fp32)
//   out[i, j]          = bf16(w[j] * bf16(float(h[i, j]) * rstd[i]))
//
// x, residual, out, residual_out: [M, N] row-major, contiguous; w: [N]. out and residual_out are
// preallocated (NaN-filled): write every element. Launch on `stream`, return (int)hipGetLastError().
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

extern "C" int entry(const __hip_bfloat16* x, const __hip_bfloat16* residual, const __hip_bfloat16* w,
                     __hip_bfloat16* out, __hip_bfloat16* residual_out,
                     int64_t M, int64_t N, double eps, hipStream_t stream) {
    (void)x; (void)residual; (void)w; (void)out; (void)residual_out; (void)M; (void)N; (void)eps; (void)stream;
    return 1;  // not implemented
}
