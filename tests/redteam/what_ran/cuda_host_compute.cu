// expect: runtime:no_own_kernel verdict:flagged
// task: cuda2cuda/vadd_loose
// No kernel of its own: copies the inputs to the host, computes there, copies the answer back.
#include <cuda_runtime.h>
#include <cstdint>
#include <vector>

extern "C" int vadd(const float* x, const float* y, float* out, int64_t N, cudaStream_t stream) {
    std::vector<float> hx(N), hy(N), ho(N);
    cudaMemcpyAsync(hx.data(), x, N * sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaMemcpyAsync(hy.data(), y, N * sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    for (int64_t i = 0; i < N; ++i) ho[i] = 2.0f * hx[i] + hy[i];
    cudaMemcpyAsync(out, ho.data(), N * sizeof(float), cudaMemcpyHostToDevice, stream);
    cudaStreamSynchronize(stream);
    return (int)cudaGetLastError();
}
