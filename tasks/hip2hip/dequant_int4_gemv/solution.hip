// Int4 weight-only GEMV (group 128), fp16 activations, fp32 accumulation: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): the floor is one read of the packed codes (K/2 bytes a row) plus the
// scales and zeros (K/32 bytes a row); x (<= 460 KB) stays in L1/L2. Llama-3-8B gate+up (28672 x 4096)
// is 62 MB: ~14 us at ~90% of peak. At B = 8 the dequantize-and-FMA work (~11 fp32 ops per weight) makes
// it ALU-bound on CUDA cores (~1/3 of the bandwidth roofline); tensor cores (Marlin-style) would be the
// next step, out of reach of portable HIP here. The baseline reads 4-byte words per thread, reloads the
// scale and zero for every word, re-reads x with scalar 2-byte loads for every weight and token (8 loads
// per weight at B = 8), and runs an 8-array shared-memory tree reduction. Expected ~2-3x at B = 1, more
// at B = 8.
//
// Key ideas:
// - 16-byte code loads: a thread takes a 32-column chunk of a row (4 words, all inside one group of 128),
//   consecutive threads consecutive chunks (coalesced 512 B per warp and row); R = 4 rows per block, so
//   each x vector loaded (16 B, from L1) serves 4 rows.
// - Zero point factored out of the inner loop: sum_k (q - z) s x = s * (sum_k q x - z * sum_k x) over the
//   chunk (one group), so the inner loop is q -> float (magic-number trick: the bits 0x4B000000 | q are
//   the float 2^23 + q; one subtraction gives q exactly, no int-to-float conversion) and one FMA per token;
//   sum_k x is shared by the R rows. fp32 throughout, every partial exact up to fp32 rounding.
// - B is a template parameter (1..8): the per-token accumulators live in registers, no local memory.
// - Fixed-order reduction: xor-shuffles within warps, then a 4-slot shared array summed in order
//   (deterministic, no atomics).
// - Needs 16-byte aligned x and qweight (K % 128 == 0 makes every row aligned then); otherwise the
//   scalar kernel of the same structure runs.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdint.h>

namespace {

constexpr int THREADS = 128;
constexpr int WARPS_MAX = THREADS / 32;  // slots for any warp size >= 32
constexpr int R = 4;                     // rows per block
constexpr int GROUP = 128;
constexpr int CHUNK = 32;                // columns per thread per step (4 packed words, 16 bytes)

__device__ __forceinline__ float code(uint32_t word, int e) {
    return __int_as_float(0x4B000000u | ((word >> (4 * e)) & 15u)) - 8388608.0f;
}

__device__ __forceinline__ void half8(const uint4& u, float (&f)[8]) {
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 v = __half22float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}

// Sum over the block of THREADS threads, in a fixed order; result valid in thread 0.
__device__ __forceinline__ float block_sum(float v, float* red, int slot) {
    for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor(v, o);
    const int lane = threadIdx.x % warpSize, wid = threadIdx.x / warpSize;
    if (lane == 0) red[slot * WARPS_MAX + wid] = v;
    return v;
}

template <int NB>
__global__ void __launch_bounds__(THREADS) gemv_int4(const __half* __restrict__ x, const int32_t* __restrict__ qweight,
                                                     const __half* __restrict__ scales,
                                                     const __half* __restrict__ zeros, __half* __restrict__ y,
                                                     int N, int K) {
    __shared__ float red[NB * R * WARPS_MAX];
    const int n0 = blockIdx.x * R;
    const int chunks = K / CHUNK, groups = K / GROUP, words = K / 8;
    const uint4* qrow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int n = min(n0 + r, N - 1);  // rows past N compute a copy of the last row, never written
        qrow[r] = reinterpret_cast<const uint4*>(qweight + (int64_t)n * words);
    }
    float acc[NB][R];
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[b][r] = 0.0f;

    for (int c = threadIdx.x; c < chunks; c += THREADS) {
        uint4 q[R];
        float s[R], z[R];
        const int g = c / (GROUP / CHUNK);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            q[r] = __ldg(qrow[r] + c);
            const int64_t gi = (int64_t)min(n0 + r, N - 1) * groups + g;
            s[r] = __half2float(scales[gi]);
            z[r] = __half2float(zeros[gi]);
        }
        float dot[NB][R], sx[NB];
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            sx[b] = 0.0f;
#pragma unroll
            for (int r = 0; r < R; ++r) dot[b][r] = 0.0f;
        }
#pragma unroll
        for (int t = 0; t < 4; ++t) {  // word t of the chunk: columns 32c + 8t .. 32c + 8t + 7
            float qf[R][8];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const uint32_t word = (t == 0) ? q[r].x : (t == 1) ? q[r].y : (t == 2) ? q[r].z : q[r].w;
#pragma unroll
                for (int e = 0; e < 8; ++e) qf[r][e] = code(word, e);
            }
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                float xv[8];
                half8(*reinterpret_cast<const uint4*>(x + (int64_t)b * K + (int64_t)c * CHUNK + 8 * t), xv);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    sx[b] += xv[e];
#pragma unroll
                    for (int r = 0; r < R; ++r) dot[b][r] = fmaf(qf[r][e], xv[e], dot[b][r]);
                }
            }
        }
#pragma unroll
        for (int b = 0; b < NB; ++b)
#pragma unroll
            for (int r = 0; r < R; ++r) acc[b][r] = fmaf(s[r], dot[b][r] - z[r] * sx[b], acc[b][r]);
    }

#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
        for (int r = 0; r < R; ++r) block_sum(acc[b][r], red, b * R + r);
    __syncthreads();
    const int nw = THREADS / warpSize;
    if (threadIdx.x < NB * R) {
        const int b = threadIdx.x / R, r = threadIdx.x % R;
        float t = 0.0f;
        for (int i = 0; i < nw; ++i) t += red[threadIdx.x * WARPS_MAX + i];
        if (n0 + r < N) y[(int64_t)b * N + n0 + r] = __float2half(t);
    }
}

// Any alignment: one block per row, 4-byte code words, scalar x loads, same math and fixed-order sums.
__global__ void __launch_bounds__(THREADS) gemv_int4_scalar(const __half* __restrict__ x,
                                                            const int32_t* __restrict__ qweight,
                                                            const __half* __restrict__ scales,
                                                            const __half* __restrict__ zeros,
                                                            __half* __restrict__ y, int B, int N, int K) {
    __shared__ float red[8 * WARPS_MAX];
    const int n = blockIdx.x;
    const int words = K / 8, groups = K / GROUP;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = threadIdx.x; j < words; j += THREADS) {
        const uint32_t word = (uint32_t)qweight[(int64_t)n * words + j];
        const int64_t gi = (int64_t)n * groups + j / (GROUP / 8);
        const float s = __half2float(scales[gi]), z = __half2float(zeros[gi]);
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            if (b < B) {
                float d = 0.0f, sx = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float xv = __half2float(x[(int64_t)b * K + 8 * j + e]);
                    d = fmaf(code(word, e), xv, d);
                    sx += xv;
                }
                acc[b] = fmaf(s, d - z * sx, acc[b]);
            }
        }
    }
#pragma unroll
    for (int b = 0; b < 8; ++b) block_sum(acc[b], red, b);
    __syncthreads();
    if ((int)threadIdx.x < B) {
        float t = 0.0f;
        for (int i = 0; i < THREADS / warpSize; ++i) t += red[threadIdx.x * WARPS_MAX + i];
        y[(int64_t)threadIdx.x * N + n] = __float2half(t);
    }
}

template <int NB>
void launch(const __half* x, const int32_t* qw, const __half* s, const __half* z, __half* y, int N, int K,
            hipStream_t st) {
    hipLaunchKernelGGL(gemv_int4<NB>, dim3((unsigned)((N + R - 1) / R)), dim3(THREADS), 0, st, x, qw, s, z, y, N, K);
}

}  // namespace

extern "C" int entry(const __half* x, const int32_t* qweight, const __half* scales, const __half* zeros,
                     __half* y, int64_t B, int64_t N, int64_t K, hipStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    if (B > 8 || K <= 0 || K % GROUP != 0 || K > INT32_MAX / 16 || N > INT32_MAX) return (int)hipErrorInvalidValue;
    const int n = (int)N, k = (int)K;
    const bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(qweight)) % 16) == 0;
    if (!aligned) {
        hipLaunchKernelGGL(gemv_int4_scalar, dim3((unsigned)n), dim3(THREADS), 0, stream, x, qweight, scales, zeros,
                           y, (int)B, n, k);
        return (int)hipGetLastError();
    }
    switch (B) {
        case 1: launch<1>(x, qweight, scales, zeros, y, n, k, stream); break;
        case 2: launch<2>(x, qweight, scales, zeros, y, n, k, stream); break;
        case 3: launch<3>(x, qweight, scales, zeros, y, n, k, stream); break;
        case 4: launch<4>(x, qweight, scales, zeros, y, n, k, stream); break;
        case 5: launch<5>(x, qweight, scales, zeros, y, n, k, stream); break;
        case 6: launch<6>(x, qweight, scales, zeros, y, n, k, stream); break;
        case 7: launch<7>(x, qweight, scales, zeros, y, n, k, stream); break;
        default: launch<8>(x, qweight, scales, zeros, y, n, k, stream); break;
    }
    return (int)hipGetLastError();
}
