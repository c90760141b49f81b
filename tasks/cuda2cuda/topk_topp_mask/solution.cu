// Top-k / top-p masking of sampling logits, fp32: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): the floor is one read of the logits and one write of the output:
// 256 x 151936 x 4 B x 2 = 311 MB, ~72 us at ~90% of peak; a batch of 64 Llama-3 rows is 66 MB, ~15 us.
// The baseline makes up to 13 passes over each row in global memory with a single 1024-thread block per
// row (a row is 128-600 KB, more than a block can keep; with 132 rows in flight the working set overflows
// L2, so most passes go to HBM), and at small batches uses only B of the 132 SMs. Expected: ~5-10x on the
// large batches, more at B <= 16.
//
// Key ideas:
// - A thread-block cluster of 8 CTAs per row (sm_90): each CTA loads its eighth of the row once from HBM
//   into shared memory (16-byte loads; up to 32768 floats = 128 KB per CTA, so vocabularies up to 262144),
//   and every later pass (histograms, Z, ties, the write) reads shared memory. The CTAs exchange partial
//   results through distributed shared memory (cluster.map_shared_rank) and every CTA merges them in
//   rank order, so all 8 take identical decisions with no global-memory round trip.
// - The same exact algorithm as the baseline (order-preserving 32-bit keys, equal logits by ascending
//   index; fixed-point uint64 weights round(exp(l - max) * 2^40), so every sum is an exact integer and
//   the result is deterministic), with 11-bit digits (3 levels instead of 4, 2048-bin histograms), the max
//   fused into the slice load, early exits (a bucket holding exactly the remaining top-k tokens, or a
//   single top-p candidate, ends the search), and no selection at all for k >= V or p >= 1.
// - Bucket search in parallel: a block-wide scan over the 2048 merged bins (warp shuffles, then a scan of
//   the 32 warp totals) finds the crossing bin; no serial loop over bins.
// - Ties at a threshold value: each CTA counts them in its slice, the counts are exchanged, and only the
//   CTA holding the r-th tie scans its slice in index order (ballots) to find its index.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <float.h>
#include <stdint.h>

namespace cg = cooperative_groups;

namespace {

constexpr int CLUSTER = 8;
constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
constexpr int BINS = 2048;
constexpr int BPT = BINS / THREADS;  // bins per thread in the bucket search
constexpr int MAX_SLICE = 32768;  // floats per CTA: V <= 262144
constexpr float FIXED_ONE = 1099511627776.0f;  // 2^40

typedef unsigned long long u64;

__device__ __forceinline__ uint32_t key_of(float f) {
    const uint32_t u = __float_as_uint(f);
    return u ^ ((u & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u);
}
__device__ __forceinline__ float value_of(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k ^ 0x80000000u) : ~k);
}
__device__ __forceinline__ u64 weight_of(float l, float m) { return __float2ull_rn(expf(l - m) * FIXED_ONE); }
__device__ __forceinline__ bool above(uint32_t key, int i, uint32_t tv, int ti) {
    return key > tv || (key == tv && i <= ti);
}

struct Shared {
    unsigned int cnt[BINS];  // this CTA's histogram (read by the whole cluster)
    u64 wsum[BINS];
    unsigned int gcnt[BINS];  // the merged histogram
    u64 gwsum[BINS];
    u64 wtot[WARPS];
    u64 wtot2[WARPS];
    float fred[WARPS];
    int ired[WARPS];
    // Published for the cluster: one slot per use, never rewritten within a call.
    float pub_max;
    u64 pub_z;
    int pub_ties[2];
    int pub_index[2];
    // Block-local decisions.
    int sel;
    int found;
    u64 selA;
};

// Inclusive scan of v over the block in thread order; *total gets the block's sum.
__device__ u64 block_scan(u64 v, u64* wtot, u64* total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 1; o < 32; o <<= 1) {
        const u64 t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) wtot[warp] = v;
    __syncthreads();
    u64 before = 0, all = 0;
    for (int w = 0; w < WARPS; ++w) {
        if (w < warp) before += wtot[w];
        all += wtot[w];
    }
    __syncthreads();
    *total = all;
    return v + before;
}

// Merge the cluster's histograms (bins [0, nbins)) into gcnt / gwsum, in rank order.
__device__ void merge_hist(cg::cluster_group& cluster, Shared& s, int nbins, bool weights) {
    cluster.sync();
    for (int b = threadIdx.x; b < nbins; b += THREADS) {
        unsigned int c = 0;
        u64 w = 0;
        for (int r = 0; r < CLUSTER; ++r) {
            Shared* o = cluster.map_shared_rank(&s, r);
            c += o->cnt[b];
            if (weights) w += o->wsum[b];
        }
        s.gcnt[b] = c;
        s.gwsum[b] = w;
    }
    cluster.sync();  // every CTA has read every histogram before any clears its own
}

// The r-th (1-based) token in index order whose key is exactly v, over the whole row (slot: pub slot).
__device__ int nth_tie(cg::cluster_group& cluster, Shared& s, const float* slice, int n, int lo, uint32_t v, int r,
                       int slot) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int c = 0;
    for (int i = threadIdx.x; i < n; i += THREADS) c += key_of(slice[i]) == v;
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    if (lane == 0) s.ired[warp] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int t = 0;
        for (int w = 0; w < WARPS; ++w) t += s.ired[w];
        s.pub_ties[slot] = t;
        s.pub_index[slot] = -1;
    }
    cluster.sync();
    const int me = (int)cluster.block_rank();
    int before = 0, owner = -1;
    for (int q = 0; q < CLUSTER; ++q) {
        const int t = cluster.map_shared_rank(&s, q)->pub_ties[slot];
        if (owner < 0 && before + t >= r) owner = q;
        else if (owner < 0) before += t;
    }
    if (owner == me) {
        const int want = r - before;
        int base = 0;
        for (int t0 = 0; t0 < n; t0 += THREADS) {
            const int i = t0 + threadIdx.x;
            const bool f = i < n && key_of(slice[i]) == v;
            const unsigned bal = __ballot_sync(0xffffffffu, f);
            if (lane == 0) s.ired[warp] = __popc(bal);
            __syncthreads();
            int pre = base, total = 0;
            for (int w = 0; w < WARPS; ++w) {
                if (w < warp) pre += s.ired[w];
                total += s.ired[w];
            }
            pre += __popc(bal & ((1u << lane) - 1u));
            if (f && pre + 1 == want) s.pub_index[slot] = lo + i;
            __syncthreads();
            base += total;
            if (base >= want) break;
        }
    }
    cluster.sync();
    return cluster.map_shared_rank(&s, owner)->pub_index[slot];
}

__global__ void __launch_bounds__(THREADS, 1) topk_topp_cluster(const float* __restrict__ logits,
                                                                const int32_t* __restrict__ top_k,
                                                                const float* __restrict__ top_p,
                                                                float* __restrict__ out, int V, int S, bool vec) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    Shared& s = *reinterpret_cast<Shared*>(smem_raw);
    float* slice = reinterpret_cast<float*>(smem_raw + ((sizeof(Shared) + 15) / 16) * 16);
    cg::cluster_group cluster = cg::this_cluster();
    const int me = (int)cluster.block_rank();
    const int64_t rowi = blockIdx.y;
    const int lo = me * S;
    const int n = max(0, min(V - lo, S));
    const float* src = logits + rowi * (int64_t)V + lo;
    float* dst = out + rowi * (int64_t)V + lo;
    const int k = top_k[rowi];
    const float p = top_p[rowi];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Load the slice once (16-byte loads when aligned), with the max.
    float m = -FLT_MAX;
    if (vec) {
        const float4* s4 = reinterpret_cast<const float4*>(src);
        float4* d4 = reinterpret_cast<float4*>(slice);
#pragma unroll 4
        for (int j = threadIdx.x; j < n / 4; j += THREADS) {
            const float4 v = __ldcs(s4 + j);
            d4[j] = v;
            m = fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w));
        }
        for (int i = (n / 4) * 4 + threadIdx.x; i < n; i += THREADS) {
            slice[i] = src[i];
            m = fmaxf(m, slice[i]);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += THREADS) {
            const float v = __ldcs(src + i);
            slice[i] = v;
            m = fmaxf(m, v);
        }
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) s.fred[warp] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = s.fred[0];
        for (int w = 1; w < WARPS; ++w) t = fmaxf(t, s.fred[w]);
        s.pub_max = t;
    }
    cluster.sync();
    m = -FLT_MAX;
    for (int q = 0; q < CLUSTER; ++q) m = fmaxf(m, cluster.map_shared_rank(&s, q)->pub_max);

    // Top-k threshold (tv, ti).
    uint32_t tv = 0;
    int ti = INT32_MAX;
    if (k < V) {
        uint32_t prefix = 0, mask = 0;
        int need = k;
        bool done = false;
        for (int level = 0; level < 3 && !done; ++level) {
            const int shift = level == 0 ? 21 : level == 1 ? 10 : 0, nb = level == 2 ? 1024 : 2048;
            const uint32_t dmask = (uint32_t)nb - 1u;
            for (int b = threadIdx.x; b < nb; b += THREADS) s.cnt[b] = 0;
            __syncthreads();
            for (int i = threadIdx.x; i < n; i += THREADS) {
                const uint32_t key = key_of(slice[i]);
                if ((key & mask) == prefix) atomicAdd(&s.cnt[(key >> shift) & dmask], 1u);
            }
            merge_hist(cluster, s, nb, false);
            // Descending bin order: thread t owns positions t*BPT .. t*BPT+BPT-1, position q being bin nb-1-q.
            u64 c[BPT], sum = 0;
#pragma unroll
            for (int j = 0; j < BPT; ++j) {
                const int b = nb - 1 - ((int)threadIdx.x * BPT + j);
                c[j] = b >= 0 ? s.gcnt[b] : 0;
                sum += c[j];
            }
            u64 total;
            u64 ex = block_scan(sum, s.wtot, &total) - sum;  // tokens in higher bins
#pragma unroll
            for (int j = 0; j < BPT; ++j) {
                const int b = nb - 1 - ((int)threadIdx.x * BPT + j);
                if (b >= 0 && ex < (u64)need && (u64)need <= ex + c[j]) {
                    s.sel = b;
                    s.found = need - (int)ex;
                }
                ex += c[j];
            }
            __syncthreads();
            const int d = s.sel;
            need = s.found;
            const int inbin = (int)s.gcnt[d];
            prefix |= (uint32_t)d << shift;
            mask |= dmask << shift;
            __syncthreads();
            if (need == inbin) {  // every token of the bin is kept: the bin's lowest key is the threshold
                done = true;
            } else if (level == 2) {
                ti = nth_tie(cluster, s, slice, n, lo, prefix, need, 0);
            }
        }
        tv = prefix;
    }

    // Z over the top-k tokens.
    u64 z = 0;
    for (int i = threadIdx.x; i < n; i += THREADS) {
        const float l = slice[i];
        if (above(key_of(l), lo + i, tv, ti)) z += weight_of(l, m);
    }
    for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if (lane == 0) s.wtot2[warp] = z;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 t = 0;
        for (int w = 0; w < WARPS; ++w) t += s.wtot2[w];
        s.pub_z = t;
    }
    cluster.sync();
    z = 0;
    for (int q = 0; q < CLUSTER; ++q) z += cluster.map_shared_rank(&s, q)->pub_z;

    // Top-p threshold (pv, pi).
    uint32_t pv = 0;
    int pi = INT32_MAX;
    if (p < 1.0f) {
        const double P = (double)p * (double)z;
        uint32_t prefix = 0, mask = 0;
        u64 A = 0;
        bool done = false;
        for (int level = 0; level < 3 && !done; ++level) {
            const int shift = level == 0 ? 21 : level == 1 ? 10 : 0, nb = level == 2 ? 1024 : 2048;
            const uint32_t dmask = (uint32_t)nb - 1u;
            for (int b = threadIdx.x; b < nb; b += THREADS) {
                s.cnt[b] = 0;
                s.wsum[b] = 0;
            }
            __syncthreads();
            for (int i = threadIdx.x; i < n; i += THREADS) {
                const float l = slice[i];
                const uint32_t key = key_of(l);
                if ((key & mask) == prefix && above(key, lo + i, tv, ti)) {
                    const uint32_t d = (key >> shift) & dmask;
                    atomicAdd(&s.cnt[d], 1u);
                    atomicAdd(&s.wsum[d], weight_of(l, m));
                }
            }
            merge_hist(cluster, s, nb, true);
            u64 w[BPT], sum = 0;
#pragma unroll
            for (int j = 0; j < BPT; ++j) {
                const int b = nb - 1 - ((int)threadIdx.x * BPT + j);
                w[j] = b >= 0 ? s.gwsum[b] : 0;
                sum += w[j];
            }
            u64 total;
            u64 a = A + (block_scan(sum, s.wtot, &total) - sum);  // mass above the first token of each bin
            // The lowest nonempty bin whose first token has mass before it < P (a prefix in this order).
            int cand = -1;
            u64 candA = 0;
#pragma unroll
            for (int j = 0; j < BPT; ++j) {
                const int b = nb - 1 - ((int)threadIdx.x * BPT + j);
                if (b >= 0 && s.gcnt[b] && (double)a < P) {
                    cand = b;
                    candA = a;
                }
                a += w[j];
            }
            // The candidates are the first bins in descending order: the last of them is the lowest bin number.
            if (threadIdx.x == 0) s.found = BINS;
            __syncthreads();
            if (cand >= 0) atomicMin(&s.found, cand);
            __syncthreads();
            const int d = s.found;
            if (cand == d) s.selA = candA;
            __syncthreads();
            A = s.selA;
            const int inbin = (int)s.gcnt[d];
            prefix |= (uint32_t)d << shift;
            mask |= dmask << shift;
            __syncthreads();
            if (inbin == 1) {  // a single candidate: its bin's lowest key is the threshold
                done = true;
            } else if (level == 2) {
                const u64 w = weight_of(value_of(prefix), m);
                int r = inbin;
                if (w > 0) {
                    const double c = ceil((P - (double)A) / (double)w);
                    if (c < (double)inbin) r = (int)c;
                }
                if (r < inbin) pi = nth_tie(cluster, s, slice, n, lo, prefix, r, 1);
            }
        }
        pv = prefix;
    }

    cluster.sync();  // no CTA leaves (or overwrites what others read) while its shared memory is in use

    // Write the slice.
    if (vec) {
        const float4* s4 = reinterpret_cast<const float4*>(slice);
        float4* d4 = reinterpret_cast<float4*>(dst);
        for (int j = threadIdx.x; j < n / 4; j += THREADS) {
            float4 v = s4[j];
            const int i = lo + 4 * j;
            v.x = (above(key_of(v.x), i, tv, ti) && above(key_of(v.x), i, pv, pi)) ? v.x : -FLT_MAX;
            v.y = (above(key_of(v.y), i + 1, tv, ti) && above(key_of(v.y), i + 1, pv, pi)) ? v.y : -FLT_MAX;
            v.z = (above(key_of(v.z), i + 2, tv, ti) && above(key_of(v.z), i + 2, pv, pi)) ? v.z : -FLT_MAX;
            v.w = (above(key_of(v.w), i + 3, tv, ti) && above(key_of(v.w), i + 3, pv, pi)) ? v.w : -FLT_MAX;
            __stcs(d4 + j, v);
        }
        for (int i = (n / 4) * 4 + threadIdx.x; i < n; i += THREADS) {
            const float l = slice[i];
            dst[i] = (above(key_of(l), lo + i, tv, ti) && above(key_of(l), lo + i, pv, pi)) ? l : -FLT_MAX;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += THREADS) {
            const float l = slice[i];
            dst[i] = (above(key_of(l), lo + i, tv, ti) && above(key_of(l), lo + i, pv, pi)) ? l : -FLT_MAX;
        }
    }
}

}  // namespace

extern "C" int entry(const float* logits, const int32_t* top_k, const float* top_p, float* out, int64_t B,
                     int64_t V, cudaStream_t stream) {
    if (B <= 0 || V <= 0) return 0;
    if (V > (int64_t)CLUSTER * MAX_SLICE || B > 65535) return (int)cudaErrorInvalidValue;
    const int v = (int)V;
    const int S = ((v + CLUSTER - 1) / CLUSTER + 3) / 4 * 4;  // a multiple of 4: slices stay 16-byte aligned
    const bool vec = v % 4 == 0 &&
                     ((reinterpret_cast<uintptr_t>(logits) | reinterpret_cast<uintptr_t>(out)) % 16) == 0;
    const size_t smem = (sizeof(Shared) + 15) / 16 * 16 + (size_t)S * sizeof(float);
    cudaError_t err = cudaFuncSetAttribute(topk_topp_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return (int)err;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CLUSTER, (unsigned)B, 1);
    cfg.blockDim = dim3(THREADS, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    err = cudaLaunchKernelEx(&cfg, topk_topp_cluster, logits, top_k, top_p, out, v, S, vec);
    if (err != cudaSuccess) return (int)err;
    return (int)cudaGetLastError();
}
