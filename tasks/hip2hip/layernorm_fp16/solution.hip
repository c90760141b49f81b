// LayerNorm, fp16 in and out, fp32 arithmetic: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): the op is memory-bound at 7 flops per 4 bytes. The floor is one read
// of x and one write of y (w and b stay in L2): for M = 8192, N = 4096 that is 134 MB, ~30 us at ~90% of
// peak. The baseline reads x three times with 2-byte scalar loads and runs two shared-memory tree
// reductions (8 barriers each); its re-reads mostly hit L1/L2, but the 2-byte accesses keep it at well
// under half of the bandwidth (LSU-bound: 32 lanes x 2 B = 64 B per load instruction). Expected: ~2x on
// the LLM shapes, ~1.5x or more on the short-row shapes (where the baseline's 256-thread blocks idle most
// threads and pay two block-wide tree reductions for a 1-2 KB row), ~1.3x on rows too wide for registers.
//
// Key ideas:
// - One read of x: each row is loaded once into registers (float v[K][VEC]); the mean and then the
//   centered variance are reduced from the registers (two-pass variance, numerically safe for the large
//   row offsets the inputs have), and y is written from the registers.
// - 16-byte accesses: when N % 8 == 0 and the pointers are 16-byte aligned each access moves 8 halves
//   (uint4); all K loads of a thread are issued before the first reduction. Otherwise (odd N: rows start
//   misaligned) the same kernel runs with VEC = 1: coalesced scalar loads, still one read of x.
// - Work per CTA sized to N: rows of <= 2048 elements get a group of 32 lanes per row, 8 rows per
//   256-thread block, reduced by xor-shuffles of offsets 16..1 only (they stay inside an aligned 32-lane
//   group on wave32 and wave64 alike: no shared memory, no barrier); longer rows get a block per row,
//   sized so each thread holds K in {1, 2, 4, 8} vectors, reduced with warpSize-wide shuffles and one
//   small shared array across warps. Block sizes are multiples of 64 so every warp is full on any
//   warp size.
// - Rows too long for registers (N > 32768 when aligned, N > 16384 otherwise) take a looping three-pass kernel (vectorized when aligned);
//   its re-reads of a row hit L2.
// - int64 row offsets, every index guarded (tails, M not a multiple of the rows per block); padded
//   register slots never enter the variance.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdint.h>

namespace {

constexpr int GROUP = 32;         // lanes per row in the short-row kernel: divides warpSize (32 or 64)
constexpr int GROUP_BLOCK = 256;  // 8 rows per block
constexpr int MAX_WARPS = 32;     // 1024 threads / 32 lanes: enough slots for any warp size

__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = GROUP / 2; o > 0; o >>= 1) v += __shfl_xor(v, o, GROUP);
    return v;
}

// Sum over the block (blockDim.x a multiple of warpSize). Every thread gets the total; `red` may be
// reused right after (the trailing barrier).
__device__ __forceinline__ float block_sum(float v, float* red) {
    for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor(v, o);
    const int lane = threadIdx.x % warpSize, wid = threadIdx.x / warpSize;
    const int nw = blockDim.x / warpSize;
    if (lane == 0) red[wid] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; ++i) t += red[i];
    __syncthreads();
    return t;
}

template <int VEC>
__device__ __forceinline__ void load_vec(const __half* p, float (&out)[VEC]) {
    if constexpr (VEC == 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __half22float2(h[j]);
            out[2 * j] = f.x;
            out[2 * j + 1] = f.y;
        }
    } else {
        out[0] = __half2float(*p);
    }
}

template <int VEC>
__device__ __forceinline__ void store_vec(__half* p, const float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        uint4 raw;
        __half2* h = reinterpret_cast<__half2*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
        *reinterpret_cast<uint4*>(p) = raw;
    } else {
        *p = __float2half(v[0]);
    }
}

// Row held in registers. GROUP_ROW: 32 lanes per row, blockDim/32 rows per block; otherwise a block per
// row. Lane r of a row owns chunks r, r + T, ..., r + (K-1)T (T lanes per row); chunk c covers elements
// [c*VEC, c*VEC + VEC). Requires N % VEC == 0.
template <int VEC, int K, bool GROUP_ROW, int MAX_THREADS>
__global__ void __launch_bounds__(MAX_THREADS) ln_regs(const __half* __restrict__ x, const __half* __restrict__ w,
                                                       const __half* __restrict__ b, __half* __restrict__ y,
                                                       int64_t M, int N, float inv_n, float eps) {
    int64_t row;
    int r, T;
    bool valid = true;
    if constexpr (GROUP_ROW) {
        row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
        r = threadIdx.x % GROUP;
        T = GROUP;
        valid = row < M;  // no early return: every lane takes part in the shuffles
    } else {
        row = blockIdx.x;
        r = threadIdx.x;
        T = blockDim.x;
    }
    const int chunks = N / VEC;
    const int64_t base = (valid ? row : 0) * (int64_t)N;
    const __half* xr = x + base;
    __half* yr = y + base;

    float v[K][VEC];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = r + i * T;
        if (valid && c < chunks) {
            load_vec<VEC>(xr + (int64_t)c * VEC, v[i]);
        } else {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += v[i][j];
    }
    __shared__ float red[GROUP_ROW ? 1 : MAX_WARPS];
    if constexpr (GROUP_ROW) s = group_sum(s);
    else s = block_sum(s, red);
    const float mean = s * inv_n;

    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = r + i * T;
        if (valid && c < chunks) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const float d = v[i][j] - mean;
                q += d * d;
            }
        }
    }
    if constexpr (GROUP_ROW) q = group_sum(q);
    else q = block_sum(q, red);
    const float rstd = rsqrtf(q * inv_n + eps);

#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = r + i * T;
        if (valid && c < chunks) {
            float g[VEC], h[VEC];
            load_vec<VEC>(w + (int64_t)c * VEC, g);
            load_vec<VEC>(b + (int64_t)c * VEC, h);
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[i][j] = (v[i][j] - mean) * rstd * g[j] + h[j];
            store_vec<VEC>(yr + (int64_t)c * VEC, v[i]);
        }
    }
}

// Rows too long for registers: a block of 512 threads per row, three passes (the re-reads hit L2).
template <int VEC>
__global__ void __launch_bounds__(512) ln_loop(const __half* __restrict__ x, const __half* __restrict__ w,
                                               const __half* __restrict__ b, __half* __restrict__ y, int N,
                                               float inv_n, float eps) {
    __shared__ float red[MAX_WARPS];
    const int64_t row = blockIdx.x;
    const int chunks = N / VEC;
    const __half* xr = x + row * (int64_t)N;
    __half* yr = y + row * (int64_t)N;

    float s = 0.0f;
#pragma unroll 4
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        float v[VEC];
        load_vec<VEC>(xr + (int64_t)c * VEC, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += v[j];
    }
    const float mean = block_sum(s, red) * inv_n;

    float q = 0.0f;
#pragma unroll 4
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        float v[VEC];
        load_vec<VEC>(xr + (int64_t)c * VEC, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float d = v[j] - mean;
            q += d * d;
        }
    }
    const float rstd = rsqrtf(block_sum(q, red) * inv_n + eps);

    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
        float v[VEC], g[VEC], h[VEC];
        load_vec<VEC>(xr + (int64_t)c * VEC, v);
        load_vec<VEC>(w + (int64_t)c * VEC, g);
        load_vec<VEC>(b + (int64_t)c * VEC, h);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = (v[j] - mean) * rstd * g[j] + h[j];
        store_vec<VEC>(yr + (int64_t)c * VEC, v);
    }
}

// The register budget caps the block size: with 16-byte vectors up to 32 floats of row per thread
// allow 1024 threads, 64 floats 512; the scalar path (more index registers per value) gets 1024 threads
// up to 16 values per thread, 512 up to 32, 256 up to 64.
constexpr int max_threads(int vec, int k) {
    return vec == 8 ? (k * vec <= 32 ? 1024 : 512) : (k <= 16 ? 1024 : (k <= 32 ? 512 : 256));
}

template <int VEC, int K>
void launch_block_row(const __half* x, const __half* w, const __half* b, __half* y, int64_t M, int N,
                      int threads, float inv_n, float eps, hipStream_t s) {
    hipLaunchKernelGGL((ln_regs<VEC, K, false, max_threads(VEC, K)>), dim3((unsigned)M), dim3(threads), 0, s,
                       x, w, b, y, M, N, inv_n, eps);
}

template <int VEC, int K>
void launch_group_row(const __half* x, const __half* w, const __half* b, __half* y, int64_t M, int N,
                      float inv_n, float eps, hipStream_t s) {
    constexpr int rows_per_block = GROUP_BLOCK / GROUP;
    const unsigned blocks = (unsigned)((M + rows_per_block - 1) / rows_per_block);
    hipLaunchKernelGGL((ln_regs<VEC, K, true, GROUP_BLOCK>), dim3(blocks), dim3(GROUP_BLOCK), 0, s,
                       x, w, b, y, M, N, inv_n, eps);
}

// Chunks per lane: K in {1, 2, 4, 8} for VEC = 8; the same register budget for VEC = 1 is K in {8..64}.
template <int VEC>
bool dispatch(const __half* x, const __half* w, const __half* b, __half* y, int64_t M, int N, float inv_n,
              float eps, hipStream_t s) {
    constexpr int U = (VEC == 8) ? 1 : 8;
    const int chunks = N / VEC;
    if (chunks <= GROUP * 8 * U) {  // short rows: 32 lanes per row
        const int k = (chunks + GROUP - 1) / GROUP;
        if (k <= 1 * U) launch_group_row<VEC, 1 * U>(x, w, b, y, M, N, inv_n, eps, s);
        else if (k <= 2 * U) launch_group_row<VEC, 2 * U>(x, w, b, y, M, N, inv_n, eps, s);
        else if (k <= 4 * U) launch_group_row<VEC, 4 * U>(x, w, b, y, M, N, inv_n, eps, s);
        else launch_group_row<VEC, 8 * U>(x, w, b, y, M, N, inv_n, eps, s);
        return true;
    }
    // A block per row: the fewest chunks per thread that keep the block at <= 256 threads, else the
    // fewest that fit the register budget of the block (max_threads). Threads rounded up to 64.
    for (int limit : {256, 1024}) {
        for (int k = 1; k <= 8; k *= 2) {
            const int t = (chunks + k * U - 1) / (k * U);
            if (t > limit || t > max_threads(VEC, k * U)) continue;
            const int threads = (t + 63) / 64 * 64;
            switch (k) {
                case 1: launch_block_row<VEC, 1 * U>(x, w, b, y, M, N, threads, inv_n, eps, s); break;
                case 2: launch_block_row<VEC, 2 * U>(x, w, b, y, M, N, threads, inv_n, eps, s); break;
                case 4: launch_block_row<VEC, 4 * U>(x, w, b, y, M, N, threads, inv_n, eps, s); break;
                default: launch_block_row<VEC, 8 * U>(x, w, b, y, M, N, threads, inv_n, eps, s); break;
            }
            return true;
        }
    }
    return false;
}

}  // namespace

extern "C" int entry(const __half* x, const __half* w, const __half* b, __half* y,
                     int64_t M, int64_t N, double eps, hipStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    if (N > INT32_MAX / 2) return (int)hipErrorInvalidValue;
    const int n = (int)N;
    const float inv_n = 1.0f / (float)N;
    const float e = (float)eps;
    const bool aligned = (n % 8 == 0) &&
                         ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                           reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(y)) % 16 == 0);
    const bool done = aligned ? dispatch<8>(x, w, b, y, M, n, inv_n, e, stream)
                              : dispatch<1>(x, w, b, y, M, n, inv_n, e, stream);
    if (!done) {
        if (aligned) hipLaunchKernelGGL(ln_loop<8>, dim3((unsigned)M), dim3(512), 0, stream, x, w, b, y, n, inv_n, e);
        else hipLaunchKernelGGL(ln_loop<1>, dim3((unsigned)M), dim3(512), 0, stream, x, w, b, y, n, inv_n, e);
    }
    return (int)hipGetLastError();
}
