"""Single-token decode attention over a paged KV cache with grouped-query attention (bf16 in and out, fp32
softmax), as vLLM's and FlashInfer's decode kernels run it: the specification of the task (the same as
torch2cuda/paged_decode_attention's; here the speedup is against a Triton baseline)."""

from __future__ import annotations

import math

import torch

BLOCK_SIZE = 16


def context_lengths(config: dict, gen: torch.Generator) -> torch.Tensor:
    """[B] int64 on gen.device: mean exactly L, spread over [L - d, L + d] with d = min(L - 1, 16 * max_blocks - L).

    Lengths come in antithetic pairs (L + u, L - u), u uniform in [-d, d], then shuffled; with B odd one
    sequence has exactly L. So every seed has a different mix of lengths but the same total, B * L tokens,
    which the metrics count."""
    b, mean, max_blocks = int(config["B"]), int(config["L"]), int(config["max_blocks"])
    d = min(mean - 1, BLOCK_SIZE * max_blocks - mean)
    assert d >= 0, "max_blocks * 16 must hold L"
    u = torch.randint(-d, d + 1, (b // 2,), generator=gen, device=gen.device, dtype=torch.int64)
    lens = torch.cat((mean + u, mean - u, torch.full((b % 2,), mean, device=gen.device, dtype=torch.int64)))
    return lens[torch.randperm(b, generator=gen, device=gen.device)]


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """q [B, Hq, D] (std 3); k_cache, v_cache [B * max_blocks, 16, Hkv, D] (the pool, every slot random, unused ones
    too); block_tables [B, max_blocks] int32: a random permutation of the pool, so a sequence's blocks are
    scattered; context_lens [B] int32 (context_lengths above)."""
    b, hq, hkv, d, max_blocks = (int(config[k]) for k in ("B", "Hq", "Hkv", "D", "max_blocks"))
    dev = gen.device
    nb = b * max_blocks
    lens = context_lengths(config, gen)
    # Queries 3x wider than the keys: scores of std ~3, so each head attends to a few tokens and the output
    # varies as V does (with std-1 scores it would average thousands of tokens, nearly to a constant).
    q = 3.0 * torch.randn(b, hq, d, generator=gen, device=dev, dtype=torch.float32)
    k_cache = torch.randn(nb, BLOCK_SIZE, hkv, d, generator=gen, device=dev, dtype=torch.float32)
    v_cache = torch.randn(nb, BLOCK_SIZE, hkv, d, generator=gen, device=dev, dtype=torch.float32)
    block_tables = torch.randperm(nb, generator=gen, device=dev).view(b, max_blocks)
    bf16 = torch.bfloat16
    return {"q": q.to(device=device, dtype=bf16), "k_cache": k_cache.to(device=device, dtype=bf16),
            "v_cache": v_cache.to(device=device, dtype=bf16),
            "block_tables": block_tables.to(device=device, dtype=torch.int32),
            "context_lens": lens.to(device=device, dtype=torch.int32)}


def reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
              context_lens: torch.Tensor, B: int, Hq: int, Hkv: int, D: int, max_blocks: int) -> torch.Tensor:
    """out[b, h] = softmax(q[b, h] . K_b^T / sqrt(D)) V_b over the context_lens[b] cached tokens of sequence b,
    where token t of sequence b sits in slot t % 16 of block block_tables[b, t // 16], and query head h reads
    kv head h // (Hq / Hkv). Scores and softmax in fp32, one rounding of the output to bf16."""
    assert q.shape == (B, Hq, D) and block_tables.shape == (B, max_blocks) and Hq % Hkv == 0
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    g, t = Hq // Hkv, max_blocks * BLOCK_SIZE
    blocks = block_tables.long()
    k = k_cache[blocks].reshape(B, t, Hkv, D).to(acc)  # [B, T, Hkv, D]: every slot of the block table
    v = v_cache[blocks].reshape(B, t, Hkv, D).to(acc)
    qg = q.to(acc).view(B, Hkv, g, D)
    scores = torch.einsum("bhgd,bthd->bhgt", qg, k) * (1.0 / math.sqrt(D))
    pad = torch.arange(t, device=q.device)[None, :] >= context_lens[:, None].long()  # [B, T]
    scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = torch.einsum("bhgt,bthd->bhgd", p, v)
    return out.reshape(B, Hq, D).to(q.dtype)
