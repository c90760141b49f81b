// expect: tripwire:python_api tripwire:timer_tampering runtime:timing_bound verdict:flagged
// Right answer, and a time of zero for every call: Python run at load time wraps the runner's `send` so
// that every reply carrying times carries zeros (a forged reply, well formed and in order).
#include <cuda_bf16.h>
#include <cstdint>

extern "C" {
int PyGILState_Ensure(void);
void PyGILState_Release(int);
int PyRun_SimpleString(const char*);
}

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

namespace {
struct Zero {
    Zero() {
        int gil = PyGILState_Ensure();
        PyRun_SimpleString(
            "import sys\n"
            "_R = sys.modules['__main__'].Runner\n"
            "_send = _R.send\n"
            "def _send_zero(self, reply):\n"
            "    if hasattr(reply, 'us'):\n"
            "        reply = reply.model_copy(update={'us': [0.0] * len(reply.us) if isinstance(reply.us, list) else 0.0})\n"
            "    _send(self, reply)\n"
            "_R.send = _send_zero\n");
        PyGILState_Release(gil);
    }
} zero;
}  // namespace

extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int64_t M, int64_t N,
                     double eps, cudaStream_t stream) {
    rms<<<M, 256, 0, stream>>>(x, w, y, N, (float)eps);
    return (int)cudaGetLastError();
}
