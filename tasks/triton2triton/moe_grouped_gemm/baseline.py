"""MoE grouped GEMM in Triton: a straightforward first version.

out[i] = hidden[i // topk] @ w[e]^T for each routed pair i, the pairs sorted by expert in blocks of
block_size rows (sorted_token_ids, one expert per block in expert_ids), as vLLM's fused_moe consumes them.
One program per (block of block_size sorted rows, 64 output columns), launched in row-major order; the K
loop walks 32-wide slices, gathers the block's token rows of hidden and a [32, 64] slice of its expert's
weight, masks every load, and accumulates with tl.dot in fp32. Fixed tiles whatever the shape, no program
reordering, no software pipelining (num_stages=1). Blocks past num_tokens_post_padded exit at once; pad rows
are masked and never stored.

(Triton 3.6's CPU interpreter gets tl.dot wrong on bf16 operands, so when the tensors are on the CPU (the
interpreter) they go to tl.dot as fp32, exactly; on the GPU they stay bf16.)
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _moe_gemm(h_ptr, w_ptr, out_ptr, sorted_ptr, expert_ptr, num_post_ptr, EM, N, K, num_pairs, topk,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_F32: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    if pid_m * BLOCK_M >= tl.load(num_post_ptr):
        return
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ids = tl.load(sorted_ptr + offs_m, mask=offs_m < EM, other=num_pairs)
    valid = ids < num_pairs
    tok = ids // topk
    expert = tl.load(expert_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    w_base = w_ptr + expert * N * K

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = k + offs_k
        a = tl.load(h_ptr + tok[:, None] * K + ks[None, :], mask=valid[:, None] & (ks[None, :] < K), other=0.0)
        b = tl.load(w_base + offs_n[None, :] * K + ks[:, None], mask=(ks[:, None] < K) & (offs_n[None, :] < N),
                    other=0.0)
        if DOT_F32:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b)
    tl.store(out_ptr + ids[:, None].to(tl.int64) * N + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=valid[:, None] & (offs_n[None, :] < N))


def entry(hidden: torch.Tensor, w: torch.Tensor, sorted_token_ids: torch.Tensor, expert_ids: torch.Tensor,
          num_tokens_post_padded: torch.Tensor, out: torch.Tensor, *, topk: int, block_size: int) -> None:
    """out[i] = hidden[i // topk] @ w[expert of i]^T for every routed pair i (out preallocated); return None."""
    T, K = hidden.shape
    _, N, _ = w.shape
    EM = sorted_token_ids.numel()
    BN, BK = 64, 32
    grid = (triton.cdiv(EM, block_size) * triton.cdiv(N, BN),)
    _moe_gemm[grid](hidden, w, out, sorted_token_ids, expert_ids, num_tokens_post_padded, EM, N, K, T * topk, topk,
                    BLOCK_M=block_size, BLOCK_N=BN, BLOCK_K=BK, DOT_F32=hidden.device.type != "cuda",
                    num_warps=4, num_stages=1)
