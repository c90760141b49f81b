// A correct CUDA candidate: two kernels (one with static shared memory) and an extern "C" launcher.
#include <cuda_runtime.h>
#include "common.cuh"

__global__ void vector_add(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                           long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + y[i];
}

__global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, long n) {
  __shared__ float partial[kBlock];
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

extern "C" int vector_add_entry(const float* x, const float* y, float* out, long n, cudaStream_t stream) {
  vector_add<<<(unsigned)((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(x, y, out, n);
  return (int)cudaGetLastError();
}
