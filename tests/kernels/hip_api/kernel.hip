// Exercises the HIP-on-CUDA header broadly: memory, events, attributes, bf16, ballot, atomics, dynamic
// shared memory. Compiles with hipcc on ROCm and with nvcc + toolkit/include on NVIDIA.
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>

__global__ void count_positive(const __hip_bfloat16* __restrict__ x, unsigned int* __restrict__ count, int n) {
  HIP_DYNAMIC_SHARED(unsigned int, per_warp)
  int i = hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;
  bool positive = i < n && __bfloat162float(x[i]) > 0.0f;
  unsigned long long votes = __ballot(positive);
  if (hipThreadIdx_x % warpSize == 0) per_warp[hipThreadIdx_x / warpSize] = (unsigned int)__popcll(votes);
  __syncthreads();
  if (hipThreadIdx_x == 0) {
    unsigned int total = 0;
    for (unsigned int w = 0; w < hipBlockDim_x / warpSize; ++w) total += per_warp[w];
    atomicAdd(count, total);
  }
}

extern "C" int count_positive_entry(const __hip_bfloat16* x, unsigned int* count, long n, hipStream_t stream) {
  const int block = 256;
  const size_t shared = (block / warpSize) * sizeof(unsigned int);
  hipError_t err = hipFuncSetAttribute(count_positive, hipFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
  if (err != hipSuccess) return (int)err;
  err = hipMemsetAsync(count, 0, sizeof(unsigned int), stream);
  if (err != hipSuccess) return (int)err;
  hipEvent_t done;
  hipEventCreateWithFlags(&done, hipEventDisableTiming);
  hipLaunchKernelGGL(count_positive, dim3((unsigned)((n + block - 1) / block)), dim3(block), shared, stream, x, count,
                     (int)n);
  hipEventRecord(done, stream);
  hipEventDestroy(done);
  return (int)hipGetLastError();
}

// A host helper a task's own test harness might call; never called by the runtime.
extern "C" int roundtrip(float* host, long n) {
  float* dev = nullptr;
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, 0) != hipSuccess) return -1;
  if (hipMalloc(&dev, n * sizeof(float)) != hipSuccess) return -2;
  hipMemcpy(dev, host, n * sizeof(float), hipMemcpyHostToDevice);
  hipDeviceSynchronize();
  hipMemcpy(host, dev, n * sizeof(float), hipMemcpyDeviceToHost);
  hipFree(dev);
  return prop.warpSize;
}
