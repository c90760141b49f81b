// A CUDA candidate with a compile error on line 6 (an undeclared identifier).
#include <cuda_runtime.h>

__global__ void scale(float* x, long n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * factor;
}

extern "C" int scale_entry(float* x, long n, cudaStream_t stream) {
  scale<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, n);
  return (int)cudaGetLastError();
}
