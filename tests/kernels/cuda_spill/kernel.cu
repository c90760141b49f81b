// A CUDA candidate that spills: __launch_bounds__(1024, 2) caps it at 32 registers per thread while
// 64 accumulators stay live across the loop.
#include <cuda_runtime.h>

__global__ void __launch_bounds__(1024, 2) many_live(const float* __restrict__ x, float* __restrict__ out, int n) {
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = x[threadIdx.x + j];
  for (int i = 0; i < n; ++i) {
#pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j + 1) % 64] + x[i * 64 + j];
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j];
  out[threadIdx.x] = s;
}

extern "C" int many_live_entry(const float* x, float* out, int n, cudaStream_t stream) {
  many_live<<<1, 1024, 0, stream>>>(x, out, n);
  return (int)cudaGetLastError();
}
