"""MoE grouped GEMM over tokens sorted by expert (the GEMM inside vLLM's fused_moe / SGLang's fused MoE
Triton kernel): every routed (token, expert) pair multiplies its token's hidden state by its expert's
weight. The specification of the task (eager PyTorch: one matmul per expert)."""

from __future__ import annotations

import torch


def align(topk_ids: torch.Tensor, E: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """vLLM's moe_align_block_size (as torch2cuda/moe_align_block_size specifies it): the T * topk pairs
    i = t * topk + j sorted by expert (stable), each expert's run padded to a multiple of block_size with the
    pad value T * topk; sorted_token_ids [T * topk + E * (block_size - 1)], expert_ids [cdiv(that, block_size)]
    (-1 past the last run), num_tokens_post_padded [1] (the padded total)."""
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    counts = torch.bincount(flat, minlength=E)
    padded = (counts + block_size - 1) // block_size * block_size
    ends = padded.cumsum(0)
    starts = ends - padded
    order = torch.argsort(flat, stable=True)
    sorted_experts = flat[order]
    rank = torch.arange(n, device=flat.device) - (counts.cumsum(0) - counts)[sorted_experts]
    max_padded = n + E * (block_size - 1)
    sorted_token_ids = torch.full((max_padded,), n, dtype=torch.int32, device=flat.device)
    sorted_token_ids[starts[sorted_experts] + rank] = order.to(torch.int32)
    total = ends[-1]
    block_starts = torch.arange(0, max_padded, block_size, device=flat.device)
    block_expert = torch.searchsorted(ends, block_starts, right=True)
    expert_ids = torch.where(block_starts < total, block_expert, -1).to(torch.int32)
    return sorted_token_ids, expert_ids, total.reshape(1).to(torch.int32)


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """hidden [T, K] bf16 (standard normal); w [E, N, K] bf16 (normal, std 2 / sqrt(K): outputs of std ~2);
    the routing: every token's topk distinct experts as the topk of (expert popularity + Gumbel noise),
    popularity ~ N(0, 1) per expert and seed (some experts hot, some with few or no tokens, as real routers
    do), aligned to block_size as vLLM's moe_align_block_size does (`align`)."""
    t, topk, e = int(config["T"]), int(config["topk"]), int(config["E"])
    n, k, bs = int(config["N"]), int(config["K"]), int(config["block_size"])
    dev = gen.device
    popularity = torch.randn(e, generator=gen, device=dev)
    u = torch.rand(t, e, generator=gen, device=dev).clamp_min(1e-12)
    topk_ids = torch.topk(popularity - torch.log(-torch.log(u)), topk, dim=-1).indices
    sorted_token_ids, expert_ids, num_post = align(topk_ids, e, bs)
    hidden = torch.randn(t, k, generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
    w = torch.empty(e, n, k, device=dev, dtype=torch.bfloat16)
    for i in range(e):  # one expert at a time: no fp32 copy of every weight at once
        w[i] = (torch.randn(n, k, generator=gen, device=dev, dtype=torch.float32) * (2.0 / k**0.5)).to(torch.bfloat16)
    return {"hidden": hidden.to(device), "w": w.to(device), "sorted_token_ids": sorted_token_ids.to(device),
            "expert_ids": expert_ids.to(device), "num_tokens_post_padded": num_post.to(device)}


def reference(hidden: torch.Tensor, w: torch.Tensor, sorted_token_ids: torch.Tensor, expert_ids: torch.Tensor,
              num_tokens_post_padded: torch.Tensor, topk: int, block_size: int) -> torch.Tensor:
    """out[i] = hidden[i // topk] @ w[e_i]^T for every pair i = t * topk + j in [0, T * topk), where e_i is the
    expert of the block of sorted_token_ids that holds i (expert_ids[position // block_size]); entries equal
    to T * topk are padding. fp32 accumulation (float64 for the precision oracle), one rounding to bf16."""
    acc = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    n_pairs = hidden.shape[0] * topk
    ids = sorted_token_ids.long()
    row_expert = expert_ids.long().repeat_interleave(block_size)[: ids.numel()]
    used = ids < n_pairs
    out = torch.empty(n_pairs, w.shape[1], device=hidden.device, dtype=acc)
    for e in range(w.shape[0]):
        pairs = ids[used & (row_expert == e)]
        if pairs.numel():
            out[pairs] = hidden[pairs // topk].to(acc) @ w[e].to(acc).T
    return out.to(hidden.dtype)
