// Decode-time GEMV, y[B, N] = x[B, K] W[N, K]^T, bf16 in and out, fp32 accumulation: the expert version.
//
// Cost model: memory-bound on W (N*K*2 bytes: 117-470 MB on the visible configs, ~25-120 us at the
// H200's ~4 TB/s); x (<= 16 tokens) stays in L1/L2. With 16 tokens the fp32 FMAs alone (16 per weight)
// would take about as long as the weight stream on the CUDA cores, so the products go to the tensor cores.
//
// Key ideas:
// - Tensor cores for any B: mma.sync m16n8k16 (bf16 x bf16 -> fp32 accumulators) with 16 rows of W as
//   the M side and the tokens as the N side (8 per n-tile: one tile for B <= 8, two for B <= 16; missing
//   tokens are zeros). Tokens cost registers and tensor-core slots, not weight traffic.
// - Plain 16-byte loads straight into the mma fragments, no shared memory staging, no ldmatrix: a dot
//   product does not care in which order k is summed, so any permutation of k applied to both operands
//   gives the same product. Lane (g = lane / 4, t = lane % 4) loads W[row g][k0+8t .. k0+8t+7] and
//   W[row g+8][same] (one uint4 each) and x[token g][same]; words 0-1 of those uint4 feed the A/B
//   fragment slots {2t, 2t+1, 2t+8, 2t+9} of one mma, words 2-3 those of a second: two mmas cover 32 k.
//   A warp's step reads 64 contiguous bytes of each of its 16*MT rows.
// - Several row tiles per warp (MT = 1, 2, 4 by N) share each x fragment (less x traffic per weight byte);
//   each thread keeps 8 16-byte weight loads (128 bytes) in flight. Software pipeline: the next U steps'
//   loads are issued, unconditionally (out-of-range ones masked after), before the current steps' mmas
//   (left alone, ptxas interleaves each load with its mma and only ~3 loads are in flight). Weights are
//   loaded with ld.global.nc.L1::no_allocate (streamed once, kept out of L1 where x lives).
// - Split-K over the S warps of a block (S = 1-16, sized so the grid has ~16 warps per SM even for
//   N = 1024 rows): warp w takes k-steps w, w + S, ...; the S partial fragments are summed through shared
//   memory in a fixed order (deterministic), then written as bf16. Every row of W is read exactly once.
// - Rows of W or x that are not 16-byte aligned (K % 8 != 0) take a scalar CUDA-core fallback: a warp per
//   output row, B accumulators in registers, shuffle reduction.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int WARP = 32;
constexpr int MAX_B = 16;
constexpr int TARGET_WARPS = 132 * 16;  // ~16 resident warps on each of the H200's 132 SMs

__device__ __forceinline__ uint4 ld_stream(const __nv_bfloat16* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// d += A (16x16, row) * B (16x8, col); bf16 in, fp32 accumulators.
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

// Loads of k-steps s0, s0 + S, ..., s0 + (U-1)S of this lane: W rows (2 per row tile) and x tokens. Every
// load is issued unconditionally (an out-of-range chunk reads the row's first 8 elements instead and is
// flagged in kok; rows past N and tokens past nb read row / token 0), so none waits on a branch.
template <int MT, int NT, int U>
__device__ __forceinline__ void load_steps(uint4 (&wv)[U][MT][2], uint4 (&xv)[U][NT], bool (&kok)[U],
                                           const __nv_bfloat16* const (&wrow)[MT][2],
                                           const __nv_bfloat16* const (&xrow)[NT], int s0, int S, int steps,
                                           int K, int t) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int s = s0 + u * S;
        kok[u] = s < steps && s * 32 + 8 * t < K;  // the 8-element chunk is inside the row (K % 8 == 0)
        const int k = kok[u] ? s * 32 : -8 * t;  // out of range: the row's first chunk (always inside it)
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) wv[u][m][h] = ld_stream(wrow[m][h] + k);
#pragma unroll
        for (int n = 0; n < NT; ++n) xv[u][n] = __ldg(reinterpret_cast<const uint4*>(xrow[n] + k));
    }
}

// Block: S = blockDim.x / 32 warps over 16*MT rows of W starting at blockIdx.x * 16*MT; NT n-tiles of 8
// tokens (nb <= 8*NT tokens); U k-steps of 32 per warp per iteration. Requires K % 8 == 0 and 16-byte
// aligned x and W. Shared memory (dynamic): S * (8*NT) * (16*MT) floats.
template <int MT, int NT, int U, int MAX_THREADS>
__global__ void __launch_bounds__(MAX_THREADS) gemv_mma(const __nv_bfloat16* __restrict__ x,
                                                        const __nv_bfloat16* __restrict__ W,
                                                        __nv_bfloat16* __restrict__ y, int nb, int N, int K) {
    constexpr int RB = 16 * MT, BT = 8 * NT;
    extern __shared__ float red[];  // [S][BT][RB]
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, S = blockDim.x / WARP;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * RB;

    const __nv_bfloat16* wrow[MT][2];
    bool wok[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = row0 + m * 16 + g + 8 * h;
            wok[m][h] = r < N;
            wrow[m][h] = W + (int64_t)(wok[m][h] ? r : 0) * K + 8 * t;
        }
    const __nv_bfloat16* xrow[NT];
    bool xok[NT];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const int b = n * 8 + g;
        xok[n] = b < nb;
        xrow[n] = x + (int64_t)(xok[n] ? b : 0) * K + 8 * t;
    }

    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[m][n][j] = 0.0f;

    // Software pipeline: the loads of the next U steps are issued before the mmas of the current ones, so
    // they are in flight while those run (ptxas would otherwise interleave each load with its mma).
    const int steps = (K + 31) / 32;
    const int stride = U * S;
    uint4 wv[U][MT][2], xv[U][NT];
    bool kok[U];
    load_steps<MT, NT, U>(wv, xv, kok, wrow, xrow, warp, S, steps, K, t);
    for (int s0 = warp; s0 < steps; s0 += stride) {
        uint4 wn[U][MT][2], xn[U][NT];
        bool kn[U];
        load_steps<MT, NT, U>(wn, xn, kn, wrow, xrow, s0 + stride, S, steps, K, t);
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int m = 0; m < MT; ++m)
#pragma unroll
                for (int n = 0; n < NT; ++n) {
                    // Out-of-range chunks, rows or tokens contribute zeros.
                    const bool okw0 = kok[u] && wok[m][0], okw1 = kok[u] && wok[m][1], okx = kok[u] && xok[n];
                    const uint4 a0 = okw0 ? wv[u][m][0] : zero4(), a1 = okw1 ? wv[u][m][1] : zero4();
                    const uint4 b = okx ? xv[u][n] : zero4();
                    // k0+8t+{0,1} -> slots {2t,2t+1}, k0+8t+{2,3} -> {2t+8,2t+9} of the first mma;
                    // k0+8t+{4..7} likewise of the second. A: rows g (a0) and g + 8 (a1).
                    mma16816(acc[m][n], a0.x, a1.x, a0.y, a1.y, b.x, b.y);
                    mma16816(acc[m][n], a0.z, a1.z, a0.w, a1.w, b.z, b.w);
                }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            kok[u] = kn[u];
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                wv[u][m][0] = wn[u][m][0];
                wv[u][m][1] = wn[u][m][1];
            }
#pragma unroll
            for (int n = 0; n < NT; ++n) xv[u][n] = xn[u][n];
        }
    }

    // Accumulator fragment: acc[m][n][0..1] = rows m*16+g, tokens n*8+2t, +1; [2..3] = rows m*16+g+8.
    float* mine = red + (size_t)warp * BT * RB;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int r = m * 16 + g + 8 * (j >> 1);
                const int b = n * 8 + 2 * t + (j & 1);
                mine[b * RB + r] = acc[m][n][j];
            }
    __syncthreads();
    for (int idx = threadIdx.x; idx < BT * RB; idx += blockDim.x) {
        const int b = idx / RB, r = idx % RB;
        if (b >= nb || row0 + r >= N) continue;
        float sum = 0.0f;
        for (int w = 0; w < S; ++w) sum += red[(size_t)w * BT * RB + idx];  // fixed order: deterministic
        y[(int64_t)b * N + row0 + r] = __float2bfloat16(sum);
    }
}

// Fallback (misaligned rows): 8 warps per block, a warp per row of W, scalar loads, nb <= MAX_B tokens.
__global__ void __launch_bounds__(256) gemv_scalar(const __nv_bfloat16* __restrict__ x,
                                                   const __nv_bfloat16* __restrict__ W,
                                                   __nv_bfloat16* __restrict__ y, int nb, int N, int K) {
    const int lane = threadIdx.x % WARP;
    const int row = blockIdx.x * 8 + threadIdx.x / WARP;
    if (row >= N) return;  // whole warps leave
    const __nv_bfloat16* wr = W + (int64_t)row * K;
    float acc[MAX_B];
#pragma unroll
    for (int b = 0; b < MAX_B; ++b) acc[b] = 0.0f;
    for (int k = lane; k < K; k += WARP) {
        const float w = __bfloat162float(__ldg(wr + k));
#pragma unroll
        for (int b = 0; b < MAX_B; ++b)
            if (b < nb) acc[b] += w * __bfloat162float(__ldg(x + (int64_t)b * K + k));
    }
#pragma unroll
    for (int b = 0; b < MAX_B; ++b) {
        float v = acc[b];
#pragma unroll
        for (int o = WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0 && b < nb) y[(int64_t)b * N + row] = __float2bfloat16(v);
    }
}

template <int MT, int NT>
void launch_mma(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int nb, int N, int K,
                cudaStream_t st) {
    constexpr int RB = 16 * MT;
    constexpr int U = 4 / MT;                           // 8 weight uint4 per thread in flight
    constexpr int MAX_S = MT == 4 ? 8 : 16;             // keeps shared memory <= 32 KB, registers in budget
    constexpr int MAX_THREADS = MAX_S * WARP;
    const int blocks = (N + RB - 1) / RB;
    const int steps = (K + 31) / 32;
    int S = 1;
    while (S < MAX_S && blocks * S < TARGET_WARPS && 2 * S * U <= steps) S *= 2;
    const size_t smem = (size_t)S * (8 * NT) * RB * sizeof(float);
    gemv_mma<MT, NT, U, MAX_THREADS><<<blocks, S * WARP, smem, st>>>(x, W, y, nb, N, K);
}

template <int NT>
void launch_aligned(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int nb, int N, int K,
                    cudaStream_t st) {
    if (N >= 16384) launch_mma<4, NT>(x, W, y, nb, N, K, st);
    else if (N >= 4096) launch_mma<2, NT>(x, W, y, nb, N, K, st);
    else launch_mma<1, NT>(x, W, y, nb, N, K, st);
}

}  // namespace

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y,
                     int64_t B, int64_t N, int64_t K, cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    if (N > 0x7fffffff || K > 0x7fffffff || K <= 0) return (int)cudaErrorInvalidValue;
    const int n = (int)N, k = (int)K;
    const bool aligned = (k % 8 == 0) &&
                         ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(W)) % 16 == 0);
    for (int64_t b0 = 0; b0 < B; b0 += MAX_B) {  // tokens in groups of at most 16
        const int nb = (int)(B - b0 < MAX_B ? B - b0 : MAX_B);
        const __nv_bfloat16* xb = x + b0 * K;
        __nv_bfloat16* yb = y + b0 * N;
        if (!aligned) gemv_scalar<<<(unsigned)((n + 7) / 8), 256, 0, stream>>>(xb, W, yb, nb, n, k);
        else if (nb <= 8) launch_aligned<1>(xb, W, yb, nb, n, k, stream);
        else launch_aligned<2>(xb, W, yb, nb, n, k, stream);
    }
    return (int)cudaGetLastError();
}
