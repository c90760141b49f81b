// MoE align (vLLM's moe_align_block_size): write your kernel here.
//
// N = T * topk routed pairs, flat index i = t * topk + j of topk_ids[t, j] (int32, experts 0..E-1).
// c_e = pairs of expert e, p_e = cdiv(c_e, block_size) * block_size, o_e = p_0 + ... + p_(e-1), total = sum p_e.
//     sorted_token_ids[o_e + r] = the r-th smallest flat index of expert e   (r < c_e)
//     sorted_token_ids[...]     = N everywhere else (each run's padding, and from total on)
//     expert_ids[b]             = the expert whose run holds position b * block_size, -1 from total on
// Launch on `stream`, return (int)cudaGetLastError().
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" int entry(const int32_t* topk_ids, int32_t* sorted_token_ids, int32_t* expert_ids,
                     int64_t T, int64_t topk, int64_t E, int64_t block_size, cudaStream_t stream) {
    (void)topk_ids; (void)sorted_token_ids; (void)expert_ids;
    (void)T; (void)topk; (void)E; (void)block_size; (void)stream;
    return (int)cudaErrorNotSupported;  // not implemented: a nonzero return is reported as an error
}
