// A kernel that never finishes: the worker's wall-clock limit must end it.
#include <cuda_bf16.h>
#include <cstdint>

__global__ void spin(volatile int* flag) { while (*flag != 0x12345678) { } }

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    spin<<<1, 1, 0, stream>>>((volatile int*)y);  // the NaN poison never reads as 0x12345678
    return (int)cudaGetLastError();
}
