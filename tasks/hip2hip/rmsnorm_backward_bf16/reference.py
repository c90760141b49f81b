"""RMSNorm backward (bf16 activations, fp32 statistics and weight gradient), as in Llama/Qwen training: the
specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """What the forward saved and the upstream gradient: x [M, N] bf16 activations (rows of different
    scales); w [N] bf16, a gain around 1; rstd [M] fp32, 1 / sqrt(mean(x^2) + eps) of x as stored (eps 1e-6);
    dy [M, N] bf16, the gradient of the normalized output."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    x = (x * (0.5 + 2.0 * torch.rand(m, 1, generator=gen, device=gen.device, dtype=torch.float32))).to(torch.bfloat16)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    dy = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    rstd = torch.rsqrt(x.to(torch.float32).pow(2).mean(dim=-1) + 1e-6)
    return {"x": x.to(device), "w": w.to(device=device, dtype=torch.bfloat16), "rstd": rstd.to(device),
            "dy": dy.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, M: int,
              N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """With xhat = x * rstd and g = dy * w, per row:
        dx = rstd * (g - xhat * mean_j(g * xhat))     (fp32, rounded once to x's dtype)
        dw = sum over rows of dy * xhat                (fp32)"""
    assert x.shape == (M, N) and w.shape == (N,) and rstd.shape == (M,) and dy.shape == (M, N)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    dyf = dy.to(acc)
    r = rstd.to(acc)[:, None]
    xhat = x.to(acc) * r
    g = dyf * w.to(acc)
    dx = r * (g - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    dw = (dyf * xhat).sum(dim=0)
    return dx.to(x.dtype), dw
