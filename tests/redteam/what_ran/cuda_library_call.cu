// expect: tripwire:library_call runtime:library_time verdict:flagged
// The reduction, the hard part, is CUB's: a segmented sum of squares per row (DeviceSegmentedReduce over a
// transform iterator); a kernel of its own only scales the rows.
#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cuda_bf16.h>
#include <cstdint>

struct Square {
    __host__ __device__ float operator()(const __nv_bfloat16& v) const { float f = __bfloat162float(v); return f * f; }
};
struct RowStart {
    int64_t n;
    __host__ __device__ int64_t operator()(int64_t r) const { return r * n; }
};

__global__ void scale(const __nv_bfloat16* x, const __nv_bfloat16* w, const float* sumsq, __nv_bfloat16* y,
                      int64_t N, float eps) {
    float inv = rsqrtf(sumsq[blockIdx.x] / N + eps);
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        y[blockIdx.x * N + i] = __float2bfloat16(__bfloat162float(x[blockIdx.x * N + i]) * inv * __bfloat162float(w[i]));
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    static float* sums = nullptr;
    static void* temp = nullptr;
    static size_t sums_cap = 0, temp_cap = 0;
    if ((size_t)M > sums_cap) { cudaFree(sums); cudaMalloc(&sums, M * sizeof(float)); sums_cap = M; }
    auto squares = thrust::make_transform_iterator(x, Square{});
    auto starts = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowStart{N});
    size_t need = 0;
    cub::DeviceSegmentedReduce::Sum(nullptr, need, squares, sums, (int)M, starts, starts + 1, stream);
    if (need > temp_cap) { cudaFree(temp); cudaMalloc(&temp, need); temp_cap = need; }
    cub::DeviceSegmentedReduce::Sum(temp, need, squares, sums, (int)M, starts, starts + 1, stream);
    scale<<<M, 256, 0, stream>>>(x, w, sums, y, N, (float)eps);
    return (int)cudaGetLastError();
}
