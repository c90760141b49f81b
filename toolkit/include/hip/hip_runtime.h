// HIP on CUDA: the HIP runtime API mapped onto CUDA's, so a .hip file builds with nvcc on NVIDIA GPUs.
// Part of crucible (toolkit/include); see docs/hip-on-cuda.md for what carries over and what does not.
// nvcc reaches this file through `-I toolkit/include`; the real ROCm header is used with hipcc on AMD.
#ifndef CRUCIBLE_HIP_RUNTIME_H
#define CRUCIBLE_HIP_RUNTIME_H

#ifndef __HIP_PLATFORM_NVIDIA__
#define __HIP_PLATFORM_NVIDIA__ 1
#endif
#ifndef __HIP_PLATFORM_NVCC__
#define __HIP_PLATFORM_NVCC__ 1  // the old spelling, still tested by some code
#endif
#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 0
#define HIP_VERSION_PATCH 0
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

// --- errors ------------------------------------------------------------------------------------
typedef cudaError_t hipError_t;
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipErrorMemoryAllocation cudaErrorMemoryAllocation
#define hipErrorNotReady cudaErrorNotReady
#define hipErrorInvalidDevice cudaErrorInvalidDevice
#define hipErrorInvalidConfiguration cudaErrorInvalidConfiguration
#define hipErrorLaunchFailure cudaErrorLaunchFailure
#define hipErrorNotSupported cudaErrorNotSupported
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetErrorString cudaGetErrorString
#define hipGetErrorName cudaGetErrorName

// --- devices -----------------------------------------------------------------------------------
typedef cudaDeviceProp hipDeviceProp_t;
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipDeviceReset cudaDeviceReset
#define hipDeviceGetAttribute cudaDeviceGetAttribute
typedef cudaDeviceAttr hipDeviceAttribute_t;
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeMaxThreadsPerBlock cudaDevAttrMaxThreadsPerBlock
#define hipDeviceAttributeMaxSharedMemoryPerBlock cudaDevAttrMaxSharedMemoryPerBlock
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeL2CacheSize cudaDevAttrL2CacheSize

// --- memory ------------------------------------------------------------------------------------
typedef cudaMemcpyKind hipMemcpyKind;
#define hipMemcpyHostToHost cudaMemcpyHostToHost
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipMemcpyDefault cudaMemcpyDefault
#define hipMalloc cudaMalloc
#define hipMallocAsync cudaMallocAsync
#define hipMallocManaged cudaMallocManaged
#define hipHostMalloc(ptr, size, flags) cudaHostAlloc((ptr), (size), (flags))
#define hipHostMallocDefault cudaHostAllocDefault
#define hipHostFree cudaFreeHost
#define hipFree cudaFree
#define hipFreeAsync cudaFreeAsync
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemcpy2D cudaMemcpy2D
#define hipMemcpy2DAsync cudaMemcpy2DAsync
#define hipMemcpyToSymbol cudaMemcpyToSymbol
#define hipMemcpyToSymbolAsync cudaMemcpyToSymbolAsync
#define hipMemcpyFromSymbol cudaMemcpyFromSymbol
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemGetInfo cudaMemGetInfo
#define hipPointerAttribute_t cudaPointerAttributes
#define hipPointerGetAttributes cudaPointerGetAttributes

// --- streams and events ------------------------------------------------------------------------
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
#define hipStreamCreate cudaStreamCreate
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDefault cudaStreamDefault
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipStreamQuery cudaStreamQuery
#define hipStreamPerThread cudaStreamPerThread
#define hipEventCreate cudaEventCreate
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDefault cudaEventDefault
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventQuery cudaEventQuery
#define hipEventElapsedTime cudaEventElapsedTime
#define hipEventDestroy cudaEventDestroy

// --- launching ---------------------------------------------------------------------------------
// hipLaunchKernelGGL(kernel, grid, block, shared bytes, stream, args...) == kernel<<<...>>>(args...)
#define hipLaunchKernelGGL(kernel, numBlocks, numThreads, memPerBlock, stream, ...) \
  do { kernel<<<(numBlocks), (numThreads), (memPerBlock), (stream)>>>(__VA_ARGS__); } while (0)
#define hipLaunchKernel cudaLaunchKernel
#define hipLaunchCooperativeKernel cudaLaunchCooperativeKernel
typedef cudaFuncAttribute hipFuncAttribute;
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipFuncAttributePreferredSharedMemoryCarveout cudaFuncAttributePreferredSharedMemoryCarveout
typedef cudaFuncAttributes hipFuncAttributes;
#define hipFuncGetAttributes cudaFuncGetAttributes
// HIP takes the kernel as `const void*`; CUDA's template overload accepts any kernel pointer.
#define hipFuncSetAttribute(func, attr, value) cudaFuncSetAttribute((const void*)(func), (attr), (value))
#define hipOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define hipOccupancyMaxPotentialBlockSize cudaOccupancyMaxPotentialBlockSize

// --- device-side ---------------------------------------------------------------------------------
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z
// __syncthreads, __shfl_*_sync, __ballot_sync, atomicAdd/CAS/Max/..., __launch_bounds__, __restrict__,
// __ldg, warpSize (32 here, 64 on most AMD GPUs) come from CUDA unchanged.
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE
#define __HIP__DEVICE__ __device__

#ifdef __CUDACC__
// HIP's mask-less warp intrinsics act on the whole (32-lane) warp here. CUDA still declares deprecated
// mask-less versions that are invalid from sm_70 on, so these are macros onto the *_sync forms (defined
// after CUDA's headers, which therefore keep their own declarations). A ballot is 64-bit in HIP; on
// NVIDIA only its low 32 bits can be set.
#define CRUCIBLE_FULL_MASK 0xffffffffu
#define __shfl(...) __shfl_sync(CRUCIBLE_FULL_MASK, __VA_ARGS__)
#define __shfl_up(...) __shfl_up_sync(CRUCIBLE_FULL_MASK, __VA_ARGS__)
#define __shfl_down(...) __shfl_down_sync(CRUCIBLE_FULL_MASK, __VA_ARGS__)
#define __shfl_xor(...) __shfl_xor_sync(CRUCIBLE_FULL_MASK, __VA_ARGS__)
#define __ballot(predicate) ((unsigned long long)__ballot_sync(CRUCIBLE_FULL_MASK, (predicate)))
#define __any(predicate) __any_sync(CRUCIBLE_FULL_MASK, (predicate))
#define __all(predicate) __all_sync(CRUCIBLE_FULL_MASK, (predicate))
__device__ __forceinline__ unsigned int __lane_id() {
  unsigned int lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
#endif  // __CUDACC__

#endif  // CRUCIBLE_HIP_RUNTIME_H
