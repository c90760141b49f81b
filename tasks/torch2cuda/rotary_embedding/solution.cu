// Rotary position embedding (RoPE, rotate-half style) on bf16 q and k: the expert version.
//
// Cost model (memory-bound): the floor is one read of q and k and one write of q_out and k_out,
// 2 * T * (Hq + Hk) * D * 2 bytes, plus positions and the gathered cache rows (T * D * 4 bytes, re-used
// by every head of a token from L1/L2). Llama-3-8B, 16384 tokens: ~340 MB, ~85 us at ~4 TB/s.
// Eager PyTorch (the reference) runs ~15 kernels: the gather, two cats for cos/sin, fp32 upcasts, a
// negate and a cat for rotate_half, two multiplies, an add and a downcast, for q and k each; that is
// ~12x the floor in bytes, in fp32 temporaries. Expected speedup ~6-10x on the large configs.
//
// Key ideas:
// - One fused kernel for q and k: a thread owns VEC consecutive rotation pairs (i .. i+VEC-1 paired with
//   i+D/2 ..) of one head of one token; it loads the two bf16 halves and the matching cos and sin from
//   the token's cache row, rotates in fp32, and stores both halves with one rounding each.
// - VEC = 8 (16-byte bf16 loads, 2 x float4 of cos and of sin) when D % 16 == 0 and the pointers are
//   16-byte aligned; VEC = 4 (8-byte loads) when D % 8 == 0; scalar otherwise (D/2 odd, D = 72 & co.).
// - Flat 1-D grid over T * (Hq + Hk) * (D/2/VEC) items, consecutive threads walk the pairs of a head and
//   then the heads of a token, so the loads of a warp are contiguous, and the token's cos/sin row is
//   shared by all its heads through L1. 32-bit index decomposition when it fits; 64-bit element offsets.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 256;

template <int VEC> struct alignas(2 * VEC) BfVec { __nv_bfloat16 v[VEC]; };
template <int VEC> struct alignas(4 * VEC > 16 ? 16 : 4 * VEC) FVec { float v[VEC]; };

template <int VEC, typename Index>
__global__ void __launch_bounds__(THREADS) rope_kernel(const int64_t* __restrict__ positions,
                                                       const __nv_bfloat16* __restrict__ q,
                                                       const __nv_bfloat16* __restrict__ k,
                                                       const float* __restrict__ cache,
                                                       __nv_bfloat16* __restrict__ q_out,
                                                       __nv_bfloat16* __restrict__ k_out, Index total,
                                                       Index per_token, Index hv, Index Hq, Index Hk,
                                                       int64_t D) {
    const Index i = (Index)blockIdx.x * THREADS + threadIdx.x;
    if (i >= total) return;
    const Index t = i / per_token;
    const Index r = i - t * per_token;
    const Index h = r / hv;
    const Index c = r - h * hv;
    const int64_t half = D / 2;
    const int64_t j0 = (int64_t)c * VEC;

    const __nv_bfloat16* src;
    __nv_bfloat16* dst;
    int64_t base;
    if (h < Hq) {
        base = ((int64_t)t * Hq + h) * D;
        src = q; dst = q_out;
    } else {
        base = ((int64_t)t * Hk + (h - Hq)) * D;
        src = k; dst = k_out;
    }
    const float* cs = cache + __ldg(positions + t) * D;

    const BfVec<VEC> x1 = *reinterpret_cast<const BfVec<VEC>*>(src + base + j0);
    const BfVec<VEC> x2 = *reinterpret_cast<const BfVec<VEC>*>(src + base + half + j0);
    const FVec<VEC> co = *reinterpret_cast<const FVec<VEC>*>(cs + j0);
    const FVec<VEC> si = *reinterpret_cast<const FVec<VEC>*>(cs + half + j0);

    if constexpr (VEC == 1) {
        const float a = __bfloat162float(x1.v[0]), b = __bfloat162float(x2.v[0]);
        dst[base + j0] = __float2bfloat16_rn(a * co.v[0] - b * si.v[0]);
        dst[base + half + j0] = __float2bfloat16_rn(b * co.v[0] + a * si.v[0]);
    } else {
        // Pack pairs into 32-bit words so each half is written with one 16- or 8-byte store.
        uint32_t w1[VEC / 2], w2[VEC / 2];
#pragma unroll
        for (int e = 0; e < VEC; e += 2) {
            const float a0 = __bfloat162float(x1.v[e]), b0 = __bfloat162float(x2.v[e]);
            const float a1 = __bfloat162float(x1.v[e + 1]), b1 = __bfloat162float(x2.v[e + 1]);
            const __nv_bfloat162 p1 = __floats2bfloat162_rn(a0 * co.v[e] - b0 * si.v[e],
                                                            a1 * co.v[e + 1] - b1 * si.v[e + 1]);
            const __nv_bfloat162 p2 = __floats2bfloat162_rn(b0 * co.v[e] + a0 * si.v[e],
                                                            b1 * co.v[e + 1] + a1 * si.v[e + 1]);
            w1[e / 2] = *reinterpret_cast<const uint32_t*>(&p1);
            w2[e / 2] = *reinterpret_cast<const uint32_t*>(&p2);
        }
        // __stwb: a plain write-back store, spelled as an intrinsic so nvcc keeps it one vector store.
        if constexpr (VEC == 8) {
            __stwb(reinterpret_cast<uint4*>(dst + base + j0), make_uint4(w1[0], w1[1], w1[2], w1[3]));
            __stwb(reinterpret_cast<uint4*>(dst + base + half + j0), make_uint4(w2[0], w2[1], w2[2], w2[3]));
        } else {
            static_assert(VEC == 4, "VEC is 8, 4 or 1");
            __stwb(reinterpret_cast<uint2*>(dst + base + j0), make_uint2(w1[0], w1[1]));
            __stwb(reinterpret_cast<uint2*>(dst + base + half + j0), make_uint2(w2[0], w2[1]));
        }
    }
}

template <int VEC>
int launch(const int64_t* positions, const __nv_bfloat16* q, const __nv_bfloat16* k, const float* cache,
           __nv_bfloat16* q_out, __nv_bfloat16* k_out, int64_t T, int64_t Hq, int64_t Hk, int64_t D,
           cudaStream_t s) {
    const int64_t hv = D / 2 / VEC, per_token = (Hq + Hk) * hv, total = T * per_token;
    const int64_t blocks = (total + THREADS - 1) / THREADS;
    if (blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
    if (total + THREADS < (int64_t)UINT32_MAX && Hq + Hk < (int64_t)UINT32_MAX)
        rope_kernel<VEC, uint32_t><<<(unsigned)blocks, THREADS, 0, s>>>(
            positions, q, k, cache, q_out, k_out, (uint32_t)total, (uint32_t)per_token, (uint32_t)hv,
            (uint32_t)Hq, (uint32_t)Hk, D);
    else
        rope_kernel<VEC, int64_t><<<(unsigned)blocks, THREADS, 0, s>>>(
            positions, q, k, cache, q_out, k_out, total, per_token, hv, Hq, Hk, D);
    return 0;
}

}  // namespace

extern "C" int entry(const int64_t* positions, const __nv_bfloat16* q, const __nv_bfloat16* k,
                     const float* cos_sin_cache, __nv_bfloat16* q_out, __nv_bfloat16* k_out,
                     int64_t T, int64_t Hq, int64_t Hk, int64_t D, cudaStream_t stream) {
    if (T <= 0 || Hq + Hk <= 0) return 0;
    if (D <= 0 || D % 2 != 0 || Hq < 0 || Hk < 0) return (int)cudaErrorInvalidValue;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                           reinterpret_cast<uintptr_t>(q_out) | reinterpret_cast<uintptr_t>(k_out) |
                           reinterpret_cast<uintptr_t>(cos_sin_cache);
    int rc;
    if (D % 16 == 0 && addr % 16 == 0)
        rc = launch<8>(positions, q, k, cos_sin_cache, q_out, k_out, T, Hq, Hk, D, stream);
    else if (D % 8 == 0 && addr % 16 == 0)
        rc = launch<4>(positions, q, k, cos_sin_cache, q_out, k_out, T, Hq, Hk, D, stream);
    else
        rc = launch<1>(positions, q, k, cos_sin_cache, q_out, k_out, T, Hq, Hk, D, stream);
    if (rc != 0) return rc;
    return (int)cudaGetLastError();
}
