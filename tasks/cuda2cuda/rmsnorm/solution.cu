// RMSNorm, bf16 in and out, fp32 accumulation: the expert version.
//
// Key ideas (memory-bound: the floor is one read of x, one write of y; w stays in L2):
// - One read of x: the row is loaded once into registers (float v[K][VEC]), reduced, then scaled and
//   written from the registers. The baseline reads x twice.
// - 16-byte accesses: when N % 8 == 0 and the pointers are 16-byte aligned, each access moves 8 bf16
//   (uint4); every thread issues all K of its loads before the reduction, so plenty of bytes are in
//   flight per SM. Otherwise (odd N: rows start misaligned) the same kernel runs with VEC = 1: coalesced
//   scalar loads, still K*VEC of them in flight per thread, still one read.
// - Work per CTA tuned to N: short rows (<= 2048 elements) get one warp per row and 4 rows per block, the
//   reduction is pure warp shuffles, no shared memory, no __syncthreads; longer rows get one block per
//   row with the thread count sized so each thread holds K in {1, 2, 4, 8} vectors (~256 threads for
//   Llama sizes), reduced by shuffles within warps and one 32-float shared array across warps.
// - Rows too long for registers (N > 32768) take a looping two-pass kernel (vectorized when aligned).
// - 1/N precomputed, rsqrtf, int64 row offsets, every index guarded (tails, M not a multiple of the
//   rows per block).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int WARP = 32;
constexpr int ROWS_PER_WARP_BLOCK = 4;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Load VEC consecutive bf16 as floats (VEC is 8: one 16-byte load, or 1: one scalar load).
template <int VEC>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&out)[VEC]) {
    if constexpr (VEC == 8) {
        uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float2 f = __bfloat1622float2(h[j]);
            out[2 * j] = f.x;
            out[2 * j + 1] = f.y;
        }
    } else {
        out[0] = __bfloat162float(*p);
    }
}

template <int VEC>
__device__ __forceinline__ void load_vec_ro(const __nv_bfloat16* p, float (&out)[VEC]) {
    if constexpr (VEC == 8) {
        uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float2 f = __bfloat1622float2(h[j]);
            out[2 * j] = f.x;
            out[2 * j + 1] = f.y;
        }
    } else {
        out[0] = __bfloat162float(__ldg(p));
    }
}

template <int VEC>
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        uint4 raw;
        __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        *reinterpret_cast<uint4*>(p) = raw;
    } else {
        *p = __float2bfloat16(v[0]);
    }
}

// Row kept in registers. WARP_ROW: one warp per row, ROWS_PER_WARP_BLOCK rows per block;
// otherwise one block per row. Thread r of a row owns chunks r, r + T, ..., r + (K-1)T (T threads per
// row), chunk c covering elements [c*VEC, c*VEC + VEC). Requires N % VEC == 0.
template <int VEC, int K, bool WARP_ROW, int MAX_THREADS>
__global__ void __launch_bounds__(MAX_THREADS) rmsnorm_regs(const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ w,
                                                     __nv_bfloat16* __restrict__ y, int64_t M, int N,
                                                     float inv_n, float eps) {
    int64_t row;
    int r, T;
    if constexpr (WARP_ROW) {
        row = (int64_t)blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / WARP;
        r = threadIdx.x % WARP;
        T = WARP;
        if (row >= M) return;  // whole warps leave; no block-level barrier follows in this mode
    } else {
        row = blockIdx.x;
        r = threadIdx.x;
        T = blockDim.x;
    }
    const int chunks = N / VEC;
    const __nv_bfloat16* xr = x + row * (int64_t)N;
    __nv_bfloat16* yr = y + row * (int64_t)N;

    float v[K][VEC];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = r + i * T;
        if (c < chunks) {
            load_vec<VEC>(xr + (int64_t)c * VEC, v[i]);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) ss += v[i][j] * v[i][j];
    }

    ss = warp_sum(ss);
    if constexpr (!WARP_ROW) {
        __shared__ float red[WARP];
        const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        if (warp == 0) {
            float t = lane < (int)(blockDim.x / WARP) ? red[lane] : 0.0f;
            t = warp_sum(t);
            if (lane == 0) red[0] = t;
        }
        __syncthreads();
        ss = red[0];
    }
    const float rstd = rsqrtf(ss * inv_n + eps);

#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = r + i * T;
        if (c < chunks) {
            float g[VEC];
            load_vec_ro<VEC>(w + (int64_t)c * VEC, g);
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = v[i][j] * rstd * g[j];
            store_vec<VEC>(yr + (int64_t)c * VEC, v[i]);
        }
    }
}

// Rows too long for registers: one block of 1024 threads per row, two passes over the row.
template <int VEC>
__global__ void __launch_bounds__(1024) rmsnorm_loop(const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ w,
                                                     __nv_bfloat16* __restrict__ y, int N, float inv_n,
                                                     float eps) {
    const int64_t row = blockIdx.x;
    const int chunks = N / VEC;
    const __nv_bfloat16* xr = x + row * (int64_t)N;
    __nv_bfloat16* yr = y + row * (int64_t)N;
    float ss = 0.0f;
#pragma unroll 4
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        float v[VEC];
        load_vec<VEC>(xr + (int64_t)c * VEC, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) ss += v[j] * v[j];
    }
    __shared__ float red[WARP];
    ss = warp_sum(ss);
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        float t = lane < (int)(blockDim.x / WARP) ? red[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    const float rstd = rsqrtf(red[0] * inv_n + eps);
    // Walk back down the row: the chunks read last are the likeliest to still be in L2.
    for (int c = chunks - 1 - (int)threadIdx.x; c >= 0; c -= blockDim.x) {
        float v[VEC], g[VEC];
        load_vec<VEC>(xr + (int64_t)c * VEC, v);
        load_vec_ro<VEC>(w + (int64_t)c * VEC, g);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = v[j] * rstd * g[j];
        store_vec<VEC>(yr + (int64_t)c * VEC, v);
    }
}

// Up to 32 floats per thread: blocks of up to 1024 threads (<= 64 registers); 64 floats: up to 512.
template <int VEC, int K>
constexpr int max_threads() { return K * VEC <= 32 ? 1024 : 512; }

template <int VEC, int K>
void launch_block_row(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int N,
                      int threads, float inv_n, float eps, cudaStream_t s) {
    rmsnorm_regs<VEC, K, false, max_threads<VEC, K>()><<<(unsigned)M, threads, 0, s>>>(x, w, y, M, N, inv_n, eps);
}

template <int VEC, int K>
void launch_warp_row(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int N,
                     float inv_n, float eps, cudaStream_t s) {
    const unsigned blocks = (unsigned)((M + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK);
    rmsnorm_regs<VEC, K, true, ROWS_PER_WARP_BLOCK * WARP><<<blocks, ROWS_PER_WARP_BLOCK * WARP, 0, s>>>(x, w, y, M, N, inv_n, eps);
}

// Per-thread chunk counts: for VEC = 8 K in {1,2,4,8} (<= 64 floats per thread);
// for VEC = 1 the same register budget is K in {8,16,32,64}.
template <int VEC>
bool dispatch(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int N,
              float inv_n, float eps, cudaStream_t s) {
    constexpr int U = (VEC == 8) ? 1 : 8;  // unit of K
    const int chunks = N / VEC;
    if (chunks <= WARP * 8 * U) {  // short rows: a warp per row
        const int k = (chunks + WARP - 1) / WARP;
        if (k <= 1 * U) launch_warp_row<VEC, 1 * U>(x, w, y, M, N, inv_n, eps, s);
        else if (k <= 2 * U) launch_warp_row<VEC, 2 * U>(x, w, y, M, N, inv_n, eps, s);
        else if (k <= 4 * U) launch_warp_row<VEC, 4 * U>(x, w, y, M, N, inv_n, eps, s);
        else launch_warp_row<VEC, 8 * U>(x, w, y, M, N, inv_n, eps, s);
        return true;
    }
    // A block per row: the fewest chunks per thread that keep the block at <= 256 threads, else the
    // fewest that fit the block's register budget (max_threads).
    for (int limit : {256, 1024}) {
        for (int k = 1; k <= 8; k *= 2) {
            const int t = (chunks + k * U - 1) / (k * U);
            if (t > limit || t > (k * U * VEC <= 32 ? 1024 : 512)) continue;
            const int threads = (t + WARP - 1) / WARP * WARP;
            switch (k) {
                case 1: launch_block_row<VEC, 1 * U>(x, w, y, M, N, threads, inv_n, eps, s); break;
                case 2: launch_block_row<VEC, 2 * U>(x, w, y, M, N, threads, inv_n, eps, s); break;
                case 4: launch_block_row<VEC, 4 * U>(x, w, y, M, N, threads, inv_n, eps, s); break;
                default: launch_block_row<VEC, 8 * U>(x, w, y, M, N, threads, inv_n, eps, s); break;
            }
            return true;
        }
    }
    return false;
}

}  // namespace

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                     int64_t M, int64_t N, double eps, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    if (N > INT32_MAX / 2) return (int)cudaErrorInvalidValue;
    const int n = (int)N;
    const float inv_n = 1.0f / (float)N;
    const float e = (float)eps;
    const bool aligned = (n % 8 == 0) &&
                         ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                           reinterpret_cast<uintptr_t>(y)) % 16 == 0);
    const bool done = aligned ? dispatch<8>(x, w, y, M, n, inv_n, e, stream)
                              : dispatch<1>(x, w, y, M, n, inv_n, e, stream);
    if (!done) {
        if (aligned) rmsnorm_loop<8><<<(unsigned)M, 1024, 0, stream>>>(x, w, y, n, inv_n, e);
        else rmsnorm_loop<1><<<(unsigned)M, 1024, 0, stream>>>(x, w, y, n, inv_n, e);
    }
    return (int)cudaGetLastError();
}
