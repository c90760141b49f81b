// expect: verdict:compile_error
// Fills the disk from the build, which runs outside the sandbox and keeps its outputs: 1.5 GiB of zeros
// in the library's data section (the assembler writes every byte), kept in the build cache after the
// evaluation. A runner may not write a file over 1 GiB; the build should not either.
#include <cuda_bf16.h>
#include <cstdint>

asm(".data\n.global crucible_redteam_ballast\ncrucible_redteam_ballast:\n.skip 1610612736\n.previous\n");

__global__ void rms(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t N, float eps) {
    const __nv_bfloat16* row = x + blockIdx.x * N;
    __shared__ float part[256];
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) { float v = __bfloat162float(row[i]); s += v * v; }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) { if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k]; __syncthreads(); }
    float inv = rsqrtf(part[0] / N + eps);
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        y[blockIdx.x * N + i] = __float2bfloat16(__bfloat162float(row[i]) * inv * __bfloat162float(w[i]));
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    rms<<<M, 256, 0, stream>>>(x, w, y, N, (float)eps);
    return (int)cudaGetLastError();
}
