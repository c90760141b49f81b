"""MoE token alignment (vLLM's moe_align_block_size): sort the (token, expert) pairs of a routing decision by
expert, each expert's run padded to a multiple of the block size, for a grouped GEMM that takes one expert
per block. The specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """topk_ids [T, topk] int32: every token's topk distinct experts, drawn as the topk of (expert
    popularity + Gumbel noise), with popularity ~ N(0, 1) per expert and seed: some experts are hot, some get
    few or no tokens (as real routers do), and the order of a token's experts is by score, not by id."""
    t, k, e = int(config["T"]), int(config["topk"]), int(config["E"])
    dev = gen.device
    popularity = torch.randn(e, generator=gen, device=dev)
    u = torch.rand(t, e, generator=gen, device=dev).clamp_min(1e-12)
    scores = popularity - torch.log(-torch.log(u))
    ids = torch.topk(scores, k, dim=-1).indices
    return {"topk_ids": ids.to(device=device, dtype=torch.int32)}


def reference(topk_ids: torch.Tensor, T: int, topk: int, E: int,
              block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """With N = T * topk pairs, i = t * topk + j the flat index of topk_ids[t, j], c_e the pairs of expert e,
    p_e = cdiv(c_e, block_size) * block_size, o_e = p_0 + ... + p_(e-1) and total = sum p_e:

        sorted_token_ids [N + E * (block_size - 1)]: positions o_e .. o_e + c_e - 1 hold the flat indices i of
            expert e's pairs in increasing order, o_e + c_e .. o_e + p_e - 1 and everything from total on hold N
        expert_ids [cdiv(N + E * (block_size - 1), block_size)]: block b holds the expert whose run covers
            positions b * block_size ..; blocks from total / block_size on hold -1
    (vLLM also returns num_tokens_post_pad = total, which is block_size times the index of the first -1 in
    expert_ids: left out, since a one-element count that is often equal across inputs tests nothing.)"""
    assert topk_ids.shape == (T, topk)
    n = T * topk
    flat = topk_ids.reshape(-1).long()
    counts = torch.bincount(flat, minlength=E)
    padded = (counts + block_size - 1) // block_size * block_size
    ends = padded.cumsum(0)
    starts = ends - padded
    order = torch.argsort(flat, stable=True)  # by expert, then by flat index
    sorted_experts = flat[order]
    rank = torch.arange(n, device=flat.device) - (counts.cumsum(0) - counts)[sorted_experts]
    max_padded = n + E * (block_size - 1)
    sorted_token_ids = torch.full((max_padded,), n, dtype=torch.int32, device=flat.device)
    sorted_token_ids[starts[sorted_experts] + rank] = order.to(torch.int32)
    total = ends[-1]
    block_starts = torch.arange(0, max_padded, block_size, device=flat.device)
    block_expert = torch.searchsorted(ends, block_starts, right=True)
    expert_ids = torch.where(block_starts < total, block_expert, -1).to(torch.int32)
    return sorted_token_ids, expert_ids
