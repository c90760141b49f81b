"""Top-k / top-p (nucleus) masking of sampling logits, fp32: the specification of the task."""

from __future__ import annotations

import torch

MASK = -3.4028234663852886e38
"""What a masked logit becomes: the lowest finite fp32 (-FLT_MAX); softmax gives it probability 0 as it
would -inf (the suite's checks want finite outputs)."""
MIN_BOUNDARY_PROB = 1e-3
"""make_inputs puts each row's top-p boundary at a token of at least this probability, a quarter to three
quarters of the way through it, so no fp32 summation order can move the boundary."""


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [B, V] fp32: LLM-like next-token logits (noise plus a few dozen strong candidates, a per-row
    temperature, rounded to bf16 as a bf16 LM head gives them, so ties are common); top_k [B] int32 in
    [1, V] (V: no top-k), a third of the rows V, the others 1..100 or 100..2000; top_p [B] fp32 in (0, 1]
    (1: no top-p), 30% of the rows 1, the others placed inside a token of probability >= 1e-3 of the
    top-k-renormalized distribution (see MIN_BOUNDARY_PROB)."""
    b, v = int(config["B"]), int(config["V"])
    gd = gen.device
    f64 = torch.float64
    logits = 1.5 * torch.randn(b, v, generator=gen, device=gd, dtype=torch.float32)
    n_head = torch.randint(1, 65, (b, 1), generator=gen, device=gd).to(torch.float32)
    head = torch.rand(b, v, generator=gen, device=gd) < n_head / v
    logits += head * (6.0 + 3.0 * torch.rand(b, v, generator=gen, device=gd))
    temperature = 0.6 + 0.8 * torch.rand(b, 1, generator=gen, device=gd)
    logits = (logits / temperature).to(torch.bfloat16).to(torch.float32)

    mode = torch.rand(b, generator=gen, device=gd)
    small = torch.randint(1, min(100, v) + 1, (b,), generator=gen, device=gd)
    large = torch.randint(min(100, v), min(2000, v) + 1, (b,), generator=gen, device=gd)
    top_k = torch.where(mode < 0.35, torch.full_like(small, v), torch.where(mode < 0.75, small, large))

    # Place top_p inside a token of the top-k-renormalized distribution (in float64, sorted as the reference).
    srt = torch.sort(logits.to(f64), dim=-1, descending=True, stable=True).values
    in_k = torch.arange(v, device=gd)[None, :] < top_k[:, None]
    e = torch.where(in_k, torch.exp(srt - srt[:, :1]), 0.0)
    prob = e / e.sum(dim=-1, keepdim=True)
    cum_excl = prob.cumsum(dim=-1) - prob
    eligible = (prob >= MIN_BOUNDARY_PROB).sum(dim=-1)          # a prefix: prob falls along the sorted row
    pick = (torch.rand(b, generator=gen, device=gd, dtype=f64) * eligible).long().clamp(min=0)
    pick = torch.minimum(pick, (eligible - 1).clamp(min=0))[:, None]
    frac = 0.25 + 0.5 * torch.rand(b, 1, generator=gen, device=gd, dtype=f64)
    p = (cum_excl.gather(1, pick) + frac * prob.gather(1, pick)).squeeze(1)
    off = (torch.rand(b, generator=gen, device=gd) < 0.3) | (eligible == 0)
    top_p = torch.where(off, torch.ones_like(p), p)
    return {"logits": logits.to(device), "top_k": top_k.to(device=device, dtype=torch.int32),
            "top_p": top_p.to(device=device, dtype=torch.float32)}


def reference(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, B: int, V: int) -> torch.Tensor:
    """Per row: order the tokens by logit, descending, equal logits by ascending token index (a stable
    sort). Keep token at rank j (0-based) iff j < top_k and (top_p >= 1 or the probability mass before it,
    softmax over the kept top-k tokens only, is < top_p): the top-k tokens, then the smallest prefix of them
    whose renormalized mass reaches top_p. Kept logits are copied, the others become MASK (-FLT_MAX)."""
    assert logits.shape == (B, V) and top_k.shape == (B,) and top_p.shape == (B,)
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    x = logits.to(acc)
    srt, order = torch.sort(x, dim=-1, descending=True, stable=True)
    rank = torch.arange(V, device=x.device)[None, :]
    keep_k = rank < top_k[:, None].long()
    probs = torch.softmax(srt.masked_fill(~keep_k, float("-inf")), dim=-1)
    cum_excl = probs.cumsum(dim=-1) - probs
    p = top_p.to(acc)[:, None]
    keep = keep_k & ((cum_excl < p) | (p >= 1))
    keep = torch.zeros_like(keep).scatter(1, order, keep)
    return torch.where(keep, x, torch.full_like(x, MASK)).to(logits.dtype)
