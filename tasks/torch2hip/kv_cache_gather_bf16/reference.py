"""Paged KV-cache gather (bf16), as vLLM runs it before a chunked-prefill or prefix-cached attention over a
sequence's cached context: the specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """key_cache, value_cache [NB, BS, Hkv, D]: a paged cache pool of NB blocks of BS token slots (25% more
    blocks than the batch owns, as other sequences' blocks sit in the same pool); block_tables [B, cdiv(C, BS)]
    int32: each sequence's blocks, distinct and scattered over the pool; context_lens [B] int32: cached
    tokens per sequence, the first exactly C, the others uniform in [max(1, C // 2), C]."""
    b, c, bs, hkv, d = (int(config[k]) for k in ("B", "C", "BS", "Hkv", "D"))
    max_blocks = -(-c // bs)
    nb = b * max_blocks + (b * max_blocks) // 4 + 1
    key_cache = torch.randn(nb, bs, hkv, d, generator=gen, device=gen.device, dtype=torch.float32)
    value_cache = torch.randn(nb, bs, hkv, d, generator=gen, device=gen.device, dtype=torch.float32)
    block_tables = torch.randperm(nb, generator=gen, device=gen.device)[: b * max_blocks].view(b, max_blocks)
    context_lens = torch.randint(max(1, c // 2), c + 1, (b,), generator=gen, device=gen.device)
    context_lens[0] = c
    bf16 = torch.bfloat16
    return {"key_cache": key_cache.to(device=device, dtype=bf16), "value_cache": value_cache.to(device=device, dtype=bf16),
            "block_tables": block_tables.to(device=device, dtype=torch.int32),
            "context_lens": context_lens.to(device=device, dtype=torch.int32)}


def reference(key_cache: torch.Tensor, value_cache: torch.Tensor, block_tables: torch.Tensor,
              context_lens: torch.Tensor, B: int, C: int, BS: int, Hkv: int,
              D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each sequence b and position t < C:
        k_out[b, t] = key_cache[block_tables[b, t // BS], t % BS]    if t < context_lens[b], else 0
        v_out[b, t] = value_cache[block_tables[b, t // BS], t % BS]  if t < context_lens[b], else 0
    Returns (k_out, v_out), each [B, C, Hkv, D]."""
    assert key_cache.shape[1:] == (BS, Hkv, D) and block_tables.shape == (B, -(-C // BS))
    t = torch.arange(C, device=key_cache.device)
    blocks = block_tables[:, t // BS].long()                              # [B, C]
    slots = t % BS                                                        # [C]
    valid = (t[None, :] < context_lens[:, None].long())[:, :, None, None]  # [B, C, 1, 1]
    k_out = torch.where(valid, key_cache[blocks, slots], 0)
    v_out = torch.where(valid, value_cache[blocks, slots], 0)
    return k_out, v_out
