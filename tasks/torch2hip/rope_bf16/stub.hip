// Rotary position embedding (rotate-half), bf16: write your HIP kernel here.
//
// For each token t, head h, i in [0, D/2), with a = x[t, h, i], b = x[t, h, i + D/2],
// c = cos[t, i], s = sin[t, i]:
//   y[t, h, i]       = bf16(a * c - b * s)
//   y[t, h, i + D/2] = bf16(b * c + a * s)          (fp32 arithmetic)
//
// x, y: [T, H, D] bf16, contiguous; cos, sin: [T, D/2] fp32. y is preallocated (NaN-filled): write
// every element. Launch on `stream`, return (int)hipGetLastError().
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

extern "C" int entry(const __hip_bfloat16* x, const float* cos, const float* sin, __hip_bfloat16* y,
                     int64_t T, int64_t H, int64_t D, hipStream_t stream) {
    (void)x; (void)cos; (void)sin; (void)y; (void)T; (void)H; (void)D; (void)stream;
    return 1;  // not implemented
}
