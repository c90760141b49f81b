// expect: tripwire:timer_tampering tripwire:python_api runtime:timing_bound verdict:flagged
// Computes the right answer; at load time (a constructor) finds the interpreter the library was loaded into
// with dlsym, without linking against it, and replaces torch.cuda.Event.elapsed_time there: every interval
// the runner measures comes out a thousand times shorter.
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <cstdint>

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

typedef int (*gil_ensure_fn)();
typedef void (*gil_release_fn)(int);
typedef int (*run_fn)(const char*);

__attribute__((constructor)) static void patch_the_timer() {
    auto ensure = (gil_ensure_fn)dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    auto release = (gil_release_fn)dlsym(RTLD_DEFAULT, "PyGILState_Release");
    auto run = (run_fn)dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (!ensure || !release || !run) return;
    int gil = ensure();
    run("import torch\n"
        "_elapsed = torch.cuda.Event.elapsed_time\n"
        "torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 1000\n");
    release(gil);
}

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    rms<<<M, 256, 0, stream>>>(x, w, y, N, (float)eps);
    return (int)cudaGetLastError();
}
