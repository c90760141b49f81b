// MoE align (vLLM's moe_align_block_size): the expert version, a stable counting sort in shared memory.
//
// Cost model: latency-bound. Even DeepSeek-V3's 16k-token prefill is 131072 routed pairs: 0.5 MB in,
// ~0.6 MB out, ~0.25 us of DRAM time; what costs is launches, grid-wide dependencies (counts before
// offsets before scatter) and the sort's passes. Eager PyTorch (the reference) runs ~15 kernels
// (bincount, cumsums, a radix argsort with its temporaries, gathers, a fill, an index_put, searchsorted);
// one or three small kernels with everything else in shared memory are expected ~10x faster.
//
// Key ideas:
// - A stable counting sort: rank of pair i within its expert = (pairs of that expert in earlier chunks)
//   + (in earlier warps of its chunk) + (in earlier steps of its warp) + (in earlier lanes of its step).
//   Each warp owns a contiguous range of flat indices and walks it in order, 32 pairs a step;
//   __match_any_sync groups the lanes of a step by expert, popc(mask & lanes below) is a lane's rank among
//   them, and the lowest lane of each group adds popc(mask) to the warp's private counter row in shared
//   memory (no atomics: deterministic, and stable by construction).
// - Per warp and expert, counters live in shared memory ([16 warps][E <= 512] ints, 32 KB); one pass
//   counts, an exclusive scan over the warps (per expert) turns counts into bases, a second pass places.
// - Up to 8192 pairs (every decode batch): one block does it all in one launch. Above: chunks of >= 4096
//   pairs; kernel 1 counts per chunk, kernel 2 (one block) scans chunks per expert and experts per block
//   size, and writes expert_ids and the padding; kernel 3 recounts its chunk
//   (cheaper than storing per-warp counts) and scatters.
// - Expert offsets: a block-wide scan of cdiv(c_e, block_size) * block_size over experts (warp shuffles);
//   expert_ids by a binary search of each block's start in the experts' ends (in shared memory); padding
//   slots of an expert written by one warp each, the tail past the total by the whole block.
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 512;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_E = 512;
constexpr int64_t SINGLE_MAX = 8192;  // pairs handled by one block in one launch
constexpr int64_t MIN_CHUNK = 4096;
constexpr int MAX_CHUNKS = 256;

__device__ int g_counts[MAX_CHUNKS * MAX_E];  // per chunk and expert: count, then the chunk's base

struct Shared {
    int hist[WARPS][MAX_E];  // per warp and expert: count, then the warp's base
    int cnt[MAX_E];          // per expert: pairs in the chunk (or in all)
    int offs[MAX_E];         // per expert: o_e, its first position
    int ends[MAX_E];         // per expert: o_e + p_e
    int warp_tot[WARPS];
};

__device__ __forceinline__ unsigned lanes_below() {
    unsigned m;
    asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
    return m;
}

// The warp's range of [c0, c1): contiguous, in steps of 32.
__device__ __forceinline__ void warp_range(int64_t c0, int64_t c1, int w, int64_t& b0, int64_t& b1) {
    const int64_t len = c1 - c0;
    const int64_t sw = ((len + WARPS - 1) / WARPS + 31) / 32 * 32;
    b0 = c0 + w * sw < c1 ? c0 + w * sw : c1;
    b1 = b0 + sw < c1 ? b0 + sw : c1;
}

// Counts of [c0, c1): s.hist[w][e] = pairs of expert e before warp w's range (within the chunk),
// s.cnt[e] = pairs of expert e in the chunk.
__device__ void count_chunk(Shared& s, const int32_t* __restrict__ ids, int64_t c0, int64_t c1, int E) {
    for (int i = threadIdx.x; i < WARPS * MAX_E; i += THREADS) (&s.hist[0][0])[i] = 0;
    __syncthreads();
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t b0, b1;
    warp_range(c0, c1, w, b0, b1);
    for (int64_t base = b0; base < b1; base += 32) {
        const int64_t i = base + lane;
        const int e = i < b1 ? __ldg(ids + i) : -1;
        const unsigned mask = __match_any_sync(0xffffffffu, e);
        if (e >= 0 && lane == __ffs(mask) - 1) s.hist[w][e] += __popc(mask);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += THREADS) {
        int run = 0;
#pragma unroll
        for (int v = 0; v < WARPS; ++v) {
            const int c = s.hist[v][e];
            s.hist[v][e] = run;
            run += c;
        }
        s.cnt[e] = run;
    }
    __syncthreads();
}

// Places the pairs of [c0, c1), s.hist[w][e] holding the warp's first position for expert e.
__device__ void scatter_chunk(Shared& s, const int32_t* __restrict__ ids, int64_t c0, int64_t c1,
                              int32_t* __restrict__ sorted) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned below = lanes_below();
    int64_t b0, b1;
    warp_range(c0, c1, w, b0, b1);
    for (int64_t base = b0; base < b1; base += 32) {
        const int64_t i = base + lane;
        const int e = i < b1 ? __ldg(ids + i) : -1;
        const unsigned mask = __match_any_sync(0xffffffffu, e);
        if (e >= 0) sorted[s.hist[w][e] + __popc(mask & below)] = (int32_t)i;
        __syncwarp();
        if (e >= 0 && lane == __ffs(mask) - 1) s.hist[w][e] += __popc(mask);
        __syncwarp();
    }
}

// From s.cnt (pairs per expert, all chunks): s.offs (o_e), s.ends (o_e + p_e), and the outputs that depend
// on counts only: expert_ids and the padding of sorted_token_ids.
__device__ void finalize(Shared& s, int E, int bs, int64_t N, int64_t max_padded, int32_t* __restrict__ sorted,
                         int32_t* __restrict__ expert_ids) {
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32;
    const int c = tid < E ? s.cnt[tid] : 0;
    const int p = (c + bs - 1) / bs * bs;
    int x = p;  // inclusive scan of p over the experts: a warp scan, then a scan of the warp totals
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) s.warp_tot[w] = x;
    __syncthreads();
    if (w == 0) {
        int t = lane < WARPS ? s.warp_tot[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += y;
        }
        if (lane < WARPS) s.warp_tot[lane] = t;
    }
    __syncthreads();
    const int end = x + (w > 0 ? s.warp_tot[w - 1] : 0);
    const int total = s.warp_tot[WARPS - 1];
    if (tid < E) {
        s.ends[tid] = end;
        s.offs[tid] = end - p;
    }
    __syncthreads();
    // expert_ids: the expert whose [o_e, ends_e) holds block b's first position, -1 past the total.
    const int64_t nblocks = (max_padded + bs - 1) / bs;
    for (int64_t b = tid; b < nblocks; b += THREADS) {
        const int64_t pos = b * bs;
        int e = -1;
        if (pos < total) {
            int lo = 0, hi = E - 1;  // the first e with ends[e] > pos (empty experts have ends == offs)
            while (lo < hi) {
                const int mid = (lo + hi) >> 1;
                if (s.ends[mid] > pos) hi = mid; else lo = mid + 1;
            }
            e = lo;
        }
        expert_ids[b] = e;
    }
    // Padding: each expert's run past its pairs (one warp per expert), then everything from the total on.
    const int32_t pad = (int32_t)N;
    for (int e = w; e < E; e += WARPS)
        for (int q = s.offs[e] + s.cnt[e] + lane; q < s.ends[e]; q += 32) sorted[q] = pad;
    for (int64_t q = total + tid; q < max_padded; q += THREADS) sorted[q] = pad;
}

// N <= SINGLE_MAX: everything in one block.
__global__ void __launch_bounds__(THREADS) align_single(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                                                        int32_t* __restrict__ expert_ids, int64_t N, int E, int bs, int64_t max_padded) {
    __shared__ Shared s;
    count_chunk(s, ids, 0, N, E);
    finalize(s, E, bs, N, max_padded, sorted, expert_ids);
    __syncthreads();
    for (int i = threadIdx.x; i < WARPS * E; i += THREADS) s.hist[i / E][i % E] += s.offs[i % E];
    __syncthreads();
    scatter_chunk(s, ids, 0, N, sorted);
}

// Kernel 1 of 3: per-chunk counts.
__global__ void __launch_bounds__(THREADS) align_count(const int32_t* __restrict__ ids, int64_t N, int E, int64_t chunk) {
    __shared__ Shared s;
    const int64_t c0 = blockIdx.x * chunk, c1 = c0 + chunk < N ? c0 + chunk : N;
    count_chunk(s, ids, c0, c1, E);
    for (int e = threadIdx.x; e < E; e += THREADS) g_counts[blockIdx.x * E + e] = s.cnt[e];
}

// Kernel 2 of 3 (one block): per expert, the chunks' bases; the expert offsets and count-only outputs.
__global__ void __launch_bounds__(THREADS) align_offsets(int32_t* __restrict__ sorted, int32_t* __restrict__ expert_ids,
                                                         int64_t N, int E, int bs,
                                                         int64_t max_padded, int chunks) {
    __shared__ Shared s;
    for (int e = threadIdx.x; e < E; e += THREADS) {
        int run = 0;
        for (int c = 0; c < chunks; ++c) {
            const int v = g_counts[c * E + e];
            g_counts[c * E + e] = run;
            run += v;
        }
        s.cnt[e] = run;
    }
    __syncthreads();
    finalize(s, E, bs, N, max_padded, sorted, expert_ids);
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += THREADS)
        for (int c = 0; c < chunks; ++c) g_counts[c * E + e] += s.offs[e];
}

// Kernel 3 of 3: recount the chunk, add the chunk's bases, place.
__global__ void __launch_bounds__(THREADS) align_scatter(const int32_t* __restrict__ ids, int32_t* __restrict__ sorted,
                                                         int64_t N, int E, int64_t chunk) {
    __shared__ Shared s;
    const int64_t c0 = blockIdx.x * chunk, c1 = c0 + chunk < N ? c0 + chunk : N;
    count_chunk(s, ids, c0, c1, E);
    for (int i = threadIdx.x; i < WARPS * E; i += THREADS) s.hist[i / E][i % E] += g_counts[blockIdx.x * E + i % E];
    __syncthreads();
    scatter_chunk(s, ids, c0, c1, sorted);
}

}  // namespace

extern "C" int entry(const int32_t* topk_ids, int32_t* sorted_token_ids, int32_t* expert_ids,
                     int64_t T, int64_t topk, int64_t E, int64_t block_size, cudaStream_t stream) {
    if (E < 1 || E > MAX_E || block_size < 1 || T < 0 || topk < 1) return (int)cudaErrorInvalidValue;
    const int64_t N = T * topk;
    const int64_t max_padded = N + E * (block_size - 1);
    if (max_padded > 0x7fffffff) return (int)cudaErrorInvalidValue;
    const int e = (int)E, bs = (int)block_size;
    if (N <= SINGLE_MAX) {
        align_single<<<1, THREADS, 0, stream>>>(topk_ids, sorted_token_ids, expert_ids, N, e, bs, max_padded);
        return (int)cudaGetLastError();
    }
    int64_t chunk = (N + MAX_CHUNKS - 1) / MAX_CHUNKS;
    chunk = chunk < MIN_CHUNK ? MIN_CHUNK : (chunk + 1023) / 1024 * 1024;
    const int chunks = (int)((N + chunk - 1) / chunk);
    align_count<<<chunks, THREADS, 0, stream>>>(topk_ids, N, e, chunk);
    align_offsets<<<1, THREADS, 0, stream>>>(sorted_token_ids, expert_ids, N, e, bs, max_padded, chunks);
    align_scatter<<<chunks, THREADS, 0, stream>>>(topk_ids, sorted_token_ids, N, e, chunk);
    return (int)cudaGetLastError();
}
