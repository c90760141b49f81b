"""Paged decode attention in Triton: the expert version, flash-decoding with the GQA group on tensor cores.

Cost model (memory-bound): the floor is one read of the K and V of every cached token, 2 * sum(lens) *
Hkv * D * 2 bytes; q, the output and the block tables are noise. The baseline (one program per query
head) reads each kv head's cache once per query head of its group (G times, through L2), reduces the
scores on CUDA cores, and a single long sequence runs on Hq programs only.

Key ideas:
- One program per (sequence, kv head, chunk of up to 64 query heads of its group, split of the context):
  the group's query heads are the M rows of tl.dot (padded to >= 16 rows, the wgmma/mma minimum), so K and
  V are read from memory once per kv head, not once per query head. S = Q K^T and O += P V run on tensor
  cores (bf16 in, fp32 accumulate); P is rounded to bf16 for the second product, as FlashAttention does.
- 64 tokens (4 pages) per iteration: the 4 page numbers come from the block table in one vector load and
  the K / V tiles [64, D] are gathered row by row (each row is D contiguous bf16, 128-256 bytes), so every
  iteration has 2 * 64 * D * 2 bytes in flight per program; num_stages lets the compiler prefetch the next
  tiles while the current ones are on the tensor cores.
- Online softmax in the exp2 domain (1/sqrt(D) * log2 e folded into one multiply of S), one rescale of
  the accumulator per iteration; tokens past the context are masked to -inf and their K/V loads are
  masked (a slot past the context may hold anything).
- Split-K over the context (flash-decoding): the host only knows max_blocks (the lengths stay on the
  device), so it cuts max_blocks pages into `splits` ranges so that about 4 programs per SM are busy
  whatever the batch (one long sequence: many splits; a big batch: one). With one split the program
  writes the normalized bf16 output itself; otherwise it writes (m, l, unnormalized O) in fp32 and a
  second kernel merges the splits a sequence really has (splits past a short sequence's end exit at
  once and are never read). No atomics: deterministic.
- Triton 3.6's CPU interpreter gets tl.dot wrong on bf16 operands (fp16 and fp8 are right), so when the
  tensors are on the CPU (the interpreter) the operands go to the dots as fp32 (exact: bf16 -> fp32 loses
  nothing); on the GPU they stay bf16.
"""

import functools
import math

import torch
import triton
import triton.language as tl

PAGE = 16
BLOCK_N = 64                     # tokens per iteration: 4 pages
TARGET_PROGRAMS = 132 * 4        # ~4 programs on each of the H200's 132 SMs
MIN_PAGES_PER_SPLIT = 8          # >= 128 tokens per split: the Q load and the partial write amortize
MAX_SPLITS = 64
LOG2E = 1.4426950408889634


@triton.jit
def _paged_decode_gqa(q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, out_ptr, o_part, m_part, l_part,
                      Hq, Hkv, G, max_blocks, pps, scale_log2,
                      D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
                      SPLITS: tl.constexpr, DOT_F32: tl.constexpr):
    pid_bh = tl.program_id(0)          # (sequence, kv head, head chunk)
    split = tl.program_id(1)
    n_chunks = tl.cdiv(G, BLOCK_G)
    chunk = pid_bh % n_chunks
    kvh = (pid_bh // n_chunks) % Hkv
    b = pid_bh // (n_chunks * Hkv)

    ctx = tl.load(lens_ptr + b)
    tok_lo = split * pps * PAGE
    if tok_lo >= ctx:
        return
    tok_hi = tl.minimum(ctx, tok_lo + pps * PAGE)

    offs_g = chunk * BLOCK_G + tl.arange(0, BLOCK_G)      # query heads within the group
    live = offs_g < G
    heads = kvh * G + offs_g
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + (b * Hq + heads)[:, None] * D + offs_d[None, :], mask=live[:, None], other=0.0)
    if DOT_F32:
        q = q.to(tl.float32)

    m = tl.full([BLOCK_G], -float("inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, D], dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    bt_row = bt_ptr + b.to(tl.int64) * max_blocks
    for start in range(tok_lo, tok_hi, BLOCK_N):
        tok = start + offs_n
        valid = tok < tok_hi
        page = tl.load(bt_row + tok // PAGE, mask=valid, other=0).to(tl.int64)
        rows = ((page * PAGE + tok % PAGE) * Hkv + kvh) * D
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        if DOT_F32:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * scale_log2                         # [BLOCK_G, BLOCK_N], log2 units
        s = tl.where(valid[None, :], s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))                         # finite: start < tok_hi
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=valid[:, None], other=0.0)
        if DOT_F32:
            v = v.to(tl.float32)
        pv = p.to(v_ptr.dtype.element_ty)                                # P rounded to bf16, as on the GPU
        if DOT_F32:
            pv = pv.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(pv, v)
        m = m_new

    row = b * Hq + heads                                                 # [BLOCK_G] output rows
    if SPLITS == 1:
        out = acc / l_i[:, None]
        tl.store(out_ptr + row[:, None] * D + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
                 mask=live[:, None])
    else:
        part = row.to(tl.int64) * SPLITS + split
        tl.store(o_part + part[:, None] * D + offs_d[None, :], acc, mask=live[:, None])
        tl.store(m_part + part, m, mask=live)
        tl.store(l_part + part, l_i, mask=live)


@triton.jit
def _merge_splits(lens_ptr, out_ptr, o_part, m_part, l_part, Hq, pps,
                  D: tl.constexpr, SPLITS: tl.constexpr, BLOCK_S: tl.constexpr, PAGE: tl.constexpr):
    row = tl.program_id(0)                                               # (sequence, query head)
    ctx = tl.load(lens_ptr + row // Hq)
    n_splits = tl.minimum(SPLITS, tl.cdiv(tl.cdiv(ctx, PAGE), pps))     # splits this sequence has
    offs_s = tl.arange(0, BLOCK_S)
    has = offs_s < n_splits
    base = row.to(tl.int64) * SPLITS
    m = tl.load(m_part + base + offs_s, mask=has, other=-float("inf"))
    l_i = tl.load(l_part + base + offs_s, mask=has, other=0.0)
    m_all = tl.max(m, axis=0)
    w = tl.where(has, tl.exp2(m - m_all), 0.0)
    offs_d = tl.arange(0, D)
    o = tl.load(o_part + (base + offs_s)[:, None] * D + offs_d[None, :], mask=has[:, None], other=0.0)
    out = tl.sum(w[:, None] * o, axis=0) / tl.sum(w * l_i, axis=0)
    tl.store(out_ptr + row.to(tl.int64) * D + offs_d, out.to(out_ptr.dtype.element_ty))


@functools.cache
def _plan(B: int, Hq: int, Hkv: int, max_blocks: int) -> tuple[int, int, int, int]:
    """(BLOCK_G, head chunks per kv head, splits, pages per split)."""
    G = Hq // Hkv
    block_g = max(16, min(64, triton.next_power_of_2(G)))
    n_chunks = triton.cdiv(G, block_g)
    combos = B * Hkv * n_chunks
    splits = max(1, min(triton.cdiv(TARGET_PROGRAMS, combos), triton.cdiv(max_blocks, MIN_PAGES_PER_SPLIT),
                        MAX_SPLITS))
    pages_per_iter = BLOCK_N // PAGE
    pps = triton.cdiv(triton.cdiv(max_blocks, splits), pages_per_iter) * pages_per_iter
    splits = triton.cdiv(max_blocks, pps)
    return block_g, n_chunks, splits, pps


def entry(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
          context_lens: torch.Tensor, out: torch.Tensor, *, B: int, Hq: int, Hkv: int, D: int,
          max_blocks: int) -> None:
    """out[b, h] = softmax(q[b, h] . K_b^T / sqrt(D)) V_b over the paged cache; return None."""
    if B == 0:
        return
    G = Hq // Hkv
    block_g, n_chunks, splits, pps = _plan(B, Hq, Hkv, max_blocks)
    scale_log2 = LOG2E / math.sqrt(D)
    if splits > 1:
        rows = B * Hq * splits
        o_part = torch.empty((rows, D), device=q.device, dtype=torch.float32)
        m_part = torch.empty((rows,), device=q.device, dtype=torch.float32)
        l_part = torch.empty((rows,), device=q.device, dtype=torch.float32)
    else:
        o_part = m_part = l_part = out  # unused
    warps = 8 if D >= 256 or block_g >= 64 else 4
    _paged_decode_gqa[(B * Hkv * n_chunks, splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, o_part, m_part, l_part,
        Hq, Hkv, G, max_blocks, pps, scale_log2,
        D=D, BLOCK_G=block_g, BLOCK_N=BLOCK_N, PAGE=PAGE, SPLITS=splits, DOT_F32=q.device.type != "cuda", num_warps=warps,
        num_stages=2 if D >= 256 else 3)  # D = 256: 2 x 64 x 256 bf16 per stage, 64 KB
    if splits > 1:
        _merge_splits[(B * Hq,)](context_lens, out, o_part, m_part, l_part, Hq, pps,
                                 D=D, SPLITS=splits, BLOCK_S=triton.next_power_of_2(splits), PAGE=PAGE,
                                 num_warps=4)
