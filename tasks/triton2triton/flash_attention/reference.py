"""Scaled dot-product attention (causal or not), fp16 in / fp16 out: the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """q, k, v [B, H, S, D]: roughly standard normal fp16 (projected activations)."""
    shape = (int(config["B"]), int(config["H"]), int(config["S"]), int(config["D"]))
    q, k, v = (torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float32) for _ in range(3))
    return {"q": q.to(device=device, dtype=torch.float16), "k": k.to(device=device, dtype=torch.float16),
            "v": v.to(device=device, dtype=torch.float16)}


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: int) -> torch.Tensor:
    """o = softmax(q k^T / sqrt(D) [+ causal mask: key j <= query i]) v, in fp64, rounded once to fp16.

    Computed by blocks of queries so the score matrix never has to fit in memory at once.
    """
    b, h, s, d = q.shape
    scale = d ** -0.5
    qd, kd, vd = q.double(), k.double(), v.double()
    out = torch.empty_like(q)
    chunk = max(1, (1 << 26) // max(1, b * h * s))
    for i0 in range(0, s, chunk):
        i1 = min(s, i0 + chunk)
        scores = (qd[:, :, i0:i1] @ kd.transpose(-1, -2)) * scale            # [B, H, i1-i0, S]
        if causal:
            rows = torch.arange(i0, i1, device=q.device)[:, None]
            cols = torch.arange(s, device=q.device)[None, :]
            scores = scores.masked_fill(cols > rows, float("-inf"))
        out[:, :, i0:i1] = (torch.softmax(scores, dim=-1) @ vd).to(q.dtype)
    return out
