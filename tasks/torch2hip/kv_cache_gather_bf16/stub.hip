// Paged KV-cache gather, bf16: write your HIP kernel here.
//
// For each sequence b in [0, B) and position t in [0, C), with blk = block_tables[b * cdiv(C, BS) + t / BS]
// and slot = t % BS:
//   k_out[b, t, :, :] = key_cache[blk, slot, :, :]      if t < context_lens[b], else 0
//   v_out[b, t, :, :] = value_cache[blk, slot, :, :]    if t < context_lens[b], else 0
//
// key_cache, value_cache: [NB, BS, Hkv, D] bf16; block_tables: [B, cdiv(C, BS)] int32;
// context_lens: [B] int32; k_out, v_out: [B, C, Hkv, D] bf16. All contiguous. k_out and v_out are
// preallocated (NaN-filled): write every element. Launch on `stream`, return (int)hipGetLastError().
#include <hip/hip_runtime.h>
#include <hip/hip_bf16.h>
#include <stdint.h>

extern "C" int entry(const __hip_bfloat16* key_cache, const __hip_bfloat16* value_cache,
                     const int32_t* block_tables, const int32_t* context_lens,
                     __hip_bfloat16* k_out, __hip_bfloat16* v_out,
                     int64_t B, int64_t C, int64_t BS, int64_t Hkv, int64_t D, hipStream_t stream) {
    (void)key_cache; (void)value_cache; (void)block_tables; (void)context_lens; (void)k_out; (void)v_out;
    (void)B; (void)C; (void)BS; (void)Hkv; (void)D; (void)stream;
    return 1;  // not implemented
}
