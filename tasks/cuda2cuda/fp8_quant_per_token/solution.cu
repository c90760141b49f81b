// Dynamic per-token FP8 (e4m3) quantization, bf16 in: the expert version.
//
// Key ideas (memory-bound: the floor is one read of x, 2 bytes per element, and one write of q, 1 byte):
// - One read of x: a row's chunks are loaded once into registers and kept there as packed bf16 (4
//   registers per 8 elements), the amax is reduced, then q is converted from the registers. The baseline
//   reads x twice (the second time mostly from L2, but with 2-byte loads).
// - 16-byte loads, 8-byte stores: when K % 8 == 0 and the pointers are aligned, a thread loads 8 bf16 as a
//   uint4 and stores their 8 e4m3 bytes as one uint2; every thread issues all of its loads before the
//   reduction, so plenty of bytes are in flight per SM. Otherwise (odd K: rows start misaligned) the same
//   kernel runs with VEC = 1: coalesced scalar loads and byte stores, still one read.
// - amax on packed bf16 (__habs2, __hmax2: exact, two elements per instruction); the conversion with
//   __nv_cvt_float2_to_fp8x2 (one cvt.rn.satfinite.e4m3x2.f32 for two elements; satfinite is the clamp to
//   +-448). The quotient is the plain IEEE fp32 division the specification asks for (not a reciprocal
//   multiply, which would flip a rounding now and then): q matches the reference bit for bit.
// - Work per CTA tuned to K: short rows (<= 2048 elements aligned) get one warp per row, 4 rows per block,
//   a pure shuffle reduction; longer rows one block per row with the thread count sized so each thread holds
//   KC in {1, 2, 4, 8} chunks (256 threads at K = 4096, 224 at 14336, 832 at 53248), reduced by shuffles
//   within warps and one 32-float shared array across warps. Rows too long for registers fall back to a
//   two-pass loop.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int WARP = 32;
constexpr int ROWS_PER_WARP_BLOCK = 4;
constexpr float FP8_MAX = 448.0f;
constexpr float MIN_SCALE = 1.0f / (448.0f * 512.0f);

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Raw storage of VEC consecutive bf16: one uint4 (VEC = 8) or one bf16 (VEC = 1).
template <int VEC> struct Raw;
template <> struct Raw<8> { using T = uint4; using Q = uint2; };
template <> struct Raw<1> { using T = __nv_bfloat16; using Q = uint8_t; };

template <int VEC>
__device__ __forceinline__ typename Raw<VEC>::T load(const __nv_bfloat16* p) {
    return __ldg(reinterpret_cast<const typename Raw<VEC>::T*>(p));
}

__device__ __forceinline__ __nv_bfloat162 absmax(__nv_bfloat162 m, const uint4& v) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int j = 0; j < 4; ++j) m = __hmax2(m, __habs2(h[j]));
    return m;
}
__device__ __forceinline__ __nv_bfloat162 absmax(__nv_bfloat162 m, const __nv_bfloat16& v) {
    return __hmax2(m, __habs2(__bfloat162bfloat162(v)));
}

// 8 elements -> 8 e4m3 bytes: IEEE v / s, round to nearest even, saturate to +-448.
__device__ __forceinline__ uint2 quant(const uint4& v, float s) {
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        float2 f = __bfloat1622float2(h[j]);
        f.x = f.x / s;
        f.y = f.y / s;
        w[j] = (uint32_t)__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);  // .x in the low byte
    }
    return make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
}
__device__ __forceinline__ uint8_t quant(const __nv_bfloat16& v, float s) {
    return (uint8_t)__nv_cvt_float_to_fp8(__bfloat162float(v) / s, __NV_SATFINITE, __NV_E4M3);
}

// Row kept in registers. WARP_ROW: one warp per row, ROWS_PER_WARP_BLOCK rows per block; otherwise one
// block per row. Thread r of a row owns chunks r, r + T, ..., r + (KC-1)T (T threads per row), chunk c
// covering elements [c*VEC, c*VEC + VEC). Requires K % VEC == 0.
template <int VEC, int KC, bool WARP_ROW, int MAX_THREADS>
__global__ void __launch_bounds__(MAX_THREADS) quant_regs(const __nv_bfloat16* __restrict__ x,
                                                          uint8_t* __restrict__ q, float* __restrict__ scale,
                                                          int64_t M, int K) {
    using T = typename Raw<VEC>::T;
    using Q = typename Raw<VEC>::Q;
    int64_t row;
    int r, nt;
    if constexpr (WARP_ROW) {
        row = (int64_t)blockIdx.x * ROWS_PER_WARP_BLOCK + threadIdx.x / WARP;
        r = threadIdx.x % WARP;
        nt = WARP;
        if (row >= M) return;  // whole warps leave; no block-level barrier follows in this mode
    } else {
        row = blockIdx.x;
        r = threadIdx.x;
        nt = blockDim.x;
    }
    const int chunks = K / VEC;
    const __nv_bfloat16* xr = x + row * (int64_t)K;
    Q* qr = reinterpret_cast<Q*>(q + row * (int64_t)K);

    T v[KC];
#pragma unroll
    for (int i = 0; i < KC; ++i) {
        const int c = r + i * nt;
        if (c < chunks) v[i] = load<VEC>(xr + (int64_t)c * VEC);
        else v[i] = T{};
    }
    __nv_bfloat162 m2 = __float2bfloat162_rn(0.0f);
#pragma unroll
    for (int i = 0; i < KC; ++i)
        if (r + i * nt < chunks) m2 = absmax(m2, v[i]);
    float amax = warp_max(fmaxf(__low2float(m2), __high2float(m2)));
    if constexpr (!WARP_ROW) {
        __shared__ float red[WARP];
        const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
        if (lane == 0) red[warp] = amax;
        __syncthreads();
        if (warp == 0) {
            float t = lane < (int)(blockDim.x / WARP) ? red[lane] : 0.0f;
            t = warp_max(t);
            if (lane == 0) red[0] = t;
        }
        __syncthreads();
        amax = red[0];
    }
    const float s = fmaxf(amax / FP8_MAX, MIN_SCALE);
    if (r == 0) scale[row] = s;

#pragma unroll
    for (int i = 0; i < KC; ++i) {
        const int c = r + i * nt;
        if (c < chunks) qr[c] = quant(v[i], s);
    }
}

// Rows too long for registers: one block of 1024 threads per row, two passes over the row.
template <int VEC>
__global__ void __launch_bounds__(1024) quant_loop(const __nv_bfloat16* __restrict__ x, uint8_t* __restrict__ q,
                                                   float* __restrict__ scale, int K) {
    using T = typename Raw<VEC>::T;
    using Q = typename Raw<VEC>::Q;
    const int64_t row = blockIdx.x;
    const int chunks = K / VEC;
    const __nv_bfloat16* xr = x + row * (int64_t)K;
    Q* qr = reinterpret_cast<Q*>(q + row * (int64_t)K);
    __nv_bfloat162 m2 = __float2bfloat162_rn(0.0f);
#pragma unroll 4
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) m2 = absmax(m2, load<VEC>(xr + (int64_t)c * VEC));
    __shared__ float red[WARP];
    float amax = warp_max(fmaxf(__low2float(m2), __high2float(m2)));
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    if (lane == 0) red[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        float t = lane < (int)(blockDim.x / WARP) ? red[lane] : 0.0f;
        t = warp_max(t);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    const float s = fmaxf(red[0] / FP8_MAX, MIN_SCALE);
    if (threadIdx.x == 0) scale[row] = s;
    // Walk back down the row: the chunks read last are the likeliest to still be in L2.
    for (int c = chunks - 1 - (int)threadIdx.x; c >= 0; c -= blockDim.x) qr[c] = quant(load<VEC>(xr + (int64_t)c * VEC), s);
}

// Raw registers per thread: KC chunks, 4 registers per uint4 chunk, 1 per bf16.
template <int VEC, int KC>
constexpr int max_threads() { return KC * (VEC == 8 ? 4 : 1) <= 32 ? 1024 : 512; }
constexpr int max_threads_rt(int vec, int kc) { return kc * (vec == 8 ? 4 : 1) <= 32 ? 1024 : 512; }

template <int VEC, int KC>
void launch_block_row(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t M, int K, int threads,
                      cudaStream_t s) {
    quant_regs<VEC, KC, false, max_threads<VEC, KC>()><<<(unsigned)M, threads, 0, s>>>(x, q, scale, M, K);
}

template <int VEC, int KC>
void launch_warp_row(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t M, int K, cudaStream_t s) {
    const unsigned blocks = (unsigned)((M + ROWS_PER_WARP_BLOCK - 1) / ROWS_PER_WARP_BLOCK);
    quant_regs<VEC, KC, true, ROWS_PER_WARP_BLOCK * WARP><<<blocks, ROWS_PER_WARP_BLOCK * WARP, 0, s>>>(x, q, scale, M, K);
}

// Per-thread chunk counts: VEC = 8: KC in {1,2,4,8}; VEC = 1: KC in {4,8,16,32}.
template <int VEC>
bool dispatch(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t M, int K, cudaStream_t s) {
    constexpr int U = (VEC == 8) ? 1 : 4;  // unit of KC
    const int chunks = K / VEC;
    if (chunks <= WARP * 8 * U) {  // short rows: a warp per row
        const int k = (chunks + WARP - 1) / WARP;
        if (k <= 1 * U) launch_warp_row<VEC, 1 * U>(x, q, scale, M, K, s);
        else if (k <= 2 * U) launch_warp_row<VEC, 2 * U>(x, q, scale, M, K, s);
        else if (k <= 4 * U) launch_warp_row<VEC, 4 * U>(x, q, scale, M, K, s);
        else launch_warp_row<VEC, 8 * U>(x, q, scale, M, K, s);
        return true;
    }
    // A block per row: the fewest chunks per thread that keep the block at <= 256 threads, else the
    // fewest that fit the block's register budget (max_threads).
    for (int limit : {256, 1024}) {
        for (int k = 1; k <= 8; k *= 2) {
            const int t = (chunks + k * U - 1) / (k * U);
            if (t > limit || t > max_threads_rt(VEC, k * U)) continue;
            const int threads = (t + WARP - 1) / WARP * WARP;
            switch (k) {
                case 1: launch_block_row<VEC, 1 * U>(x, q, scale, M, K, threads, s); break;
                case 2: launch_block_row<VEC, 2 * U>(x, q, scale, M, K, threads, s); break;
                case 4: launch_block_row<VEC, 4 * U>(x, q, scale, M, K, threads, s); break;
                default: launch_block_row<VEC, 8 * U>(x, q, scale, M, K, threads, s); break;
            }
            return true;
        }
    }
    return false;
}

}  // namespace

extern "C" int entry(const __nv_bfloat16* x, uint8_t* q, float* scale, int64_t M, int64_t K,
                     cudaStream_t stream) {
    if (M <= 0 || K <= 0) return 0;
    if (K > INT32_MAX / 2 || M > 0x7fffffff) return (int)cudaErrorInvalidValue;
    const int k = (int)K;
    const bool aligned = (k % 8 == 0) && (reinterpret_cast<uintptr_t>(x) % 16 == 0) &&
                         (reinterpret_cast<uintptr_t>(q) % 8 == 0);
    const bool done = aligned ? dispatch<8>(x, q, scale, M, k, stream) : dispatch<1>(x, q, scale, M, k, stream);
    if (!done) {
        if (aligned) quant_loop<8><<<(unsigned)M, 1024, 0, stream>>>(x, q, scale, k);
        else quant_loop<1><<<(unsigned)M, 1024, 0, stream>>>(x, q, scale, k);
    }
    return (int)cudaGetLastError();
}
