// Per-head RMSNorm of q and k fused with NeoX RoPE on a bf16 qkv projection (Qwen3): the expert version.
//
// Cost model (memory-bound): the floor is one read of the query and key heads of qkv and one write of
// q_out and k_out, 4 bytes per element (plus the cos/sin rows, mostly L2 hits shared by a token's heads).
// Eager PyTorch runs ~20 kernels on the same data (the upcast, square, mean, scaling, downcast, gain, then
// the cos/sin gather and concatenations, the rotate_half copies, two products, the sum and the downcast):
// ~90 bytes per element moved and 20 launches, so one fused pass is many times faster on every config
// (>> 1.3x; decode batches gain from the single launch).
//
// Key ideas:
// - One warp per (token, head): a head of D = 32 * V elements is split so lane l holds V consecutive
//   elements of the first half (l < 16) or the second half (l >= 16) at the same offset; the RoPE partner of
//   every element, x[i +- D/2], is then in lane l ^ 16: one __shfl_xor_sync per element, no shared memory.
//   The sum of squares is a 5-step xor-shuffle reduction; each head's norm is independent, no barrier.
// - Query and key heads lie back to back in a qkv row, so head h of either kind starts at h * D in the row;
//   the warp picks its gain and output tensor by h < Hq. The value heads are never read.
// - Vector memory access: V bf16 per lane is a 4/8/16-byte load and store (D = 64/128/256), the cos and sin
//   of the lane's V frequencies one or two float2/float4 loads each, all issued before the reduction. A
//   scalar variant of the same kernel runs if a pointer is not aligned for them.
// - The arithmetic the reference performs: x * rsqrt(mean(x^2) + eps) in fp32 rounded to bf16, times the
//   bf16 gain rounded to bf16, then the rotation in fp32 rounded once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int WARP = 32;
constexpr int THREADS = 256;  // 8 heads per block

template <int V> struct Vec;
template <> struct Vec<2> { using T = uint32_t; };
template <> struct Vec<4> { using T = uint2; };
template <> struct Vec<8> { using T = uint4; };

template <int V, bool VL>
__device__ __forceinline__ void load_bf16(const __nv_bfloat16* __restrict__ p, float (&f)[V]) {
    if constexpr (VL) {
        const typename Vec<V>::T raw = __ldg(reinterpret_cast<const typename Vec<V>::T*>(p));
        const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
        for (int v = 0; v < V; ++v) f[v] = __bfloat162float(b[v]);
    } else {
#pragma unroll
        for (int v = 0; v < V; ++v) f[v] = __bfloat162float(p[v]);
    }
}

template <int V, bool VL>
__device__ __forceinline__ void store_bf16(__nv_bfloat16* __restrict__ p, const float (&f)[V]) {
    if constexpr (VL) {
        typename Vec<V>::T raw;
        __nv_bfloat16* b = reinterpret_cast<__nv_bfloat16*>(&raw);
#pragma unroll
        for (int v = 0; v < V; ++v) b[v] = __float2bfloat16_rn(f[v]);
        *reinterpret_cast<typename Vec<V>::T*>(p) = raw;
    } else {
#pragma unroll
        for (int v = 0; v < V; ++v) p[v] = __float2bfloat16_rn(f[v]);
    }
}

template <int V, bool VL>
__device__ __forceinline__ void load_f32(const float* __restrict__ p, float (&f)[V]) {
    if constexpr (VL && V % 4 == 0) {
#pragma unroll
        for (int v = 0; v < V; v += 4) {
            const float4 a = __ldg(reinterpret_cast<const float4*>(p + v));
            f[v] = a.x; f[v + 1] = a.y; f[v + 2] = a.z; f[v + 3] = a.w;
        }
    } else if constexpr (VL && V == 2) {
        const float2 a = __ldg(reinterpret_cast<const float2*>(p));
        f[0] = a.x; f[1] = a.y;
    } else {
#pragma unroll
        for (int v = 0; v < V; ++v) f[v] = __ldg(p + v);
    }
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// One warp per (token, head); D = 32 * V.
template <int V, bool VL>
__global__ void __launch_bounds__(THREADS) qk_norm_rope(const int64_t* __restrict__ positions,
                                                        const __nv_bfloat16* __restrict__ qkv,
                                                        const __nv_bfloat16* __restrict__ q_weight,
                                                        const __nv_bfloat16* __restrict__ k_weight,
                                                        const float* __restrict__ cos_sin_cache,
                                                        __nv_bfloat16* __restrict__ q_out,
                                                        __nv_bfloat16* __restrict__ k_out, int64_t T, int Hq, int Hk,
                                                        float eps) {
    constexpr int D = WARP * V;
    constexpr int HALF = D / 2;
    const int H = Hq + Hk;
    const int64_t gw = (int64_t)blockIdx.x * (THREADS / WARP) + threadIdx.x / WARP;
    if (gw >= T * H) return;  // whole warps leave; no barrier follows
    const int64_t t = gw / H;
    const int h = (int)(gw - t * H);
    const int lane = threadIdx.x % WARP;
    const int i0 = (lane % 16) * V;                 // frequency index of the lane's first element
    const int e0 = (lane / 16) * HALF + i0;         // its element within the head
    const bool is_q = h < Hq;

    const __nv_bfloat16* src = qkv + t * (int64_t)(Hq + 2 * Hk) * D + (int64_t)h * D + e0;
    const __nv_bfloat16* w = (is_q ? q_weight : k_weight) + e0;
    __nv_bfloat16* dst = is_q ? q_out + (t * Hq + h) * (int64_t)D + e0 : k_out + (t * Hk + (h - Hq)) * (int64_t)D + e0;
    const int64_t pos = __ldg(positions + t);
    const float* cs = cos_sin_cache + pos * D + i0;

    float x[V], g[V], c[V], s[V];
    load_bf16<V, VL>(src, x);
    load_bf16<V, VL>(w, g);
    load_f32<V, VL>(cs, c);
    load_f32<V, VL>(cs + HALF, s);

    float ss = 0.0f;
#pragma unroll
    for (int v = 0; v < V; ++v) ss = fmaf(x[v], x[v], ss);
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float r = rsqrtf(ss / (float)D + eps);

    float n[V], out[V];
#pragma unroll
    for (int v = 0; v < V; ++v) n[v] = round_bf16(round_bf16(x[v] * r) * g[v]);
    const float sign = lane < 16 ? -1.0f : 1.0f;  // out[i] = n[i] c - n[i+D/2] s; out[i+D/2] = n[i+D/2] c + n[i] s
#pragma unroll
    for (int v = 0; v < V; ++v) {
        const float p = __shfl_xor_sync(0xffffffffu, n[v], 16);
        out[v] = n[v] * c[v] + sign * p * s[v];
    }
    store_bf16<V, VL>(dst, out);
}

template <int V>
cudaError_t launch(const int64_t* positions, const __nv_bfloat16* qkv, const __nv_bfloat16* qw,
                   const __nv_bfloat16* kw, const float* cache, __nv_bfloat16* q_out, __nv_bfloat16* k_out,
                   int64_t T, int Hq, int Hk, float eps, cudaStream_t stream) {
    const int64_t warps = T * (int64_t)(Hq + Hk);
    const int64_t blocks = (warps + THREADS / WARP - 1) / (THREADS / WARP);
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
    constexpr uintptr_t b = 2 * V;                      // bytes of V bf16
    constexpr uintptr_t f = V % 4 == 0 ? 16 : 4 * V;    // bytes of the widest float load
    const bool vl = aligned(qkv, b) && aligned(qw, b) && aligned(kw, b) && aligned(q_out, b) &&
                    aligned(k_out, b) && aligned(cache, f);
    if (vl)
        qk_norm_rope<V, true><<<(unsigned)blocks, THREADS, 0, stream>>>(positions, qkv, qw, kw, cache, q_out, k_out,
                                                                        T, Hq, Hk, eps);
    else
        qk_norm_rope<V, false><<<(unsigned)blocks, THREADS, 0, stream>>>(positions, qkv, qw, kw, cache, q_out,
                                                                         k_out, T, Hq, Hk, eps);
    return cudaGetLastError();
}

}  // namespace

extern "C" int entry(const int64_t* positions, const __nv_bfloat16* qkv, const __nv_bfloat16* q_weight,
                     const __nv_bfloat16* k_weight, const float* cos_sin_cache, __nv_bfloat16* q_out,
                     __nv_bfloat16* k_out, int64_t T, int64_t Hq, int64_t Hk, int64_t D, double eps,
                     cudaStream_t stream) {
    if (T <= 0 || Hq + Hk <= 0) return 0;
    if (Hq < 0 || Hk < 0 || Hq + 2 * Hk > (1 << 20)) return (int)cudaErrorInvalidValue;
    const int hq = (int)Hq, hk = (int)Hk;
    const float e = (float)eps;
    switch (D) {
        case 64: return (int)launch<2>(positions, qkv, q_weight, k_weight, cos_sin_cache, q_out, k_out, T, hq, hk, e, stream);
        case 128: return (int)launch<4>(positions, qkv, q_weight, k_weight, cos_sin_cache, q_out, k_out, T, hq, hk, e, stream);
        case 256: return (int)launch<8>(positions, qkv, q_weight, k_weight, cos_sin_cache, q_out, k_out, T, hq, hk, e, stream);
        default: return (int)cudaErrorInvalidValue;  // the task's head sizes are 64, 128 and 256
    }
}
