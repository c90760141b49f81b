// Per-head RMSNorm of q and k, then NeoX RoPE, on a fused bf16 qkv projection (Qwen3): write your kernel here.
//
//     x = head h of token t: qkv[t, h*D : (h+1)*D]  (h < Hq: a query head; Hq <= h < Hq + Hk: a key head)
//     n[i] = bf16( bf16(x[i] * rsqrt(mean_j x[j]^2 + eps)) * w[i] )        w = q_weight or k_weight
//     out[i]       = bf16( n[i] * cos_i - n[i + D/2] * sin_i )             i < D/2, fp32 math
//     out[i + D/2] = bf16( n[i + D/2] * cos_i + n[i] * sin_i )
//     cos_i = cos_sin_cache[positions[t], i], sin_i = cos_sin_cache[positions[t], D/2 + i]
//     qkv: [T, (Hq + 2*Hk) * D] bf16, q_out: [T, Hq, D], k_out: [T, Hk, D] bf16, cos_sin_cache: [P, D] fp32
// Launch on `stream`, return (int)cudaGetLastError().
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" int entry(const int64_t* positions, const __nv_bfloat16* qkv, const __nv_bfloat16* q_weight,
                     const __nv_bfloat16* k_weight, const float* cos_sin_cache, __nv_bfloat16* q_out,
                     __nv_bfloat16* k_out, int64_t T, int64_t Hq, int64_t Hk, int64_t D, double eps,
                     cudaStream_t stream) {
    (void)positions; (void)qkv; (void)q_weight; (void)k_weight; (void)cos_sin_cache; (void)q_out; (void)k_out;
    (void)T; (void)Hq; (void)Hk; (void)D; (void)eps; (void)stream;
    return (int)cudaErrorNotSupported;  // not implemented: a nonzero return is reported as an error
}
