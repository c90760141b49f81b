// Per-(token, head) dynamic FP8 (e4m3) quantization of K and V: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): memory-bound; the floor is reading k and v (2 bytes per element
// each) and writing q_k and q_v (1 byte each) and the scales (8 bytes per (token, head)): ~3 bytes per
// element of k and v. T = 16384, H = 8, D = 128 is 101 MB: ~23 us at ~90% of peak. Eager PyTorch runs
// ~8 kernels per tensor (float, abs, amax, divide, clamp, divide, clamp, to(fp8)) and moves ~40 bytes per
// element through HBM (fp32 copies written and read back): expected ~8-12x on the prefill shapes, ~10x+
// on decode shapes (1 launch against ~16).
//
// Key ideas:
// - One kernel, one pass: each (token, head) row of k and of v is read once into registers, its |max|
//   reduced, its scale written, and the row quantized from the registers. A thread handles the same
//   chunk of k and of v, so two independent loads are in flight per thread.
// - A group of G lanes per row (G a power of two <= 32, sized to D: D = 128 -> 16 lanes of one 16-byte
//   vector each, D = 256 -> 32 lanes), 256-thread blocks of 256 / G rows; the max is reduced with
//   xor-shuffles of width G (an aligned subgroup on wave32 and wave64; rows past the end still join).
// - 16-byte loads (8 bf16) and 8-byte FP8 stores when D % 8 == 0 and every pointer is 16-byte aligned;
//   otherwise scalar, still coalesced, accesses. Rows too long for registers (D > 1024 aligned, > 256
//   otherwise): each lane loops over its chunks twice (the second pass hits L1/L2).
// - scale = max(amax / 448, 1 / (448 * 512)) with an IEEE divide, exactly as the reference; the row is
//   then multiplied by 1 / scale (one reciprocal per row instead of a divide per element, as vLLM does;
//   within one e4m3 step of the reference's divide) and converted in software: round to nearest even on
//   the fp32 bits, subnormals below 2^-6 by rint(v * 512), saturating at +-448 (the reference's clamp).
//   A dozen integer operations, exact, and the same code on NVIDIA and AMD (no fp8 header assumed).
// - int64 offsets; rows = T * H indexed by a 1-D grid of row groups.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

namespace {

typedef __hip_bfloat16 bf16;

constexpr int BLOCK = 256;
constexpr float FP8_MAX = 448.0f;
constexpr float MIN_SCALE = 1.0f / (448.0f * 512.0f);

// float -> float8 e4m3fn (OCP: bias 7, no infinities, 0x7F = NaN, max 448), round to nearest even,
// saturating: |v| >= 448 -> +-448, NaN -> NaN. Branch-free: both the subnormal and the normal encodings
// are computed and one is selected.
__device__ __forceinline__ uint32_t f32_to_e4m3(float v) {
    const uint32_t bits = __float_as_uint(v);
    const uint32_t a = bits & 0x7fffffffu;
    // below 2^-6: subnormal, steps of 2^-9: rint(|v| * 512) in 0..8 (8 is 2^-6, the smallest normal)
    const uint32_t sub = __float2uint_rn(fminf(__uint_as_float(a), 0.015625f) * 512.0f);
    // normal: round the 23-bit mantissa to 3 bits, ties to even; exponent and mantissa are adjacent, so
    // (r >> 20) is (fp32 exponent << 3 | 3-bit mantissa): rebias 127 -> 7
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    uint32_t e = a < 0x3c800000u ? sub : (r >> 20) - (120u << 3);
    e = a >= 0x43e00000u ? 0x7eu : e;  // >= 448 (and inf): saturate, as the reference's clamp
    e = a > 0x7f800000u ? 0x7fu : e;   // NaN
    return ((bits >> 24) & 0x80u) | e;
}

template <int VEC>
__device__ __forceinline__ void load_vec(const bf16* p, float (&out)[VEC]) {
    if constexpr (VEC == 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __hip_bfloat162* h = reinterpret_cast<const __hip_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(h[j]);
            out[2 * j] = f.x;
            out[2 * j + 1] = f.y;
        }
    } else {
        out[0] = __bfloat162float(*p);
    }
}

template <int VEC>
__device__ __forceinline__ void quant_store(const float (&x)[VEC], float inv_scale, uint8_t* q) {
    if constexpr (VEC == 8) {
        uint2 raw;
        raw.x = f32_to_e4m3(x[0] * inv_scale) | (f32_to_e4m3(x[1] * inv_scale) << 8) |
                (f32_to_e4m3(x[2] * inv_scale) << 16) | (f32_to_e4m3(x[3] * inv_scale) << 24);
        raw.y = f32_to_e4m3(x[4] * inv_scale) | (f32_to_e4m3(x[5] * inv_scale) << 8) |
                (f32_to_e4m3(x[6] * inv_scale) << 16) | (f32_to_e4m3(x[7] * inv_scale) << 24);
        *reinterpret_cast<uint2*>(q) = raw;
    } else {
        *q = (uint8_t)f32_to_e4m3(x[0] * inv_scale);
    }
}

template <int G>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor(v, o, G));
    return v;
}

__device__ __forceinline__ float scale_of(float amax) { return fmaxf(amax / FP8_MAX, MIN_SCALE); }

// A row of D elements per G lanes, held in registers: lane r owns chunks r, r + G, ..., r + (K-1)G of VEC
// elements. Requires D % VEC == 0 and chunks <= K * G.
template <int VEC, int K, int G>
__global__ void __launch_bounds__(BLOCK) kv_quant_regs(const bf16* __restrict__ k, const bf16* __restrict__ v,
                                                       uint8_t* __restrict__ qk, uint8_t* __restrict__ qv,
                                                       float* __restrict__ ks, float* __restrict__ vs,
                                                       int64_t rows, int D) {
    const int64_t row = (int64_t)blockIdx.x * (BLOCK / G) + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const bool valid = row < rows;
    const int chunks = D / VEC;
    const int64_t base = (valid ? row : 0) * (int64_t)D;

    float xk[K][VEC], xv[K][VEC];
    float mk = 0.0f, mv = 0.0f;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = lane + i * G;
        if (valid && c < chunks) {
            const int64_t off = base + (int64_t)c * VEC;
            load_vec<VEC>(k + off, xk[i]);
            load_vec<VEC>(v + off, xv[i]);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                mk = fmaxf(mk, fabsf(xk[i][j]));
                mv = fmaxf(mv, fabsf(xv[i][j]));
            }
        }
    }
    const float sk = scale_of(group_max<G>(mk)), sv = scale_of(group_max<G>(mv));
    if (valid && lane == 0) {
        ks[row] = sk;
        vs[row] = sv;
    }
    const float ik = 1.0f / sk, iv = 1.0f / sv;
#pragma unroll
    for (int i = 0; i < K; ++i) {
        const int c = lane + i * G;
        if (valid && c < chunks) {
            const int64_t off = base + (int64_t)c * VEC;
            quant_store<VEC>(xk[i], ik, qk + off);
            quant_store<VEC>(xv[i], iv, qv + off);
        }
    }
}

// Rows too long for registers: 32 lanes per row (one warp on NVIDIA, half a wavefront on AMD), two passes.
template <int VEC>
__global__ void __launch_bounds__(BLOCK) kv_quant_loop(const bf16* __restrict__ k, const bf16* __restrict__ v,
                                                       uint8_t* __restrict__ qk, uint8_t* __restrict__ qv,
                                                       float* __restrict__ ks, float* __restrict__ vs,
                                                       int64_t rows, int D) {
    constexpr int G = 32;
    const int64_t row = (int64_t)blockIdx.x * (BLOCK / G) + threadIdx.x / G;
    const int lane = threadIdx.x % G;
    const bool valid = row < rows;
    const int chunks = valid ? D / VEC : 0;
    const int64_t base = (valid ? row : 0) * (int64_t)D;
    float mk = 0.0f, mv = 0.0f;
    for (int c = lane; c < chunks; c += G) {
        float xk[VEC], xv[VEC];
        load_vec<VEC>(k + base + (int64_t)c * VEC, xk);
        load_vec<VEC>(v + base + (int64_t)c * VEC, xv);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            mk = fmaxf(mk, fabsf(xk[j]));
            mv = fmaxf(mv, fabsf(xv[j]));
        }
    }
    const float sk = scale_of(group_max<G>(mk)), sv = scale_of(group_max<G>(mv));
    if (valid && lane == 0) {
        ks[row] = sk;
        vs[row] = sv;
    }
    const float ik = 1.0f / sk, iv = 1.0f / sv;
    for (int c = lane; c < chunks; c += G) {
        const int64_t off = base + (int64_t)c * VEC;
        float xk[VEC], xv[VEC];
        load_vec<VEC>(k + off, xk);
        load_vec<VEC>(v + off, xv);
        quant_store<VEC>(xk, ik, qk + off);
        quant_store<VEC>(xv, iv, qv + off);
    }
}

struct Args {
    const bf16* k;
    const bf16* v;
    uint8_t* qk;
    uint8_t* qv;
    float* ks;
    float* vs;
    int64_t rows;
    int D;
};

template <int VEC, int K, int G>
void launch_regs(const Args& a, hipStream_t s) {
    const unsigned blocks = (unsigned)((a.rows + BLOCK / G - 1) / (BLOCK / G));
    hipLaunchKernelGGL((kv_quant_regs<VEC, K, G>), dim3(blocks), dim3(BLOCK), 0, s, a.k, a.v, a.qk, a.qv, a.ks,
                       a.vs, a.rows, a.D);
}

template <int VEC, int K>
void launch_regs_g(const Args& a, int g, hipStream_t s) {
    switch (g) {
        case 1: launch_regs<VEC, K, 1>(a, s); break;
        case 2: launch_regs<VEC, K, 2>(a, s); break;
        case 4: launch_regs<VEC, K, 4>(a, s); break;
        case 8: launch_regs<VEC, K, 8>(a, s); break;
        case 16: launch_regs<VEC, K, 16>(a, s); break;
        default: launch_regs<VEC, K, 32>(a, s); break;
    }
}

// Registers when a row fits KMAX chunks per lane of 32 lanes; else the looping kernel.
template <int VEC, int KMAX>
void dispatch(const Args& a, hipStream_t s) {
    const int chunks = a.D / VEC;
    if (chunks > 32 * KMAX) {
        const unsigned blocks = (unsigned)((a.rows + BLOCK / 32 - 1) / (BLOCK / 32));
        hipLaunchKernelGGL(kv_quant_loop<VEC>, dim3(blocks), dim3(BLOCK), 0, s, a.k, a.v, a.qk, a.qv, a.ks, a.vs,
                           a.rows, a.D);
        return;
    }
    int g = 1;
    while (g < 32 && g < chunks) g *= 2;
    const int k = (chunks + g - 1) / g;
    if (k <= 1) launch_regs_g<VEC, 1>(a, g, s);
    else if (k <= 2) launch_regs_g<VEC, 2>(a, g, s);
    else if (k <= 4 || KMAX <= 4) launch_regs_g<VEC, (KMAX < 4 ? KMAX : 4)>(a, g, s);
    else launch_regs_g<VEC, KMAX>(a, g, s);
}

}  // namespace

extern "C" int entry(const __hip_bfloat16* k, const __hip_bfloat16* v, uint8_t* q_k, uint8_t* q_v,
                     float* k_scale, float* v_scale, int64_t T, int64_t H, int64_t D, hipStream_t stream) {
    if (T <= 0 || H <= 0 || D <= 0) return 0;
    if (D > INT32_MAX / 2) return (int)hipErrorInvalidValue;
    const Args a{k, v, q_k, q_v, k_scale, v_scale, T * H, (int)D};
    const uintptr_t any = reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v) |
                          reinterpret_cast<uintptr_t>(q_k) | reinterpret_cast<uintptr_t>(q_v);
    if (D % 8 == 0 && any % 16 == 0) dispatch<8, 4>(a, stream);   // D <= 1024 in registers
    else dispatch<1, 8>(a, stream);                               // D <= 256 in registers
    return (int)hipGetLastError();
}
