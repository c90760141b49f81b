// Merge two partial attention outputs by log-sum-exp, bf16: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): memory-bound at ~1.5 flops per byte. The floor is reading both
// partial outputs and writing the merged one (6 bytes per element) plus 12 bytes of LSEs per (token,
// head): T = 8192, H = 32, D = 128 is ~204 MB, ~47 us at ~90% of peak. Eager PyTorch runs ~15 kernels
// (transposes, maximum, two subtracts and exps, a sum, two divisions, the bf16 -> fp32 casts of both
// outputs, two broadcast multiplies, an add, the cast back, log, add, transpose + contiguous) with fp32
// [T, H, D] intermediates: ~40 bytes per element. Expected: ~6-8x on the prefill shapes (not yet
// measured on the H200).
//
// Key ideas:
// - One pass: each thread owns 8 consecutive elements of one (token, head) row (a 16-byte load from each
//   partial output, one 16-byte store) and computes the row's weights from the two LSEs itself: the LSE
//   loads of the D/8 threads of a row coalesce to the same words (L1 broadcast), and the exps cost
//   nothing next to the memory time. One reciprocal per row: a / (a + b) and b / (a + b) as two products.
// - The thread holding a row's first vector writes output_lse = m + log(a + b).
// - 16-byte path when D % 8 == 0 and the pointers are 16-byte aligned; otherwise the same kernel with
//   one element per thread (rows off 16-byte boundaries). Two divisions per vector (by the vectors per
//   row and by H), in 32-bit whenever the indices fit (64-bit divisions would cost more issue slots
//   than the memory time allows). Nothing depends on the warp size.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <math.h>
#include <stdint.h>

namespace {

typedef __hip_bfloat16 bf16;
constexpr int THREADS = 256;

// VEC = 8: Elem = uint4 (8 bf16); VEC = 1: one bf16. W = vectors per (token, head) row. Idx: uint32_t
// whenever every index fits (the divisions then cost a few instructions), else int64_t.
template <int VEC, typename Idx>
__global__ void __launch_bounds__(THREADS) merge_states(const bf16* __restrict__ po, const float* __restrict__ pl,
                                                        const bf16* __restrict__ so, const float* __restrict__ sl,
                                                        bf16* __restrict__ out, float* __restrict__ out_lse,
                                                        Idx total, Idx T, Idx H, Idx W) {
    const Idx stride = (Idx)gridDim.x * THREADS;
    for (Idx i = (Idx)blockIdx.x * THREADS + threadIdx.x; i < total; i += stride) {
        const Idx row = i / W;  // row = t * H + h
        const Idx v = i - row * W;
        const Idx t = row / H;
        const Idx h = row - t * H;
        const Idx lse_at = h * T + t;
        const float p = pl[lse_at], s = sl[lse_at];
        const float m = fmaxf(p, s);
        const float a = __expf(p - m), b = __expf(s - m);
        const float tot = a + b;
        const float inv = 1.0f / tot;
        const float wa = a * inv, wb = b * inv;
        if (v == 0) out_lse[lse_at] = m + __logf(tot);
        if constexpr (VEC == 8) {
            const uint4 ra = reinterpret_cast<const uint4*>(po)[i];
            const uint4 rb = reinterpret_cast<const uint4*>(so)[i];
            const __hip_bfloat162* xa = reinterpret_cast<const __hip_bfloat162*>(&ra);
            const __hip_bfloat162* xb = reinterpret_cast<const __hip_bfloat162*>(&rb);
            uint4 ro;
            __hip_bfloat162* xo = reinterpret_cast<__hip_bfloat162*>(&ro);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 fa = __bfloat1622float2(xa[j]);
                const float2 fb = __bfloat1622float2(xb[j]);
                xo[j] = __floats2bfloat162_rn(fa.x * wa + fb.x * wb, fa.y * wa + fb.y * wb);
            }
            reinterpret_cast<uint4*>(out)[i] = ro;
        } else {
            out[i] = __float2bfloat16(__bfloat162float(po[i]) * wa + __bfloat162float(so[i]) * wb);
        }
    }
}

}  // namespace

extern "C" int entry(const __hip_bfloat16* prefix_output, const float* prefix_lse,
                     const __hip_bfloat16* suffix_output, const float* suffix_lse,
                     __hip_bfloat16* output, float* output_lse,
                     int64_t T, int64_t H, int64_t D, hipStream_t stream) {
    if (T <= 0 || H <= 0 || D <= 0) return 0;
    if (H > INT32_MAX || D > INT32_MAX) return (int)hipErrorInvalidValue;
    const uintptr_t any = reinterpret_cast<uintptr_t>(prefix_output) | reinterpret_cast<uintptr_t>(suffix_output) |
                          reinterpret_cast<uintptr_t>(output);
    const bool aligned = (D % 8 == 0) && (any % 16 == 0);
    const int W = (int)(aligned ? D / 8 : D);
    const int64_t total = T * H * W;
    // Enough blocks to fill the GPU many times over; the grid-stride loop covers the rest.
    const int64_t want = (total + THREADS - 1) / THREADS;
    const unsigned blocks = (unsigned)(want < 65536 * 8 ? want : 65536 * 8);
    const bool narrow = total + (int64_t)blocks * THREADS <= (int64_t)UINT32_MAX;  // i + stride never wraps
#define MERGE_LAUNCH(VEC, IDX)                                                                                   \
    hipLaunchKernelGGL((merge_states<VEC, IDX>), dim3(blocks), dim3(THREADS), 0, stream, prefix_output, prefix_lse, \
                       suffix_output, suffix_lse, output, output_lse, (IDX)total, (IDX)T, (IDX)H, (IDX)W)
    if (aligned && narrow) MERGE_LAUNCH(8, uint32_t);
    else if (aligned) MERGE_LAUNCH(8, int64_t);
    else if (narrow) MERGE_LAUNCH(1, uint32_t);
    else MERGE_LAUNCH(1, int64_t);
#undef MERGE_LAUNCH
    return (int)hipGetLastError();
}
