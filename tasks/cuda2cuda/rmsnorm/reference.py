"""RMSNorm (bf16 in, bf16 out): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: activations, roughly standard normal; w [N]: a learned gain around 1."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.bfloat16), "w": w.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, w: torch.Tensor, M: int, N: int, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2, over the row) + eps) * w, in fp32, rounded once to x's dtype (bf16)."""
    assert x.shape == (M, N) and w.shape == (N,)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    xf = x.to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * rstd * w.to(acc)).to(x.dtype)
