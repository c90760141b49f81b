"""Fused residual add + RMSNorm (the pre-norm of every decoder layer after the first, as vLLM fuses it): the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: a sublayer's output; residual [M, N]: the residual stream (larger, a few outlier channels);
    w [N]: the norm's weight near 1."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    r = 2.0 * torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    r[:, :: max(1, n // 16)] *= 6.0
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    dtype = DTYPES[config["dtype"]]
    return {"x": x.to(device=device, dtype=dtype), "residual": r.to(device=device, dtype=dtype),
            "w": w.to(device=device, dtype=dtype)}


def reference(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out): s = x + residual in fp32 (float64 for float64 inputs); residual_out = s and
    y = s * rsqrt(mean(s^2 over the row) + eps) * w, each rounded once to the input dtype."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    s = x.to(acc) + residual.to(acc)
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * w.to(acc)
    return y.to(x.dtype), s.to(x.dtype)
