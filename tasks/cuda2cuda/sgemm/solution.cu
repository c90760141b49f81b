// SGEMM, fp32: C = A @ B, the expert version (CUDA cores, fp32 FMA; no tensor cores, no TF32).
//
// Cost model: 2*M*N*K flops (e.g. 137 GFLOP for 4096^3). The H200 does ~67 TFLOP/s of fp32 FMA, so the
// floor is ~2 ms there; bytes are no limit (A and B are re-read from L2, 48 MB for 4096^3 in DRAM terms).
// The baseline (16x16 tiles, one output per thread) issues two shared-memory loads per FMA, so it is
// bound by shared-memory bandwidth at a small fraction of the FMA peak (~5-8 TFLOP/s expected).
// This kernel issues 4 LDS.128 per 64 FMAs (8x8 outputs per thread), so it is FMA-bound: ~25-40 TFLOP/s
// expected, i.e. 3x or more over the baseline on the large configs.
//
// Key ideas:
// - Block tile BM x BN x 8 (128 x 128 by default), 256 threads, each thread owning an 8 x 8 micro-tile
//   laid out as 2 x 2 sub-tiles of 4 x 4 (rows ty*4 + {0..3} and 64 + ty*4 + {0..3}, same for columns):
//   per k the thread reads 2 float4 of A and 2 float4 of B from shared memory and does 64 FMAs.
// - A is stored transposed in shared memory (As[k][m]) so both operands are read as float4 along the
//   tile; As rows are padded by 4 floats so the transposing stores do not collide on banks (the padding
//   keeps 16-byte alignment).
// - Global loads are float4 (when K % 4 == 0, N % 4 == 0 and the pointers are 16-byte aligned), staged
//   through registers and double-buffered in shared memory: the next K-slice is loaded while the current
//   one is multiplied, with one __syncthreads per K-step.
// - Shapes whose tiles of 128 x 128 would not fill the GPU (fewer than 132 tiles) use 64 x 64 tiles with
//   4 x 4 micro-tiles instead, so small-M problems still spread over the SMs.
// - Edges: out-of-range loads are zero-filled and out-of-range stores skipped; when K or N is not a
//   multiple of 4 (or a pointer is misaligned) the same kernel runs with scalar global loads and stores.
// - 64-bit offsets throughout. Each output is one fp32 accumulation in K order (deterministic).
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int BK = 8;
constexpr int THREADS = 256;

template <int BM, int BN, bool VEC>
__global__ void __launch_bounds__(THREADS, 2) sgemm_blocked(const float* __restrict__ A, const float* __restrict__ B,
                                                         float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    constexpr int TM = BM / 16, TN = BN / 16;      // micro-tile per thread (16 x 16 threads)
    constexpr int PAD_A = 4;
    constexpr int A_VECS = BM * BK / 4;           // float4 chunks in an A tile
    constexpr int B_VECS = BK * BN / 4;
    constexpr int A_PER = (A_VECS + THREADS - 1) / THREADS;
    constexpr int B_PER = (B_VECS + THREADS - 1) / THREADS;
    static_assert(BM % 64 == 0 || BM == 64, "BM");
    static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tile of 4x4 sub-tiles");

    __shared__ __align__(16) float As[2][BK][BM + PAD_A];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * BM;
    const int64_t n0 = (int64_t)blockIdx.x * BN;

    float4 ra[A_PER], rb[B_PER];

    auto load_global = [&](int64_t k0) {
#pragma unroll
        for (int p = 0; p < A_PER; ++p) {
            const int v = tid + p * THREADS;
            float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
            if (v < A_VECS) {
                const int row = v / (BK / 4), kc = (v % (BK / 4)) * 4;
                const int64_t gm = m0 + row, gk = k0 + kc;
                if (gm < M) {
                    const float* src = A + gm * K + gk;
                    if constexpr (VEC) {
                        if (gk < K) t = __ldg(reinterpret_cast<const float4*>(src));  // K % 4 == 0: all 4 in range
                    } else {
                        if (gk + 0 < K) t.x = __ldg(src + 0);
                        if (gk + 1 < K) t.y = __ldg(src + 1);
                        if (gk + 2 < K) t.z = __ldg(src + 2);
                        if (gk + 3 < K) t.w = __ldg(src + 3);
                    }
                }
            }
            ra[p] = t;
        }
#pragma unroll
        for (int p = 0; p < B_PER; ++p) {
            const int v = tid + p * THREADS;
            float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
            if (v < B_VECS) {
                const int row = v / (BN / 4), col = (v % (BN / 4)) * 4;
                const int64_t gk = k0 + row, gn = n0 + col;
                if (gk < K) {
                    const float* src = B + gk * N + gn;
                    if constexpr (VEC) {
                        if (gn < N) t = __ldg(reinterpret_cast<const float4*>(src));  // N % 4 == 0
                    } else {
                        if (gn + 0 < N) t.x = __ldg(src + 0);
                        if (gn + 1 < N) t.y = __ldg(src + 1);
                        if (gn + 2 < N) t.z = __ldg(src + 2);
                        if (gn + 3 < N) t.w = __ldg(src + 3);
                    }
                }
            }
            rb[p] = t;
        }
    };

    auto store_shared = [&](int buf) {
#pragma unroll
        for (int p = 0; p < A_PER; ++p) {
            const int v = tid + p * THREADS;
            if (v < A_VECS) {
                const int row = v / (BK / 4), kc = (v % (BK / 4)) * 4;
                As[buf][kc + 0][row] = ra[p].x;
                As[buf][kc + 1][row] = ra[p].y;
                As[buf][kc + 2][row] = ra[p].z;
                As[buf][kc + 3][row] = ra[p].w;
            }
        }
#pragma unroll
        for (int p = 0; p < B_PER; ++p) {
            const int v = tid + p * THREADS;
            if (v < B_VECS) {
                const int row = v / (BN / 4), col = (v % (BN / 4)) * 4;
                *reinterpret_cast<float4*>(&Bs[buf][row][col]) = rb[p];
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    load_global(0);
    store_shared(0);
    __syncthreads();

    int buf = 0;
    for (int64_t k0 = 0; k0 < K; k0 += BK) {
        const bool has_next = k0 + BK < K;
        if (has_next) load_global(k0 + BK);  // in flight while this slice is multiplied
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
#pragma unroll
            for (int s = 0; s < TM / 4; ++s) {
                const float4 t = *reinterpret_cast<const float4*>(&As[buf][k][s * 64 + ty * 4]);
                a[s * 4 + 0] = t.x; a[s * 4 + 1] = t.y; a[s * 4 + 2] = t.z; a[s * 4 + 3] = t.w;
            }
#pragma unroll
            for (int s = 0; s < TN / 4; ++s) {
                const float4 t = *reinterpret_cast<const float4*>(&Bs[buf][k][s * 64 + tx * 4]);
                b[s * 4 + 0] = t.x; b[s * 4 + 1] = t.y; b[s * 4 + 2] = t.z; b[s * 4 + 3] = t.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // The other buffer was last read in the previous step, before the barrier that ended it.
        if (has_next) store_shared(buf ^ 1);
        __syncthreads();
        buf ^= 1;
    }

#pragma unroll
    for (int si = 0; si < TM / 4; ++si) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t gm = m0 + si * 64 + ty * 4 + i;
            if (gm >= M) continue;
#pragma unroll
            for (int sj = 0; sj < TN / 4; ++sj) {
                const int64_t gn = n0 + sj * 64 + tx * 4;
                float* dst = C + gm * N + gn;
                if constexpr (VEC) {
                    if (gn < N)
                        *reinterpret_cast<float4*>(dst) =
                            make_float4(acc[si * 4 + i][sj * 4 + 0], acc[si * 4 + i][sj * 4 + 1],
                                        acc[si * 4 + i][sj * 4 + 2], acc[si * 4 + i][sj * 4 + 3]);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (gn + j < N) dst[j] = acc[si * 4 + i][sj * 4 + j];
                }
            }
        }
    }
}

template <int BM, int BN>
int launch(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, bool vec, cudaStream_t s) {
    const int64_t gx = (N + BN - 1) / BN, gy = (M + BM - 1) / BM;
    if (gy > 65535 || gx > 0x7fffffff) return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)gx, (unsigned)gy);
    if (vec) sgemm_blocked<BM, BN, true><<<grid, THREADS, 0, s>>>(A, B, C, M, N, K);
    else sgemm_blocked<BM, BN, false><<<grid, THREADS, 0, s>>>(A, B, C, M, N, K);
    return 0;
}

}  // namespace

extern "C" int entry(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K,
                     cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    const bool vec = (K % 4 == 0) && (N % 4 == 0) &&
                     ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) |
                       reinterpret_cast<uintptr_t>(C)) % 16 == 0);
    const int64_t big_tiles = ((M + 127) / 128) * ((N + 127) / 128);
    const int rc = big_tiles >= 132 ? launch<128, 128>(A, B, C, M, N, K, vec, stream)
                                    : launch<64, 64>(A, B, C, M, N, K, vec, stream);
    if (rc != 0) return rc;
    return (int)cudaGetLastError();
}
