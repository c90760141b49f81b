// EmbeddingBag(mode="sum") with offsets, fp32: write your HIP kernel here.
//
// For every bag b in [0, B):
//   out[b, :] = sum over i in [offsets[b], offsets[b + 1]) of weight[indices[i], :]    (zeros when empty)
//
// weight: [NUM, D] fp32; indices: [NNZ] int64; offsets: [B + 1] int64 (offsets[0] = 0, offsets[B] = NNZ);
// out: [B, D] fp32, preallocated (NaN-filled): write every element. Launch on `stream`, return
// (int)hipGetLastError().
#include <hip/hip_runtime.h>
#include <stdint.h>

extern "C" int entry(const float* weight, const int64_t* indices, const int64_t* offsets, float* out,
                     int64_t B, int64_t D, int64_t NUM, int64_t NNZ, hipStream_t stream) {
    (void)weight; (void)indices; (void)offsets; (void)out; (void)B; (void)D; (void)NUM; (void)NNZ; (void)stream;
    return 1;  // not implemented
}
