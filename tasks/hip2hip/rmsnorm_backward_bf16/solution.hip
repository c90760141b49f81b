// RMSNorm backward, bf16 activations, fp32 arithmetic: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): memory-bound. The floor is one read of x and dy and one write of dx
// (6 bytes per element); dw needs a second read of x and dy here (4 more bytes per element: a fused
// single pass needs a cross-block reduction of per-chunk partials, and without a workspace or float
// atomics there is nowhere deterministic to put them), so this version moves 10 bytes per element:
// M = 8192, N = 4096 is 335 MB, ~80 us at ~90% of peak. The baseline's dw kernel gives one thread to each
// column and walks all M rows in order: N / 256 blocks (16 for N = 4096) on 132 SMs, a few hundred GB/s
// at best; its dx kernel reads each row twice with 2-byte loads and runs a 256-thread block (8-barrier
// tree reduction) per row. Expected: ~5-10x on the training shapes (most of it from dw), ~2x+ on the
// short-row shapes (not yet measured on the H200).
//
// Key ideas:
// - dx, one read of the row: each row's x and dy are loaded once with 16-byte loads (8 bf16) and kept in
//   registers as raw bf16 (two uint4 per vector, half the registers of floats); sum_j dy*w*x is reduced,
//   then dx = rstd * (dy*w - x*rstd * c), c = rstd * sum / N, is written from the registers (w re-read
//   from L1/L2). Rows of <= 1024 elements get 32 lanes per row (8 rows per 256-thread block, xor-shuffles
//   of offsets 16..1, which stay inside an aligned 32-lane group on wave32 and wave64); longer rows get a
//   block per row sized so each thread holds K in {1, 2, 4, 8} vectors, reduced with warpSize-wide
//   shuffles and a small shared array. Rows too long for registers and rows off 16-byte boundaries
//   (N % 8 != 0) take a looping two-pass kernel (scalar accesses when misaligned).
// - dw, the whole GPU and deterministic: a block owns a strip of 8*SV columns and all M rows; its 256
//   threads are SV column lanes x 256/SV row lanes, each summing dy * x * rstd over every (256/SV)-th row
//   (four rows' 16-byte loads in flight), then a fixed-order shared-memory tree over the row lanes. SV is
//   chosen so there are ~200+ strips (64-byte row segments when N allows, never under 16 bytes). No
//   atomics: the same inputs give the same bits every call.
// - int64 row offsets, every index guarded; block sizes multiples of 64 (full warps on any warp size).
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

namespace {

typedef __hip_bfloat16 bf16;

constexpr int GROUP = 32;
constexpr int GROUP_BLOCK = 256;
constexpr int MAX_WARPS = 32;
constexpr int LOOP_THREADS = 512;
constexpr int DW_THREADS = 256;
constexpr int DW_UNROLL = 4;

__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = GROUP / 2; o > 0; o >>= 1) v += __shfl_xor(v, o, GROUP);
    return v;
}

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

__device__ __forceinline__ void unpack8(const uint4& raw, float (&f)[8]) {
    const __hip_bfloat162* h = reinterpret_cast<const __hip_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 p = __bfloat1622float2(h[j]);
        f[2 * j] = p.x;
        f[2 * j + 1] = p.y;
    }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 raw;
    __hip_bfloat162* h = reinterpret_cast<__hip_bfloat162*>(&raw);
#pragma unroll
    for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    return raw;
}

// sum_j dy*w*x over one 8-vector.
__device__ __forceinline__ float dot8(const uint4& xr, const uint4& dyr, const uint4& wr) {
    float a[8], b[8], c[8];
    unpack8(xr, a);
    unpack8(dyr, b);
    unpack8(wr, c);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += b[j] * c[j] * a[j];
    return s;
}

// dx = r * (dy*w - x*r*c) over one 8-vector.
__device__ __forceinline__ uint4 dx8(const uint4& xr, const uint4& dyr, const uint4& wr, float r, float c) {
    float a[8], b[8], g[8], o[8];
    unpack8(xr, a);
    unpack8(dyr, b);
    unpack8(wr, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = r * (b[j] * g[j] - a[j] * r * c);
    return pack8(o);
}

// dx, rows held in registers (16-byte path, N % 8 == 0). GROUP_ROW: 32 lanes per row; otherwise a block
// per row. Lane q of a row owns vectors q, q + T, ..., q + (K-1)T.
template <int K, bool GROUP_ROW, int MAX_THREADS>
__global__ void __launch_bounds__(MAX_THREADS) dx_regs(const uint4* __restrict__ x, const uint4* __restrict__ w,
                                                       const float* __restrict__ rstd, const uint4* __restrict__ dy,
                                                       uint4* __restrict__ dx, int64_t M, int V, float inv_n) {
    int64_t row;
    int q, T;
    bool valid = true;
    if constexpr (GROUP_ROW) {
        row = (int64_t)blockIdx.x * (blockDim.x / GROUP) + threadIdx.x / GROUP;
        q = threadIdx.x % GROUP;
        T = GROUP;
        valid = row < M;  // no early return: every lane takes part in the shuffles
    } else {
        row = blockIdx.x;
        q = threadIdx.x;
        T = blockDim.x;
    }
    const int64_t base = (valid ? row : 0) * (int64_t)V;
    uint4 xv[K], dv[K];
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = q + i * T;
        if (valid && c < V) {
            xv[i] = x[base + c];
            dv[i] = dy[base + c];
        }
    }
    const float r = valid ? rstd[row] : 0.0f;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = q + i * T;
        if (valid && c < V) s += dot8(xv[i], dv[i], w[c]);
    }
    __shared__ float red[GROUP_ROW ? 1 : MAX_WARPS];
    if constexpr (GROUP_ROW) s = group_sum(s);
    else s = block_sum(s, red);
    const float cm = r * s * inv_n;  // mean_j(g * xhat)
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = q + i * T;
        if (valid && c < V) dx[base + c] = dx8(xv[i], dv[i], w[c], r, cm);
    }
}

// dx, any row: a block of LOOP_THREADS per row, two passes (the second re-reads the row from L2).
// VEC = 8: 16-byte accesses (N % 8 == 0, aligned); VEC = 1: scalar.
template <int VEC>
__global__ void __launch_bounds__(LOOP_THREADS) dx_loop(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                        const float* __restrict__ rstd, const bf16* __restrict__ dy,
                                                        bf16* __restrict__ dx, int N, float inv_n) {
    __shared__ float red[MAX_WARPS];
    const int64_t base = (int64_t)blockIdx.x * N;
    const float r = rstd[blockIdx.x];
    const int chunks = N / VEC;
    float s = 0.0f;
    if constexpr (VEC == 8) {
        const uint4* xr = reinterpret_cast<const uint4*>(x + base);
        const uint4* dr = reinterpret_cast<const uint4*>(dy + base);
        const uint4* wr = reinterpret_cast<const uint4*>(w);
#pragma unroll 2
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) s += dot8(xr[c], dr[c], wr[c]);
        const float cm = r * block_sum(s, red) * inv_n;
        uint4* out = reinterpret_cast<uint4*>(dx + base);
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) out[c] = dx8(xr[c], dr[c], wr[c], r, cm);
    } else {
#pragma unroll 4
        for (int c = threadIdx.x; c < N; c += blockDim.x)
            s += __bfloat162float(dy[base + c]) * __bfloat162float(w[c]) * __bfloat162float(x[base + c]);
        const float cm = r * block_sum(s, red) * inv_n;
        for (int c = threadIdx.x; c < N; c += blockDim.x) {
            const float g = __bfloat162float(dy[base + c]) * __bfloat162float(w[c]);
            dx[base + c] = __float2bfloat16(r * (g - __bfloat162float(x[base + c]) * r * cm));
        }
    }
}

// dw: a block owns columns [blockIdx.x * VEC * SV, +VEC * SV) and all rows. Thread = (column lane cl,
// row lane rl); RL = DW_THREADS / SV row lanes. Fixed-order reduction: deterministic.
template <int VEC, int SV>
__global__ void __launch_bounds__(DW_THREADS) dw_strips(const bf16* __restrict__ x, const float* __restrict__ rstd,
                                                        const bf16* __restrict__ dy, float* __restrict__ dw,
                                                        int64_t M, int N) {
    constexpr int RL = DW_THREADS / SV;
    constexpr int CW = VEC * SV;
    __shared__ float red[RL][CW];
    const int cl = threadIdx.x % SV, rl = threadIdx.x / SV;
    const int col = blockIdx.x * CW + cl * VEC;
    const bool active = col < N;  // VEC = 8: N % 8 == 0, so the whole vector is in range
    float acc[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) acc[j] = 0.0f;
    if (active) {
        for (int64_t i0 = rl; i0 < M; i0 += (int64_t)RL * DW_UNROLL) {
            float xv[DW_UNROLL][VEC], dv[DW_UNROLL][VEC], rr[DW_UNROLL];
#pragma unroll
            for (int u = 0; u < DW_UNROLL; ++u) {
                const int64_t i = i0 + (int64_t)u * RL;
                rr[u] = 0.0f;
#pragma unroll
                for (int j = 0; j < VEC; ++j) xv[u][j] = dv[u][j] = 0.0f;
                if (i < M) {
                    const int64_t off = i * N + col;
                    if constexpr (VEC == 8) {
                        unpack8(*reinterpret_cast<const uint4*>(x + off), xv[u]);
                        unpack8(*reinterpret_cast<const uint4*>(dy + off), dv[u]);
                    } else {
                        xv[u][0] = __bfloat162float(x[off]);
                        dv[u][0] = __bfloat162float(dy[off]);
                    }
                    rr[u] = rstd[i];
                }
            }
#pragma unroll
            for (int u = 0; u < DW_UNROLL; ++u) {
#pragma unroll
                for (int j = 0; j < VEC; ++j) acc[j] += dv[u][j] * (xv[u][j] * rr[u]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) red[rl][cl * VEC + j] = acc[j];
    __syncthreads();
    for (int s = RL / 2; s > 0; s >>= 1) {
        if (rl < s) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) red[rl][cl * VEC + j] += red[rl + s][cl * VEC + j];
        }
        __syncthreads();
    }
    if (rl == 0 && active) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) dw[col + j] = red[0][cl * VEC + j];
    }
}

struct Args {
    const bf16* x;
    const bf16* w;
    const float* rstd;
    const bf16* dy;
    bf16* dx;
    float* dw;
    int64_t M;
    int N;
    float inv_n;
};

// The register budget caps the block: K raw vectors of x and dy per thread (8K registers) fit 64
// registers per thread (1024 threads) up to K = 2, 128 (512) at K = 4 and 255 (256) at K = 8.
constexpr int max_threads(int k) { return k <= 2 ? 1024 : (k <= 4 ? 512 : 256); }

template <int K>
void launch_group_row(const Args& a, hipStream_t s) {
    constexpr int rows_per_block = GROUP_BLOCK / GROUP;
    const unsigned blocks = (unsigned)((a.M + rows_per_block - 1) / rows_per_block);
    hipLaunchKernelGGL((dx_regs<K, true, GROUP_BLOCK>), dim3(blocks), dim3(GROUP_BLOCK), 0, s,
                       reinterpret_cast<const uint4*>(a.x), reinterpret_cast<const uint4*>(a.w), a.rstd,
                       reinterpret_cast<const uint4*>(a.dy), reinterpret_cast<uint4*>(a.dx), a.M, a.N / 8, a.inv_n);
}

template <int K>
void launch_block_row(const Args& a, int threads, hipStream_t s) {
    hipLaunchKernelGGL((dx_regs<K, false, max_threads(K)>), dim3((unsigned)a.M), dim3(threads), 0, s,
                       reinterpret_cast<const uint4*>(a.x), reinterpret_cast<const uint4*>(a.w), a.rstd,
                       reinterpret_cast<const uint4*>(a.dy), reinterpret_cast<uint4*>(a.dx), a.M, a.N / 8, a.inv_n);
}

// The 16-byte register path; false when the row is too long for it.
bool dispatch_dx_vec(const Args& a, hipStream_t s) {
    const int V = a.N / 8;
    if (V <= GROUP * 4) {  // rows of <= 1024 elements: 32 lanes per row
        const int k = (V + GROUP - 1) / GROUP;
        if (k <= 1) launch_group_row<1>(a, s);
        else if (k <= 2) launch_group_row<2>(a, s);
        else launch_group_row<4>(a, s);
        return true;
    }
    for (int limit : {256, 1024}) {
        for (int k = 1; k <= 8; k *= 2) {
            const int t = (V + k - 1) / k;
            if (t > limit || t > max_threads(k)) continue;
            const int threads = (t + 63) / 64 * 64;
            switch (k) {
                case 1: launch_block_row<1>(a, threads, s); break;
                case 2: launch_block_row<2>(a, threads, s); break;
                case 4: launch_block_row<4>(a, threads, s); break;
                default: launch_block_row<8>(a, threads, s); break;
            }
            return true;
        }
    }
    return false;
}

template <int VEC, int SV>
void launch_dw(const Args& a, hipStream_t s) {
    const unsigned blocks = (unsigned)((a.N + VEC * SV - 1) / (VEC * SV));
    hipLaunchKernelGGL((dw_strips<VEC, SV>), dim3(blocks), dim3(DW_THREADS), 0, s, a.x, a.rstd, a.dy, a.dw, a.M, a.N);
}

}  // namespace

extern "C" int entry(const __hip_bfloat16* x, const __hip_bfloat16* w, const float* rstd, const __hip_bfloat16* dy,
                     __hip_bfloat16* dx, float* dw, int64_t M, int64_t N, hipStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    if (N > INT32_MAX / 2) return (int)hipErrorInvalidValue;
    const Args a{x, w, rstd, dy, dx, dw, M, (int)N, 1.0f / (float)N};
    const uintptr_t any = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                          reinterpret_cast<uintptr_t>(dy) | reinterpret_cast<uintptr_t>(dx);
    const bool aligned = (N % 8 == 0) && (any % 16 == 0);

    if (!(aligned && dispatch_dx_vec(a, stream))) {
        if (aligned)
            hipLaunchKernelGGL(dx_loop<8>, dim3((unsigned)M), dim3(LOOP_THREADS), 0, stream, x, w, rstd, dy, dx, a.N, a.inv_n);
        else
            hipLaunchKernelGGL(dx_loop<1>, dim3((unsigned)M), dim3(LOOP_THREADS), 0, stream, x, w, rstd, dy, dx, a.N, a.inv_n);
    }

    if (aligned) {
        // The widest strips (64-byte row segments at SV = 4, 128 at SV = 8) that still give ~200+ blocks;
        // 16-byte segments (SV = 1) only when even 32-byte ones leave SMs idle.
        const int vecs = a.N / 8;
        if (vecs / 8 >= 200) launch_dw<8, 8>(a, stream);
        else if (vecs / 4 >= 200) launch_dw<8, 4>(a, stream);
        else if (vecs / 2 >= 132) launch_dw<8, 2>(a, stream);
        else launch_dw<8, 1>(a, stream);
    } else {
        launch_dw<1, 32>(a, stream);
    }
    return (int)hipGetLastError();
}
