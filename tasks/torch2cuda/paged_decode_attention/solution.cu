// Paged decode attention (one query token per sequence, GQA, bf16 cache of 16-token blocks): the expert
// version, flash-decoding on tensor cores.
//
// Cost model (memory-bound): the floor is one read of the K and V of every cached token of every sequence,
// 2 * sum(context_lens) * Hkv * D * 2 bytes (Llama-3-8B, 64 sequences of ~2048 tokens: 537 MB, ~115 us
// at ~4.7 TB/s on an H200); q, the output and the block tables are noise. The arithmetic is 4 * G * D
// flops per token and kv head (G = Hq / Hkv query heads share it): 8 flops per byte at G = 8, too much for
// fp32 FMAs plus the reductions to stay at the memory floor, little for tensor cores. Eager PyTorch (the
// reference) gathers every slot of the block table into a dense [B, T, Hkv, D] copy, upcasts it to fp32,
// and runs two einsums, a mask and a softmax over the padded length: ~10x the floor's bytes.
//
// Key ideas:
// - Work item = one warp: (sequence b, kv head, chunk of up to 16 query heads of its group, split s of
//   the sequence's pages). The query heads of a group are the M rows of mma.sync m16n8k16 (bf16 in, fp32
//   accumulate); rows past the group are zero (G <= 8: only rows 0-7 live, the upper half of M idles,
//   which tensor cores can afford). Groups over 16 heads (MQA) take several chunks.
// - Splits: the host cuts max_blocks pages into `splits` ranges of `pps` pages so that about 16 warps per
//   SM are busy whatever the batch (long single sequences get many splits, big batches one). With one split
//   the warp writes the normalized bf16 output itself; otherwise it writes (m, l, unnormalized O) in fp32 to
//   a static scratch and a second kernel merges the splits of each (sequence, head). Splits past a short
//   sequence's pages exit at once; the merge kernel only reads the splits the sequence has. No atomics:
//   deterministic, graph-capture safe.
// - S = Q K^T per 16-token page, with the K tile going straight from 16-byte global loads into B
//   fragments: the dot product does not care about the order of the D dims, so for k-steps 2c and 2c+1
//   lane (g, t) loads dims [32c + 8t, 32c + 8t + 8) of token g (and g + 8): words 0,1 are its b0/b1 of step
//   2c, words 2,3 of step 2c+1. Q is loaded once in the same permuted order into A fragments.
// - O += P V: P comes from S's accumulators (FA2's register reuse: the C layout of two n8 tiles is the A
//   layout of one k16 step). V is token-major, but the B fragment wants token pairs: lane (g, t) loads 16
//   bytes of tokens 2t, 2t+1, 2t+8, 2t+9 at dims [64v + 8g, 64v + 8g + 8) and pairs them with byte
//   permutes; n-tile j of 64-dim block v holds dims 64v + 8n + j, so one 16-byte load feeds 8 n-tiles and
//   the accumulators of a lane are 16 consecutive dims of the output, stored with 16-byte stores.
// - Online softmax per page in the exp2 domain (scale * log2 e folded into one multiply), row max over the
//   quad with two shuffles, one rescale of O per page; tokens past the context are masked to -inf and
//   their V zeroed (a cache slot past the context may hold anything).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

namespace {

constexpr int WARPS = 4;
constexpr int THREADS = 32 * WARPS;
constexpr int PAGE = 16;                      // tokens per cache block
constexpr int TARGET_WARPS = 132 * 16;        // ~16 busy warps on each of the H200's 132 SMs
constexpr int MIN_PAGES_PER_SPLIT = 4;        // >= 64 tokens per warp: the Q load and the partial write amortize
constexpr int64_t SCRATCH_FLOATS = 1 << 22;   // 16 MB of fp32 partial outputs
constexpr int64_t SCRATCH_ROWS = SCRATCH_FLOATS / 64;

__device__ float g_o[SCRATCH_FLOATS];
__device__ float g_m[SCRATCH_ROWS];
__device__ float g_l[SCRATCH_ROWS];

__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 ld16(const __nv_bfloat16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
    return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low 16 bits
    return *reinterpret_cast<const uint32_t*>(&p);
}

// Element j of a (token a) and element j of b (token b), as one bf16x2 word: a in the low half.
__device__ __forceinline__ uint32_t pair(const uint4& a, const uint4& b, int j) {
    return __byte_perm(word(a, j >> 1), word(b, j >> 1), (j & 1) ? 0x7632 : 0x5410);
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// HI: the chunk has more than 8 query heads, so rows 8-15 of M are live.
template <int D, bool HI>
__global__ void __launch_bounds__(THREADS) paged_decode(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
    const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ block_tables,
    const int32_t* __restrict__ context_lens, __nv_bfloat16* __restrict__ out, int Hq, int Hkv, int G, int NC,
    int max_blocks, int splits, int pps, float scale_log2, int64_t items) {
    static_assert(D % 64 == 0, "D is 64, 128 or 256");
    constexpr int KS = D / 16;  // k-steps of S = Q K^T
    constexpr int KC = D / 32;  // 16-byte K loads per token (two k-steps each)
    constexpr int VB = D / 64;  // 64-dim blocks of V (8 n-tiles each)
    constexpr int VS = D == 256 ? 2 : 1;  // D = 256: two warps share an item, each owns half of the output dims
    constexpr int VW = VB / VS;           // 64-dim blocks of this warp
    const int lane = threadIdx.x & 31;
    const int64_t wi = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    if (wi >= items * VS) return;  // warp-uniform
    const int vpart = (int)(wi % VS);
    const int64_t item = wi / VS;
    const int split = (int)(item % splits);
    int64_t rest = item / splits;
    const int chunk = (int)(rest % NC);
    rest /= NC;
    const int kvh = (int)(rest % Hkv);
    const int b = (int)(rest / Hkv);
    const int ctx = __ldg(context_lens + b);
    const int npages = (ctx + PAGE - 1) / PAGE;
    const int p0 = split * pps;
    const int p1 = min(npages, p0 + pps);
    if (p0 >= p1) return;  // warp-uniform: this split is past the sequence

    const int gid = lane >> 2, t = lane & 3;
    const int glo = chunk * 16 + gid, ghi = glo + 8;  // query head within the group, rows gid and gid + 8
    const bool live_lo = glo < G, live_hi = HI && ghi < G;
    const int64_t row_lo = (int64_t)b * Hq + (int64_t)kvh * G + glo;
    const int64_t row_hi = row_lo + 8;

    // Q as A fragments, dims permuted as the K loads are: step 2c takes words 0/1, step 2c+1 words 2/3.
    uint32_t qlo0[KS], qlo1[KS], qhi0[KS], qhi1[KS];
#pragma unroll
    for (int c = 0; c < KC; ++c) {
        const uint4 z = make_uint4(0, 0, 0, 0);
        const uint4 wl = live_lo ? ld16(q + row_lo * D + 32 * c + 8 * t) : z;
        const uint4 wh = live_hi ? ld16(q + row_hi * D + 32 * c + 8 * t) : z;
        qlo0[2 * c] = wl.x; qlo1[2 * c] = wl.y; qlo0[2 * c + 1] = wl.z; qlo1[2 * c + 1] = wl.w;
        qhi0[2 * c] = wh.x; qhi1[2 * c] = wh.y; qhi0[2 * c + 1] = wh.z; qhi1[2 * c + 1] = wh.w;
    }

    const int64_t tok_stride = (int64_t)Hkv * D;
    const int64_t blk_stride = PAGE * tok_stride;
    const __nv_bfloat16* kb = k_cache + (int64_t)kvh * D;
    const __nv_bfloat16* vb = v_cache + (int64_t)kvh * D;
    const int32_t* table = block_tables + (int64_t)b * max_blocks;

    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;
    float o[VW * 8][4];
#pragma unroll
    for (int n = 0; n < VW * 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;

    // V tokens of this lane: 2t, 2t+1 (k pair b0) and 2t+8, 2t+9 (k pair b1).
    const int vt[4] = {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9};

    for (int p = p0; p < p1; ++p) {
        const int64_t blk = __ldg(table + p);
        const int valid = min(PAGE, ctx - p * PAGE);
        const __nv_bfloat16* kp = kb + blk * blk_stride;
        const __nv_bfloat16* vp = vb + blk * blk_stride;

        // K of tokens gid (n-tile 0) and gid + 8 (n-tile 1). D = 256: loaded in the S loop (registers).
        uint4 k0[D <= 128 ? KC : 1], k1[D <= 128 ? KC : 1];
        if constexpr (D <= 128) {
#pragma unroll
            for (int c = 0; c < KC; ++c) {
                k0[c] = ld16(kp + gid * tok_stride + 32 * c + 8 * t);
                k1[c] = ld16(kp + (gid + 8) * tok_stride + 32 * c + 8 * t);
            }
        }
        // D <= 128: V of the whole page in flight with K; D = 256: per 64-dim block below (registers).
        uint4 vv[VW][4];
        {
#pragma unroll
            for (int v = 0; v < VW; ++v)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    vv[v][e] = vt[e] < valid ? ld16(vp + vt[e] * tok_stride + 64 * (vpart * VW + v) + 8 * gid)
                                             : make_uint4(0, 0, 0, 0);
        }

        float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            uint4 ka, kb2;
            if constexpr (D <= 128) {
                ka = k0[c];
                kb2 = k1[c];
            } else {
                ka = ld16(kp + gid * tok_stride + 32 * c + 8 * t);
                kb2 = ld16(kp + (gid + 8) * tok_stride + 32 * c + 8 * t);
            }
            mma16816(s0, qlo0[2 * c], qhi0[2 * c], qlo1[2 * c], qhi1[2 * c], ka.x, ka.y);
            mma16816(s0, qlo0[2 * c + 1], qhi0[2 * c + 1], qlo1[2 * c + 1], qhi1[2 * c + 1], ka.z, ka.w);
            mma16816(s1, qlo0[2 * c], qhi0[2 * c], qlo1[2 * c], qhi1[2 * c], kb2.x, kb2.y);
            mma16816(s1, qlo0[2 * c + 1], qhi0[2 * c + 1], qlo1[2 * c + 1], qhi1[2 * c + 1], kb2.z, kb2.w);
        }
        // s0[e]: row gid (e < 2) or gid + 8, token 2t + (e & 1); s1[e]: token 8 + 2t + (e & 1).
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            s0[e] = (2 * t + (e & 1)) < valid ? s0[e] * scale_log2 : -INFINITY;
            s1[e] = (8 + 2 * t + (e & 1)) < valid ? s1[e] * scale_log2 : -INFINITY;
        }
        // Every page has a valid token, so the new maxima are finite.
        const float mn_lo = fmaxf(m_lo, quad_max(fmaxf(fmaxf(s0[0], s0[1]), fmaxf(s1[0], s1[1]))));
        const float mn_hi = fmaxf(m_hi, quad_max(fmaxf(fmaxf(s0[2], s0[3]), fmaxf(s1[2], s1[3]))));
        const float c_lo = exp2f(m_lo - mn_lo), c_hi = exp2f(m_hi - mn_hi);  // 0 on the first page
        m_lo = mn_lo;
        m_hi = mn_hi;
        float p0v[4], p1v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float m = e < 2 ? mn_lo : mn_hi;
            p0v[e] = exp2f(s0[e] - m);
            p1v[e] = exp2f(s1[e] - m);
        }
        l_lo = l_lo * c_lo + (p0v[0] + p0v[1] + p1v[0] + p1v[1]);
        l_hi = l_hi * c_hi + (p0v[2] + p0v[3] + p1v[2] + p1v[3]);
#pragma unroll
        for (int n = 0; n < VW * 8; ++n) {
            o[n][0] *= c_lo; o[n][1] *= c_lo;
            o[n][2] *= c_hi; o[n][3] *= c_hi;
        }
        // P as the A fragment of one k16 step over the page's 16 tokens.
        const uint32_t pa0 = pack_bf16(p0v[0], p0v[1]);  // row gid, tokens 2t, 2t+1
        const uint32_t pa1 = HI ? pack_bf16(p0v[2], p0v[3]) : 0u;  // row gid + 8
        const uint32_t pa2 = pack_bf16(p1v[0], p1v[1]);  // row gid, tokens 2t+8, 2t+9
        const uint32_t pa3 = HI ? pack_bf16(p1v[2], p1v[3]) : 0u;
#pragma unroll
        for (int v = 0; v < VW; ++v) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                mma16816(o[8 * v + j], pa0, pa1, pa2, pa3, pair(vv[v][0], vv[v][1], j), pair(vv[v][2], vv[v][3], j));
        }
    }

    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
    // o[8v + j][0]: row gid, dim 64v + 16t + j; [1]: dim 64v + 16t + 8 + j; [2], [3]: row gid + 8.
    if (splits == 1) {
        const float inv_lo = 1.f / l_lo, inv_hi = 1.f / l_hi;
#pragma unroll
        for (int v = 0; v < VW; ++v) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int dim = 64 * (vpart * VW + v) + 16 * t + 8 * h;
                if (live_lo) {
                    uint4 w;
                    w.x = pack_bf16(o[8 * v + 0][h] * inv_lo, o[8 * v + 1][h] * inv_lo);
                    w.y = pack_bf16(o[8 * v + 2][h] * inv_lo, o[8 * v + 3][h] * inv_lo);
                    w.z = pack_bf16(o[8 * v + 4][h] * inv_lo, o[8 * v + 5][h] * inv_lo);
                    w.w = pack_bf16(o[8 * v + 6][h] * inv_lo, o[8 * v + 7][h] * inv_lo);
                    *reinterpret_cast<uint4*>(out + row_lo * D + dim) = w;
                }
                if (live_hi) {
                    uint4 w;
                    w.x = pack_bf16(o[8 * v + 0][2 + h] * inv_hi, o[8 * v + 1][2 + h] * inv_hi);
                    w.y = pack_bf16(o[8 * v + 2][2 + h] * inv_hi, o[8 * v + 3][2 + h] * inv_hi);
                    w.z = pack_bf16(o[8 * v + 4][2 + h] * inv_hi, o[8 * v + 5][2 + h] * inv_hi);
                    w.w = pack_bf16(o[8 * v + 6][2 + h] * inv_hi, o[8 * v + 7][2 + h] * inv_hi);
                    *reinterpret_cast<uint4*>(out + row_hi * D + dim) = w;
                }
            }
        }
        return;
    }
    const int64_t part_lo = row_lo * splits + split, part_hi = row_hi * splits + split;
#pragma unroll
    for (int v = 0; v < VW; ++v) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int dim = 64 * (vpart * VW + v) + 16 * t + 8 * h;
            if (live_lo) {
                float4* dst = reinterpret_cast<float4*>(g_o + part_lo * D + dim);
                dst[0] = make_float4(o[8 * v + 0][h], o[8 * v + 1][h], o[8 * v + 2][h], o[8 * v + 3][h]);
                dst[1] = make_float4(o[8 * v + 4][h], o[8 * v + 5][h], o[8 * v + 6][h], o[8 * v + 7][h]);
            }
            if (live_hi) {
                float4* dst = reinterpret_cast<float4*>(g_o + part_hi * D + dim);
                dst[0] = make_float4(o[8 * v + 0][2 + h], o[8 * v + 1][2 + h], o[8 * v + 2][2 + h], o[8 * v + 3][2 + h]);
                dst[1] = make_float4(o[8 * v + 4][2 + h], o[8 * v + 5][2 + h], o[8 * v + 6][2 + h], o[8 * v + 7][2 + h]);
            }
        }
    }
    if (t == 0 && vpart == 0) {  // both halves of a D = 256 item hold the same (m, l)
        if (live_lo) { g_m[part_lo] = m_lo; g_l[part_lo] = l_lo; }
        if (live_hi) { g_m[part_hi] = m_hi; g_l[part_hi] = l_hi; }
    }
}

// One warp per (sequence, query head): merge the splits the sequence has, lane owns D / 32 dims.
template <int D>
__global__ void __launch_bounds__(THREADS) merge_splits(const int32_t* __restrict__ context_lens,
                                                        __nv_bfloat16* __restrict__ out, int64_t rows, int Hq,
                                                        int splits, int pps) {
    constexpr int DPL = D / 32;
    const int64_t row = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x & 31;
    const int ctx = __ldg(context_lens + row / Hq);
    const int ns = min(splits, ((ctx + PAGE - 1) / PAGE + pps - 1) / pps);
    const int64_t base = row * splits;
    float mx = -INFINITY;
    for (int s = 0; s < ns; ++s) mx = fmaxf(mx, g_m[base + s]);
    float acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
    float l = 0.f;
    for (int s = 0; s < ns; ++s) {
        const float w = exp2f(g_m[base + s] - mx);
        l += w * g_l[base + s];
        const float* src = g_o + (base + s) * D + lane * DPL;
#pragma unroll
        for (int i = 0; i < DPL; i += 2) {
            const float2 x = *reinterpret_cast<const float2*>(src + i);
            acc[i] += w * x.x;
            acc[i + 1] += w * x.y;
        }
    }
    const float inv = 1.f / l;
    __nv_bfloat16* dst = out + row * D + lane * DPL;
#pragma unroll
    for (int i = 0; i < DPL; i += 2)
        *reinterpret_cast<uint32_t*>(dst + i) = pack_bf16(acc[i] * inv, acc[i + 1] * inv);
}

template <int D, bool HI>
void launch_main(const __nv_bfloat16* q, const __nv_bfloat16* kc, const __nv_bfloat16* vc, const int32_t* bt,
                 const int32_t* lens, __nv_bfloat16* out, int Hq, int Hkv, int G, int NC, int max_blocks,
                 int splits, int pps, float scale_log2, int64_t items, cudaStream_t st) {
    const int64_t warps = items * (D == 256 ? 2 : 1);
    paged_decode<D, HI><<<(unsigned)((warps + WARPS - 1) / WARPS), THREADS, 0, st>>>(
        q, kc, vc, bt, lens, out, Hq, Hkv, G, NC, max_blocks, splits, pps, scale_log2, items);
}

template <int D>
void launch_d(bool hi, const __nv_bfloat16* q, const __nv_bfloat16* kc, const __nv_bfloat16* vc,
              const int32_t* bt, const int32_t* lens, __nv_bfloat16* out, int64_t B, int Hq, int Hkv, int G,
              int NC, int max_blocks, int splits, int pps, float scale_log2, int64_t items, cudaStream_t st) {
    if (hi) launch_main<D, true>(q, kc, vc, bt, lens, out, Hq, Hkv, G, NC, max_blocks, splits, pps, scale_log2, items, st);
    else launch_main<D, false>(q, kc, vc, bt, lens, out, Hq, Hkv, G, NC, max_blocks, splits, pps, scale_log2, items, st);
    if (splits > 1) {
        const int64_t rows = B * Hq;
        merge_splits<D><<<(unsigned)((rows + WARPS - 1) / WARPS), THREADS, 0, st>>>(lens, out, rows, Hq, splits, pps);
    }
}

}  // namespace

extern "C" int entry(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                     const int32_t* block_tables, const int32_t* context_lens, __nv_bfloat16* out, int64_t B,
                     int64_t Hq, int64_t Hkv, int64_t D, int64_t max_blocks, cudaStream_t stream) {
    if (B <= 0) return 0;
    if (Hkv <= 0 || Hq <= 0 || Hq % Hkv != 0 || max_blocks <= 0 || max_blocks > (1 << 24) || Hq > (1 << 16) ||
        (D != 64 && D != 128 && D != 256))
        return (int)cudaErrorInvalidValue;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k_cache) |
                           reinterpret_cast<uintptr_t>(v_cache) | reinterpret_cast<uintptr_t>(out);
    if (addr % 16 != 0) return (int)cudaErrorMisalignedAddress;
    const int G = (int)(Hq / Hkv);
    const int NC = (G + 15) / 16;
    const bool hi = G > 8;
    const int64_t combos = B * Hkv * NC;
    // Splits: enough warps to fill the GPU, at least MIN_PAGES_PER_SPLIT pages each, within the scratch.
    int64_t splits = (TARGET_WARPS + combos - 1) / combos;
    splits = splits < 1 ? 1 : splits;
    splits = splits < (max_blocks + MIN_PAGES_PER_SPLIT - 1) / MIN_PAGES_PER_SPLIT
                 ? splits : (max_blocks + MIN_PAGES_PER_SPLIT - 1) / MIN_PAGES_PER_SPLIT;
    const int64_t fit = SCRATCH_FLOATS / (B * Hq * D);
    if (splits > fit) splits = fit < 1 ? 1 : fit;
    const int64_t pps = (max_blocks + splits - 1) / splits;
    splits = (max_blocks + pps - 1) / pps;
    const int64_t items = combos * splits;
    if ((2 * items + WARPS - 1) / WARPS > 0x7fffffff || (B * Hq + WARPS - 1) / WARPS > 0x7fffffff)
        return (int)cudaErrorInvalidValue;
    const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)D));
    const int hq = (int)Hq, hkv = (int)Hkv, mb = (int)max_blocks, sp = (int)splits, pp = (int)pps;
    if (D == 64)
        launch_d<64>(hi, q, k_cache, v_cache, block_tables, context_lens, out, B, hq, hkv, G, NC, mb, sp, pp, scale_log2, items, stream);
    else if (D == 128)
        launch_d<128>(hi, q, k_cache, v_cache, block_tables, context_lens, out, B, hq, hkv, G, NC, mb, sp, pp, scale_log2, items, stream);
    else
        launch_d<256>(hi, q, k_cache, v_cache, block_tables, context_lens, out, B, hq, hkv, G, NC, mb, sp, pp, scale_log2, items, stream);
    return (int)cudaGetLastError();
}
