// Top-k / top-p masking of sampling logits, fp32: a straightforward first version.
//
// One block of 1024 threads per row; every step is a pass over the row in global memory (scalar loads).
// Tokens are ordered by the 32-bit order-preserving key of their logit (descending), equal logits by
// ascending index. Probabilities enter only through fixed-point weights w = round(exp(l - max) * 2^40) as
// uint64, so every sum is an exact integer (order-independent, deterministic).
//   1. max of the row (one pass).
//   2. top-k (when k < V): radix select of the k-th largest key, 8 bits a pass (4 passes, a 256-bin
//      shared-memory histogram of counts each), then, if the k-th value is tied and only some of the ties
//      are kept, one in-order pass for the index of the last kept tie.
//   3. Z = sum of the weights of the top-k tokens (one pass).
//   4. top-p (when p < 1): radix select, 8 bits a pass (4 passes, histograms of counts and weight sums),
//      of the last token whose preceding mass is < p * Z; ties at its value resolved as in 2.
//   5. one pass writing each logit or -FLT_MAX.
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

#define THREADS 1024
#define WARPS (THREADS / 32)
#define BINS 256
#define FIXED_ONE 1099511627776.0f  // 2^40

typedef unsigned long long u64;

__device__ __forceinline__ uint32_t key_of(float f) {
    const uint32_t u = __float_as_uint(f);
    return u ^ ((u & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u);
}
__device__ __forceinline__ float value_of(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}
__device__ __forceinline__ u64 weight_of(float l, float m) { return __float2ull_rn(expf(l - m) * FIXED_ONE); }

// Kept by a (value key, index) threshold: key above it, or equal with an index at most ti.
__device__ __forceinline__ bool above(uint32_t key, int i, uint32_t tv, int ti) {
    return key > tv || (key == tv && i <= ti);
}

struct Scratch {
    unsigned int cnt[BINS];
    u64 wsum[BINS];
    float fred[WARPS];
    u64 ured[WARPS];
    int wcount[WARPS];
    int sel;
    int found;
    u64 selA;
};

__device__ float block_max(float v, Scratch& s) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) s.fred[threadIdx.x / 32] = v;
    __syncthreads();
    float m = s.fred[0];
    for (int w = 1; w < WARPS; ++w) m = fmaxf(m, s.fred[w]);
    __syncthreads();
    return m;
}

__device__ u64 block_sum(u64 v, Scratch& s) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) s.ured[threadIdx.x / 32] = v;
    __syncthreads();
    u64 t = 0;
    for (int w = 0; w < WARPS; ++w) t += s.ured[w];
    __syncthreads();
    return t;
}

// The index of the r-th (1-based) token, in index order, whose key is exactly v.
__device__ int nth_tie(const float* row, int V, uint32_t v, int r, Scratch& s) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int base = 0;
    for (int t0 = 0; t0 < V; t0 += THREADS) {
        const int i = t0 + threadIdx.x;
        const bool f = i < V && key_of(row[i]) == v;
        const unsigned bal = __ballot_sync(0xffffffffu, f);
        if (lane == 0) s.wcount[warp] = __popc(bal);
        __syncthreads();
        int before = base, total = 0;
        for (int w = 0; w < WARPS; ++w) {
            if (w < warp) before += s.wcount[w];
            total += s.wcount[w];
        }
        before += __popc(bal & ((1u << lane) - 1u));
        if (f && before + 1 == r) s.found = i;
        __syncthreads();
        base += total;
        if (base >= r) break;  // uniform: every thread computed the same total
    }
    __syncthreads();
    return s.found;
}

__global__ void __launch_bounds__(THREADS) topk_topp_kernel(const float* __restrict__ logits,
                                                            const int32_t* __restrict__ top_k,
                                                            const float* __restrict__ top_p,
                                                            float* __restrict__ out, int V) {
    __shared__ Scratch s;
    const int64_t rowi = blockIdx.x;
    const float* row = logits + rowi * V;
    float* orow = out + rowi * V;
    const int k = top_k[rowi];
    const float p = top_p[rowi];

    // 1. max
    float m = -FLT_MAX;
    for (int i = threadIdx.x; i < V; i += THREADS) m = fmaxf(m, row[i]);
    m = block_max(m, s);

    // 2. top-k threshold (tv, ti)
    uint32_t tv = 0;
    int ti = INT32_MAX;
    if (k < V) {
        uint32_t prefix = 0, mask = 0;
        int need = k, ties = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < BINS; b += THREADS) s.cnt[b] = 0;
            __syncthreads();
            for (int i = threadIdx.x; i < V; i += THREADS) {
                const uint32_t key = key_of(row[i]);
                if ((key & mask) == prefix) atomicAdd(&s.cnt[(key >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                int acc = 0, d = BINS - 1;
                for (; d > 0; --d) {
                    if (acc + (int)s.cnt[d] >= need) break;
                    acc += s.cnt[d];
                }
                s.sel = d;
                s.wcount[0] = need - acc;
            }
            __syncthreads();
            const int d = s.sel;
            need = s.wcount[0];
            ties = s.cnt[d];
            prefix |= (uint32_t)d << shift;
            mask |= 255u << shift;
            __syncthreads();
        }
        tv = prefix;
        ti = need == ties ? INT32_MAX : nth_tie(row, V, tv, need, s);
    }

    // 3. Z over the top-k tokens
    u64 z = 0;
    for (int i = threadIdx.x; i < V; i += THREADS) {
        const float l = row[i];
        if (above(key_of(l), i, tv, ti)) z += weight_of(l, m);
    }
    z = block_sum(z, s);

    // 4. top-p threshold (pv, pi): the lowest-ranked token whose preceding mass is < P = p * Z
    uint32_t pv = 0;
    int pi = INT32_MAX;
    if (p < 1.0f) {
        const double P = (double)p * (double)z;
        uint32_t prefix = 0, mask = 0;
        u64 A = 0;
        int ties = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int b = threadIdx.x; b < BINS; b += THREADS) {
                s.cnt[b] = 0;
                s.wsum[b] = 0;
            }
            __syncthreads();
            for (int i = threadIdx.x; i < V; i += THREADS) {
                const float l = row[i];
                const uint32_t key = key_of(l);
                if ((key & mask) == prefix && above(key, i, tv, ti)) {
                    const uint32_t d = (key >> shift) & 255u;
                    atomicAdd(&s.cnt[d], 1u);
                    atomicAdd(&s.wsum[d], weight_of(l, m));
                }
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                u64 acc = A, selA = A;
                int sel = -1;
                for (int d = BINS - 1; d >= 0; --d) {
                    if (s.cnt[d]) {
                        if ((double)acc < P) {
                            sel = d;
                            selA = acc;
                        } else {
                            break;
                        }
                    }
                    acc += s.wsum[d];
                }
                s.sel = sel;
                s.selA = selA;
            }
            __syncthreads();
            const int d = s.sel;
            A = s.selA;
            ties = s.cnt[d];
            prefix |= (uint32_t)d << shift;
            mask |= 255u << shift;
            __syncthreads();
        }
        pv = prefix;
        // The ties at pv (within the top-k set) share one weight w; the t-th of them (0-based, index order)
        // is kept iff A + t * w < P.
        const u64 w = weight_of(value_of(pv), m);
        int r = ties;
        if (w > 0) {
            const double c = ceil((P - (double)A) / (double)w);
            if (c < (double)ties) r = (int)c;
        }
        pi = r == ties ? INT32_MAX : nth_tie(row, V, pv, r, s);
    }

    // 5. write
    for (int i = threadIdx.x; i < V; i += THREADS) {
        const float l = row[i];
        const uint32_t key = key_of(l);
        orow[i] = (above(key, i, tv, ti) && above(key, i, pv, pi)) ? l : -FLT_MAX;
    }
}

extern "C" int entry(const float* logits, const int32_t* top_k, const float* top_p, float* out, int64_t B,
                     int64_t V, cudaStream_t stream) {
    if (B <= 0 || V <= 0) return 0;
    if (V > INT32_MAX / 2 || B > INT32_MAX) return (int)cudaErrorInvalidValue;
    topk_topp_kernel<<<(unsigned)B, THREADS, 0, stream>>>(logits, top_k, top_p, out, (int)V);
    return (int)cudaGetLastError();
}
