// Rotary position embedding (rotate-half), bf16: the expert version.
//
// Roofline (H200, ~4.8 TB/s HBM3e): memory-bound at 3 flops per 4 bytes; the floor is reading x and
// writing y once (2 + 2 bytes per element) plus the cos/sin tables (read once per token, shared by all
// heads through L1). T = 8192, H = 32, D = 128 is 134 MB + 4 MB: ~32 us at ~90% of peak. Eager PyTorch
// runs ~9 kernels (to float, four products, a difference, a sum, cat, to bf16) with fp32 intermediates:
// ~48 bytes per element through HBM. Expected: ~8-10x on the prefill shapes, ~5x+ on decode shapes
// (launch count: 1 against 9).
//
// Key ideas:
// - One pass: each thread reads 8 elements of the first half of a head and the matching 8 of the second
//   half (two 16-byte loads), the 8 cos and 8 sin values (four 16-byte loads, L1/L2 hits after the first
//   head of the token), and writes both rotated halves (two 16-byte stores). fp32 math, one rounding.
// - Vector path when D/2 % 8 == 0 and the pointers are 16-byte aligned; otherwise the same kernel with
//   one element pair per thread (any even D, including D/2 % 8 != 0 where head halves start off 16-byte
//   boundaries).
// - 2-D blocks of 256 threads: x runs over (head, vector) of a token, y over tokens, so a token with few
//   vectors (8 KV heads x 8 vectors) still fills whole blocks; tokens loop by the grid. The only
//   division is by the vectors per half (one per work item, 32-bit). int64 token offsets.
// Nothing depends on the warp size.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

namespace {

typedef __hip_bfloat16 bf16;
constexpr int THREADS = 256;

template <int VEC>
__device__ __forceinline__ void load_x(const bf16* p, float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        const uint4 raw = *reinterpret_cast<const uint4*>(p);
        const __hip_bfloat162* h = reinterpret_cast<const __hip_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 f = __bfloat1622float2(h[j]);
            v[2 * j] = f.x;
            v[2 * j + 1] = f.y;
        }
    } else {
        v[0] = __bfloat162float(*p);
    }
}

template <int VEC>
__device__ __forceinline__ void load_f(const float* p, float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        const float4 a = reinterpret_cast<const float4*>(p)[0];
        const float4 b = reinterpret_cast<const float4*>(p)[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        v[0] = *p;
    }
}

template <int VEC>
__device__ __forceinline__ void store_x(bf16* p, const float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        uint4 raw;
        __hip_bfloat162* h = reinterpret_cast<__hip_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        *reinterpret_cast<uint4*>(p) = raw;
    } else {
        *p = __float2bfloat16(v[0]);
    }
}

// blockDim = (tx, ty): threadIdx.x over the H * nv work items of a token, threadIdx.y over tokens.
template <int VEC>
__global__ void __launch_bounds__(THREADS) rope_kernel(const bf16* __restrict__ x, const float* __restrict__ cos,
                                                       const float* __restrict__ sin, bf16* __restrict__ y,
                                                       int64_t T, int H, int half) {
    const int nv = half / VEC;  // vectors per half-head
    const int per_token = H * nv;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; t < T; t += (int64_t)gridDim.x * blockDim.y) {
        const float* ct = cos + t * half;
        const float* st = sin + t * half;
        const int64_t xt = t * H * 2 * (int64_t)half;
        for (int j = threadIdx.x; j < per_token; j += blockDim.x) {
            const int h = j / nv;
            const int i = (j - h * nv) * VEC;
            const int64_t off = xt + (int64_t)h * 2 * half + i;
            float a[VEC], b[VEC], c[VEC], s[VEC], o1[VEC], o2[VEC];
            load_x<VEC>(x + off, a);
            load_x<VEC>(x + off + half, b);
            load_f<VEC>(ct + i, c);
            load_f<VEC>(st + i, s);
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                o1[k] = a[k] * c[k] - b[k] * s[k];
                o2[k] = b[k] * c[k] + a[k] * s[k];
            }
            store_x<VEC>(y + off, o1);
            store_x<VEC>(y + off + half, o2);
        }
    }
}

}  // namespace

extern "C" int entry(const __hip_bfloat16* x, const float* cos, const float* sin, __hip_bfloat16* y,
                     int64_t T, int64_t H, int64_t D, hipStream_t stream) {
    if (T <= 0 || H <= 0 || D <= 0) return 0;
    if (D % 2 != 0 || H * D > INT32_MAX / 2) return (int)hipErrorInvalidValue;
    const int half = (int)(D / 2);
    const uintptr_t any = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(cos) |
                          reinterpret_cast<uintptr_t>(sin) | reinterpret_cast<uintptr_t>(y);
    const bool vec = (half % 8 == 0) && (any % 16 == 0);
    const int64_t per_token = H * (vec ? half / 8 : half);
    const int tx = per_token >= THREADS ? THREADS : (int)((per_token + 31) / 32 * 32);
    const int ty = THREADS / tx;
    int64_t blocks = (T + ty - 1) / ty;
    if (blocks > INT32_MAX) blocks = INT32_MAX;  // the token loop covers the rest
    const dim3 grid((unsigned)blocks), block(tx, ty);
    if (vec) hipLaunchKernelGGL(rope_kernel<8>, grid, block, 0, stream, x, cos, sin, y, T, (int)H, half);
    else hipLaunchKernelGGL(rope_kernel<1>, grid, block, 0, stream, x, cos, sin, y, T, (int)H, half);
    return (int)hipGetLastError();
}
