// Rotary position embedding (RoPE, rotate-half style) on bf16 q and k: write your kernel here.
//
// For token t, head h, i < D/2, with c = cos_sin_cache[positions[t]] (cos in [0, D/2), sin in [D/2, D)):
//     out[t, h, i]       = x[t, h, i]       * c[i] - x[t, h, i + D/2] * c[D/2 + i]
//     out[t, h, i + D/2] = x[t, h, i + D/2] * c[i] + x[t, h, i]       * c[D/2 + i]
// for x = q -> q_out and x = k -> k_out; fp32 math, one rounding to bf16.
// Launch on `stream`, return (int)cudaGetLastError().
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" int entry(const int64_t* positions, const __nv_bfloat16* q, const __nv_bfloat16* k,
                     const float* cos_sin_cache, __nv_bfloat16* q_out, __nv_bfloat16* k_out,
                     int64_t T, int64_t Hq, int64_t Hk, int64_t D, cudaStream_t stream) {
    (void)positions; (void)q; (void)k; (void)cos_sin_cache; (void)q_out; (void)k_out;
    (void)T; (void)Hq; (void)Hk; (void)D; (void)stream;
    return (int)cudaErrorNotSupported;  // not implemented: a nonzero return is reported as an error
}
