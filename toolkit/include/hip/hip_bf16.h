// HIP on CUDA: bfloat16 comes from CUDA (__nv_bfloat16); hip_bfloat16 and __hip_bfloat16 name it too.
#pragma once
#include <hip/hip_runtime.h>
#include <cuda_bf16.h>
typedef __nv_bfloat16 __hip_bfloat16;
typedef __nv_bfloat162 __hip_bfloat162;
typedef __nv_bfloat16 hip_bfloat16;
