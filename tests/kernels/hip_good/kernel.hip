// A HIP candidate written as for ROCm: hipLaunchKernelGGL, hip* types, a warp reduction with __shfl_down.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

__global__ void __launch_bounds__(256) row_sum(const __half* __restrict__ x, float* __restrict__ out, int cols) {
  __shared__ float warp_sums[256 / 32];
  const __half* row = x + (size_t)hipBlockIdx_x * cols;
  float acc = 0.0f;
  for (int c = hipThreadIdx_x; c < cols; c += hipBlockDim_x) acc += __half2float(row[c]);
  for (int offset = warpSize / 2; offset > 0; offset /= 2) acc += __shfl_down(acc, offset);
  if (hipThreadIdx_x % warpSize == 0) warp_sums[hipThreadIdx_x / warpSize] = acc;
  __syncthreads();
  if (hipThreadIdx_x == 0) {
    float total = 0.0f;
    for (int w = 0; w < (int)(hipBlockDim_x / warpSize); ++w) total += warp_sums[w];
    out[hipBlockIdx_x] = total;
  }
}

extern "C" int row_sum_entry(const __half* x, float* out, long rows, long cols, hipStream_t stream) {
  hipLaunchKernelGGL(row_sum, dim3((unsigned)rows), dim3(256), 0, stream, x, out, (int)cols);
  return (int)hipGetLastError();
}
