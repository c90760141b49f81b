// Causal conv1d decode update (Mamba, width 4, SiLU), fp16: a straightforward first version.
//
// One thread per (sequence b, channel d), 256 threads per block: it reads the channel's 3 state values,
// x, the 4 filter taps and the bias with scalar fp16 loads, computes the dot product and SiLU in fp32,
// and writes out and the shifted state with scalar stores.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <stdint.h>

#define THREADS 256
#define W 4

__global__ void conv_update_kernel(const __half* __restrict__ x, const __half* __restrict__ conv_state,
                                   const __half* __restrict__ weight, const __half* __restrict__ bias,
                                   __half* __restrict__ out, __half* __restrict__ new_state, int64_t B, int64_t D) {
    const int64_t i = (int64_t)hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;  // b * D + d
    if (i >= B * D) return;
    const int64_t d = i % D;
    float window[W];
    for (int j = 0; j < W - 1; ++j) window[j] = __half2float(conv_state[i * (W - 1) + j]);
    window[W - 1] = __half2float(x[i]);
    float acc = __half2float(bias[d]);
    for (int j = 0; j < W; ++j) acc += window[j] * __half2float(weight[d * W + j]);
    out[i] = __float2half(acc / (1.0f + expf(-acc)));
    for (int j = 0; j < W - 1; ++j) new_state[i * (W - 1) + j] = __float2half(window[j + 1]);
}

extern "C" int entry(const __half* x, const __half* conv_state, const __half* weight, const __half* bias,
                     __half* out, __half* new_state, int64_t B, int64_t D, hipStream_t stream) {
    if (B <= 0 || D <= 0) return 0;
    const unsigned blocks = (unsigned)((B * D + THREADS - 1) / THREADS);
    hipLaunchKernelGGL(conv_update_kernel, dim3(blocks), dim3(THREADS), 0, stream, x, conv_state, weight, bias,
                       out, new_state, B, D);
    return (int)hipGetLastError();
}
