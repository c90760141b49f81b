// MoE router gating (softmax, top-k, renormalize), fp32 in: the expert version.
//
// Cost model: compulsory traffic is one read of the logits and one write of the outputs,
// T*E*4 + T*K*12 bytes (35 MB for T=32768, E=256, K=8: ~9 us at ~4 TB/s on an H200; 0.9 MB for Mixtral's
// 16384 tokens, where one launch and one DRAM round trip dominate). The selection costs ~5 lane
// instructions per logit and round (K rounds), plus log2(G) shuffle steps per round, so large E*K sits
// near the memory floor rather than far below it. Eager PyTorch runs four or more kernels (softmax, a
// radix-select top-k with a sort, a sum, a division) with intermediates in memory; one fused kernel that
// reads each logit once is expected to be several times faster.
//
// Key ideas:
// - The softmax denominator cancels under renormalization: weights[k] = exp(v_k - m) / sum_j exp(v_j - m)
//   over the K selected logits v_j, with m the row maximum (the first selected logit). Selecting on the
//   logits gives the same experts as selecting on the probabilities (exp is increasing), so only K
//   exponentials per token are computed and no full-row sum is needed.
// - A group of G lanes (G a power of two, 1..32, never straddling a warp) owns one token; each lane holds
//   VPT logits (VPT in {4, 8, 16}, G * VPT >= E) in registers. Slot s of lane l holds expert
//   4 * (G * (s / 4) + l) + s % 4: float4 loads (one LDG.128 per 4 slots, adjacent lanes on adjacent
//   16 bytes) when E % 4 == 0 and the pointer is 16-byte aligned, otherwise scalar loads of the same
//   experts. Slots past E hold -INFINITY. The host picks large VPT (fewer shuffle steps per round) unless
//   that leaves too few threads to fill the GPU.
// - K rounds of a group argmax: each lane scans its slots in increasing expert order with a strict `>`
//   (its first maximum), then an xor butterfly merges (value, index) pairs with "larger value, or equal
//   value and smaller index", a total order, so every lane of the group ends with the same winner, the
//   smallest index among the largest values. The lane that owns the winner sets that slot to -INFINITY.
//   Logits are finite and K <= E, so every round's winner is a real, not yet selected expert. The rounds
//   produce the experts in descending order, as torch.topk(sorted=True) does.
// - In round k lane k % G keeps the winner in register kv[k / G] (the round loop is unrolled over k / G,
//   so the index is static); after the last round every lane knows the sum and writes its weights and ids:
//   the group's lanes write consecutive k, so the stores are coalesced.
// - Every control decision in the rounds depends on K only, so the warp stays converged for the full-mask
//   shuffles; tokens past T run the rounds on -INFINITY slots and write nothing.
// - No shared memory, no atomics, no allocations: one launch, graph-capture safe and deterministic.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 256;
constexpr int MAX_E = 512;                 // G = 32 lanes x VPT = 16 slots
constexpr int64_t MIN_THREADS = 1 << 17;   // ~half of the H200's resident threads (132 SMs x 2048)
constexpr unsigned FULL = 0xffffffffu;

// Expert held by slot s of lane l.
template <int G>
__device__ __forceinline__ int expert_of(int s, int l) {
    return 4 * (G * (s >> 2) + l) + (s & 3);
}

template <int G, int VPT, int KQ>
__global__ void __launch_bounds__(THREADS) moe_topk_softmax(const float* __restrict__ logits,
                                                            float* __restrict__ weights,
                                                            int64_t* __restrict__ ids, int64_t T, int E, int K,
                                                            bool vec) {
    static_assert(VPT % 4 == 0 && (G & (G - 1)) == 0 && G >= 1 && G <= 32, "bad shape");
    const int l = (int)(threadIdx.x & (G - 1));
    const int64_t t = (int64_t)blockIdx.x * (THREADS / G) + threadIdx.x / G;
    const bool live = t < T;

    float x[VPT];
#pragma unroll
    for (int s = 0; s < VPT; ++s) x[s] = -INFINITY;
    if (live) {
        const float* row = logits + t * (int64_t)E;
        if (vec) {  // E % 4 == 0 and 16-byte aligned rows: a float4 is wholly inside the row or wholly past it
#pragma unroll
            for (int j = 0; j < VPT / 4; ++j) {
                const int e0 = 4 * (G * j + l);
                if (e0 < E) {
                    const float4 v = __ldg(reinterpret_cast<const float4*>(row + e0));
                    x[4 * j] = v.x;
                    x[4 * j + 1] = v.y;
                    x[4 * j + 2] = v.z;
                    x[4 * j + 3] = v.w;
                }
            }
        } else {
#pragma unroll
            for (int s = 0; s < VPT; ++s) {
                const int e = expert_of<G>(s, l);
                if (e < E) x[s] = __ldg(row + e);
            }
        }
    }

    float m = 0.f, sum = 0.f;
    float kv[KQ];
    int ki[KQ];
#pragma unroll
    for (int q = 0; q < KQ; ++q) {
        kv[q] = 0.f;
        ki[q] = 0;
        const int rounds = min(G, K - q * G);  // rounds k = q * G + r, r < rounds (none when <= 0)
        for (int r = 0; r < rounds; ++r) {
            // This lane's first maximum: slots are in increasing expert order.
            float bv = x[0];
            int bs = 0;
#pragma unroll
            for (int s = 1; s < VPT; ++s) {
                if (x[s] > bv) { bv = x[s]; bs = s; }
            }
            const int mine = expert_of<G>(bs, l);
            float wv = bv;
            int wi = mine;
#pragma unroll
            for (int o = G / 2; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(FULL, wv, o);
                const int oi = __shfl_xor_sync(FULL, wi, o);
                if (ov > wv || (ov == wv && oi < wi)) { wv = ov; wi = oi; }
            }
            // Expert indices are distinct across the group's slots: exactly one lane owns the winner.
            const bool own = mine == wi;
#pragma unroll
            for (int s = 0; s < VPT; ++s) x[s] = (own && s == bs) ? -INFINITY : x[s];
            if (q == 0 && r == 0) m = wv;  // the first winner is the row maximum
            const float ev = expf(wv - m);
            sum += ev;
            if (r == l) { kv[q] = ev; ki[q] = wi; }
        }
    }

    if (live) {
        float* wrow = weights + t * (int64_t)K;
        int64_t* irow = ids + t * (int64_t)K;
#pragma unroll
        for (int q = 0; q < KQ; ++q) {
            const int k = q * G + l;
            if (k < K) {
                wrow[k] = kv[q] / sum;
                irow[k] = (int64_t)ki[q];
            }
        }
    }
}

template <int G, int VPT>
void launch(const float* logits, float* weights, int64_t* ids, int64_t T, int E, int K, bool vec,
            cudaStream_t stream) {
    const unsigned blocks = (unsigned)((T + THREADS / G - 1) / (THREADS / G));
    if (K <= G)  // one round per lane at most: one register of kept winners
        moe_topk_softmax<G, VPT, 1><<<blocks, THREADS, 0, stream>>>(logits, weights, ids, T, E, K, vec);
    else  // K <= E <= G * VPT: at most VPT rounds per lane
        moe_topk_softmax<G, VPT, VPT><<<blocks, THREADS, 0, stream>>>(logits, weights, ids, T, E, K, vec);
}

template <int VPT>
void launch_g(int g, const float* logits, float* weights, int64_t* ids, int64_t T, int E, int K, bool vec,
              cudaStream_t stream) {
    switch (g) {
        case 1: launch<1, VPT>(logits, weights, ids, T, E, K, vec, stream); break;
        case 2: launch<2, VPT>(logits, weights, ids, T, E, K, vec, stream); break;
        case 4: launch<4, VPT>(logits, weights, ids, T, E, K, vec, stream); break;
        case 8: launch<8, VPT>(logits, weights, ids, T, E, K, vec, stream); break;
        case 16: launch<16, VPT>(logits, weights, ids, T, E, K, vec, stream); break;
        default: launch<32, VPT>(logits, weights, ids, T, E, K, vec, stream); break;
    }
}

}  // namespace

extern "C" int entry(const float* logits, float* weights, int64_t* ids, int64_t T, int64_t E, int64_t K,
                     cudaStream_t stream) {
    if (E < 1 || E > MAX_E || K < 1 || K > E || T < 0) return (int)cudaErrorInvalidValue;
    if (T == 0) return 0;
    // Lanes per token g and slots per lane vpt, g * vpt >= E: as many slots per lane as E allows (fewer
    // shuffle steps per round), halved while that leaves too few threads to fill the GPU.
    int g = 1;
    while (g * 16 < E) g *= 2;
    int vpt = 16;
    if (g == 1) vpt = E <= 4 ? 4 : (E <= 8 ? 8 : 16);
    while (vpt > 4 && g < 32 && T * g < MIN_THREADS) { g *= 2; vpt /= 2; }
    if ((T + THREADS / g - 1) / (THREADS / g) > 0x7fffffff) return (int)cudaErrorInvalidValue;
    const bool vec = E % 4 == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
    const int e = (int)E, k = (int)K;
    if (vpt == 4) launch_g<4>(g, logits, weights, ids, T, e, k, vec, stream);
    else if (vpt == 8) launch_g<8>(g, logits, weights, ids, T, e, k, vec, stream);
    else launch_g<16>(g, logits, weights, ids, T, e, k, vec, stream);
    return (int)cudaGetLastError();
}
