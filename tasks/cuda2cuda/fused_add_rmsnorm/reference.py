"""Fused residual add + RMSNorm (bf16 in, bf16 out): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: a sublayer's output; residual [M, N]: the residual stream (larger, as in a deep layer);
    w [N]: a learned gain around 1."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    residual = 2.0 * torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.bfloat16),
            "residual": residual.to(device=device, dtype=torch.bfloat16),
            "w": w.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, M: int, N: int,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """residual_out = x + residual, rounded to bf16 (the new residual stream);
    y = residual_out / sqrt(mean(residual_out^2, over the row) + eps) * w, in fp32 on the rounded sum,
    rounded once to bf16. Returns (y, residual_out)."""
    assert x.shape == (M, N) and residual.shape == (M, N) and w.shape == (N,)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    h = (x.to(acc) + residual.to(acc)).to(x.dtype)
    hf = h.to(acc)
    rstd = torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (hf * rstd * w.to(acc)).to(x.dtype), h
