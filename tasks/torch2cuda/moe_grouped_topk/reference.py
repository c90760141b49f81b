"""MoE router of DeepSeek-V3-style models (sigmoid scores, a per-expert correction bias for the choice,
group-limited top-k, renormalized and scaled weights; fp32 in, fp32 weights and int32 ids out): the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

UNIT = 2.0**-11
"""The biased scores of make_inputs are multiples of UNIT: exact in fp32, far apart next to rounding."""
LOW = 297
"""Smallest biased score, in UNITs (~0.145); the scores span 1454 UNITs, up to ~0.855."""
SPAN = 1454
BIAS = 256
"""Correction biases are integers in [-BIAS, BIAS] UNITs (+-0.125), so every sigmoid score lies in
[0.02, 0.98]."""


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [T, E] fp32 (the router GEMM's output) and bias [E] fp32 (e_score_correction_bias).

    Built backwards from the biased scores c = sigmoid(logits) + bias, so that every decision is far from a
    tie: c[t, e] = n[t, e] * UNIT with n integers, distinct within a row (expert e of row t gets the slot of
    its random rank r, n = LOW + r * stride + j, j uniform in [0, stride), stride = SPAN // E); the bias is a
    multiple of UNIT drawn per expert; logits = logit(c - bias). With G > 1 groups, rows where the TG-th and
    the (TG+1)-th best group scores (the sum of a group's two best c) are less than 2 UNITs apart are drawn
    again. A kernel's sigmoid is off by ~1e-7, far below the UNIT (4.9e-4) that separates any two choices, so
    the experts chosen, and their order, are unique and the int32 ids can be compared exactly."""
    t, e, g, tg = (int(config[k]) for k in ("T", "E", "G", "TG"))
    dev = gen.device
    stride = SPAN // e
    bias_units = torch.randint(-BIAS, BIAS + 1, (e,), generator=gen, device=dev)
    n = torch.empty(t, e, dtype=torch.int64, device=dev)
    todo = torch.arange(t, device=dev)
    while todo.numel():
        m = todo.numel()
        ranks = torch.rand(m, e, generator=gen, device=dev).argsort(dim=1)
        jitter = torch.randint(0, stride, (m, e), generator=gen, device=dev)
        rows = LOW + ranks * stride + jitter
        n[todo] = rows
        if g == 1 or tg >= g:  # no group boundary to keep clear
            break
        group = rows.view(m, g, e // g).topk(2, dim=-1).values.sum(-1).sort(dim=-1, descending=True).values
        todo = todo[group[:, tg - 1] - group[:, tg] < 2]
    c = n.double() * UNIT
    s = c - bias_units.double() * UNIT
    logits = torch.log(s) - torch.log1p(-s)
    return {"logits": logits.to(device=device, dtype=torch.float32),
            "bias": (bias_units.double() * UNIT).to(device=device, dtype=torch.float32)}


def reference(logits: torch.Tensor, bias: torch.Tensor, T: int, E: int, G: int, TG: int, K: int,
              scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """scores = sigmoid(logits); c = scores + bias (used for the choice only). With G > 1 the E experts form
    G groups of E/G consecutive experts, a group scores the sum of its two largest c, and only the experts of
    the TG best groups may be chosen. ids[t] = the K experts of largest c among those allowed, by c
    descending; weights[t] = their (unbiased) scores divided by the sum of the K, times `scaling`.
    Returns (weights [T, K] fp32, ids [T, K] int32). As vLLM's grouped_topk (DeepSeek-V3's noaux_tc)."""
    assert logits.shape == (T, E) and bias.shape == (E,)
    scores = logits.sigmoid()  # in the logits' dtype: fp32 (float64 for the precision oracle)
    choice = scores + bias
    if G > 1:
        group_scores = choice.view(T, G, E // G).topk(2, dim=-1).values.sum(dim=-1)   # [T, G]
        group_idx = group_scores.topk(TG, dim=-1, sorted=False).indices              # [T, TG]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1.0)
        expert_mask = group_mask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E)
        choice = choice.masked_fill(expert_mask == 0, float("-inf"))
    ids = choice.topk(K, dim=-1).indices                                             # sorted: c descending
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(dim=-1, keepdim=True) * scaling
    return weights, ids.to(torch.int32)
