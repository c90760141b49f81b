"""Paged decode attention in Triton: a straightforward first version.

One program per (sequence, query head). It loads its query row once, then walks the sequence's cache
blocks in order (one 16-token page per iteration, looked up in the block table): the 16 scores are
fp32 multiply-and-sum reductions over D on CUDA cores, and a running max / sum (scalar online softmax)
rescales the fp32 output row before the page's values are added. Each query head reads its kv head's
keys and values on its own, so a GQA group of G heads reads the same cache G times (through L2), and a
single long sequence runs on only Hq programs.
"""

import math

import torch
import triton
import triton.language as tl

PAGE = 16


@triton.jit
def _paged_decode(q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, out_ptr, Hq, Hkv, max_blocks, scale,
                  D: tl.constexpr, PAGE: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // (Hq // Hkv)
    ctx = tl.load(lens_ptr + b)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, PAGE)
    q = tl.load(q_ptr + (b * Hq + h) * D + offs_d).to(tl.float32)

    m = tl.max(tl.full([PAGE], -float("inf"), tl.float32), axis=0)  # fp32 scalars, loop-carried
    l_i = tl.sum(tl.zeros([PAGE], dtype=tl.float32), axis=0)
    acc = tl.zeros([D], dtype=tl.float32)
    for blk in range(0, tl.cdiv(ctx, PAGE)):
        page = tl.load(bt_ptr + b * max_blocks + blk).to(tl.int64)
        valid = blk * PAGE + offs_t < ctx
        rows = ((page * PAGE + offs_t) * Hkv + kvh) * D
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(valid, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out_ptr + (b * Hq + h) * D + offs_d, (acc / l_i).to(out_ptr.dtype.element_ty))


def entry(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
          context_lens: torch.Tensor, out: torch.Tensor, *, B: int, Hq: int, Hkv: int, D: int,
          max_blocks: int) -> None:
    """out[b, h] = softmax(q[b, h] . K_b^T / sqrt(D)) V_b over the paged cache; return None."""
    _paged_decode[(B, Hq)](q, k_cache, v_cache, block_tables, context_lens, out, Hq, Hkv, max_blocks,
                           1.0 / math.sqrt(D), D=D, PAGE=PAGE, num_warps=4)
