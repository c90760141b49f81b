// Matrix-vector product y = A x, fp32: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): 2 flops per 4-byte matrix entry, so the op is purely memory-bound;
// the floor is one read of A (x stays in L1/L2). M = 4096, K = 4096 is 67 MB: ~16 us at ~90% of peak.
// The baseline gives each row to one thread: a warp's load touches 32 different rows (32 cache lines,
// 4 useful bytes each per instruction), so it depends on L1 keeping those lines alive for 32 iterations,
// and it has only M threads of parallelism (M / 128 blocks: 32 SMs busy for M = 4096). It reaches a
// small fraction of the bandwidth: expected speedup ~4-8x on the square shapes, ~2-3x at M = 14336, and
// more on few-row or short-row shapes; near the roofline everywhere.
//
// Key ideas:
// - A group of LPR lanes per row (LPR in {4, 8, 16, 32}, chosen so each lane gets >= 4 vectors): the
//   group reads its row contiguously, so a warp's load is fully coalesced. LPR <= 32 and the group
//   reduction uses xor-shuffles of width LPR only, which stay inside an aligned group on wave32 and
//   wave64 alike. Short rows (K = 64) get 4 lanes per row instead of wasting a warp on 16 vectors.
// - 16-byte loads (float4) when K % 4 == 0 and A, x are 16-byte aligned; otherwise coalesced scalar loads.
// - Four independent accumulators and four loads in flight per lane (unrolled by 4), so each SM keeps
//   enough bytes in flight to cover HBM latency; fixed per-lane summation order (deterministic).
// - Few rows (M < 1024) but long ones: a 256-thread block per row instead, reduced with warpSize-wide
//   shuffles and a small shared array, so the whole GPU streams even when M is small.
// - int64 row offsets; every row guarded (M need not divide the rows per block); no early return before
//   the shuffles.
#include <hip/hip_runtime.h>
#include <stdint.h>

namespace {

constexpr int BLOCK = 256;
constexpr int MAX_WARPS = BLOCK / 32;  // enough slots for any warp size >= 32

template <int VEC>
struct Vec;
template <>
struct Vec<4> {
    static __device__ __forceinline__ float dot(const float* a, const float* x, int c) {
        const float4 u = reinterpret_cast<const float4*>(a)[c];
        const float4 v = reinterpret_cast<const float4*>(x)[c];
        return u.x * v.x + u.y * v.y + u.z * v.z + u.w * v.w;
    }
};
template <>
struct Vec<1> {
    static __device__ __forceinline__ float dot(const float* a, const float* x, int c) { return a[c] * x[c]; }
};

// Partial dot product of one lane: vectors c0, c0 + stride, ... below nv, four in flight.
template <int VEC>
__device__ __forceinline__ float lane_dot(const float* __restrict__ a, const float* __restrict__ x, int c0,
                                          int stride, int nv) {
    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    int c = c0;
    for (; c + 3 * stride < nv; c += 4 * stride) {
        acc0 += Vec<VEC>::dot(a, x, c);
        acc1 += Vec<VEC>::dot(a, x, c + stride);
        acc2 += Vec<VEC>::dot(a, x, c + 2 * stride);
        acc3 += Vec<VEC>::dot(a, x, c + 3 * stride);
    }
    for (; c < nv; c += stride) acc0 += Vec<VEC>::dot(a, x, c);
    return (acc0 + acc1) + (acc2 + acc3);
}

// LPR lanes per row, BLOCK / LPR rows per block.
template <int LPR, int VEC>
__global__ void __launch_bounds__(BLOCK) gemv_group_rows(const float* __restrict__ A, const float* __restrict__ x,
                                                         float* __restrict__ y, int64_t M, int K) {
    const int64_t row = (int64_t)blockIdx.x * (BLOCK / LPR) + threadIdx.x / LPR;
    const int lane = threadIdx.x % LPR;
    const bool valid = row < M;  // no early return: every lane takes part in the shuffles
    const int nv = K / VEC;
    float s = 0.0f;
    if (valid) s = lane_dot<VEC>(A + row * (int64_t)K, x, lane, LPR, nv);
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) s += __shfl_xor(s, o, LPR);
    if (valid && lane == 0) y[row] = s;
}

// One block per row (few, long rows).
template <int VEC>
__global__ void __launch_bounds__(BLOCK) gemv_block_row(const float* __restrict__ A, const float* __restrict__ x,
                                                        float* __restrict__ y, int K) {
    __shared__ float red[MAX_WARPS];
    const int64_t row = blockIdx.x;
    const int nv = K / VEC;
    float s = lane_dot<VEC>(A + row * (int64_t)K, x, threadIdx.x, BLOCK, nv);
    for (int o = warpSize / 2; o > 0; o >>= 1) s += __shfl_xor(s, o);
    const int lane = threadIdx.x % warpSize, wid = threadIdx.x / warpSize;
    if (lane == 0) red[wid] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int i = 0; i < BLOCK / warpSize; ++i) t += red[i];
        y[row] = t;
    }
}

template <int VEC>
void launch(const float* A, const float* x, float* y, int64_t M, int K, hipStream_t s) {
    const int nv = K / VEC;
    if (M < 1024 && K >= 4096) {
        hipLaunchKernelGGL(gemv_block_row<VEC>, dim3((unsigned)M), dim3(BLOCK), 0, s, A, x, y, K);
        return;
    }
    // Lanes per row: the largest of 32, 16, 8, 4 that still gives each lane >= 4 vectors (at least 4).
    int lpr = 32;
    while (lpr > 4 && nv < 4 * lpr) lpr /= 2;
    const unsigned blocks = (unsigned)((M + BLOCK / lpr - 1) / (BLOCK / lpr));
    switch (lpr) {
        case 32: hipLaunchKernelGGL((gemv_group_rows<32, VEC>), dim3(blocks), dim3(BLOCK), 0, s, A, x, y, M, K); break;
        case 16: hipLaunchKernelGGL((gemv_group_rows<16, VEC>), dim3(blocks), dim3(BLOCK), 0, s, A, x, y, M, K); break;
        case 8: hipLaunchKernelGGL((gemv_group_rows<8, VEC>), dim3(blocks), dim3(BLOCK), 0, s, A, x, y, M, K); break;
        default: hipLaunchKernelGGL((gemv_group_rows<4, VEC>), dim3(blocks), dim3(BLOCK), 0, s, A, x, y, M, K); break;
    }
}

}  // namespace

extern "C" int entry(const float* A, const float* x, float* y, int64_t M, int64_t K, hipStream_t stream) {
    if (M <= 0) return 0;
    if (K > INT32_MAX / 2) return (int)hipErrorInvalidValue;
    const int k = (int)K;
    const bool aligned = (k % 4 == 0) &&
                         ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(x)) % 16 == 0);
    if (aligned) launch<4>(A, x, y, M, k, stream);
    else launch<1>(A, x, y, M, k, stream);
    return (int)hipGetLastError();
}
