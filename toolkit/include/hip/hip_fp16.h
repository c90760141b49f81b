// HIP on CUDA: half precision comes from CUDA (__half, __half2, __float2half, ...).
#pragma once
#include <hip/hip_runtime.h>
#include <cuda_fp16.h>
