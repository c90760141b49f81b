"""Attention forward in Triton: a straightforward first version (an unpipelined flash loop).

o = softmax(q k^T / sqrt(D) [+ causal mask]) v for q, k, v [B, H, S, D] fp16.
One program per (64-query block, batch*head). It walks the keys in blocks of 32 up to S (or, causal, up to
the end of its query block) with an online softmax (running max and sum, rescaled accumulator), masking
every block the same way (keys past S, keys after the query). exp in fp32, P cast to fp16 for the second
matmul, one division at the end. Fixed blocks, num_stages=1 (no software pipelining).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, sm_scale,
                 CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    base = bh * S * HEAD_D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)

    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_D + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)

    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    else:
        hi = S
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + offs_n
        k = tl.load(k_ptr + base + keys[:, None] * HEAD_D + offs_d[None, :], mask=keys[:, None] < S, other=0.0)
        v = tl.load(v_ptr + base + keys[:, None] * HEAD_D + offs_d[None, :], mask=keys[:, None] < S, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * sm_scale
        allowed = keys[None, :] < S
        if CAUSAL:
            allowed = allowed & (keys[None, :] <= offs_m[:, None])
        qk = tl.where(allowed, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new

    o = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_D + offs_d[None, :], o.to(tl.float16), mask=offs_m[:, None] < S)


def entry(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, *, causal: int) -> None:
    """o[B, H, S, D] = attention(q, k, v), causal if `causal` is non-zero; all fp16, contiguous."""
    B, H, S, D = q.shape
    BLOCK_M, BLOCK_N = 64, 32
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    _attn_kernel[grid](q, k, v, o, S, D ** -0.5, CAUSAL=bool(causal), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                       HEAD_D=D, num_warps=4, num_stages=1)
