// MoE router, DeepSeek-V3 style (sigmoid, bias-corrected group-limited top-k, scaled weights): write your
// kernel here.
//
//     s[e] = sigmoid(logits[t, e]),  c[e] = s[e] + bias[e]                  (fp32)
//     G > 1: groups of E/G consecutive experts; a group's score = the sum of its two largest c; only the
//            experts of the TG best groups may be chosen
//     ids[t, :]     = the K allowed experts of largest c, by c descending                    (int32)
//     weights[t, :] = s[ids] / sum(s[ids]) * scaling                                         (fp32)
//     logits: [T, E] fp32, bias: [E] fp32, weights: [T, K] fp32, ids: [T, K] int32
// Launch on `stream`, return (int)cudaGetLastError().
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" int entry(const float* logits, const float* bias, float* weights, int32_t* ids, int64_t T, int64_t E,
                     int64_t G, int64_t TG, int64_t K, double scaling, cudaStream_t stream) {
    (void)logits; (void)bias; (void)weights; (void)ids; (void)T; (void)E; (void)G; (void)TG; (void)K;
    (void)scaling; (void)stream;
    return (int)cudaErrorNotSupported;  // not implemented: a nonzero return is reported as an error
}
