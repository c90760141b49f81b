"""Bias + GELU (exact, erf form): the specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, N]: a projection's output (std 2); bias [N]: a learned bias (std 0.5)."""
    t, n = int(config["T"]), int(config["N"])
    dtype = DTYPES[config["dtype"]]
    x = torch.randn(t, n, generator=gen, device=gen.device, dtype=torch.float32) * 2.0
    bias = torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32) * 0.5
    return {"x": x.to(device=device, dtype=dtype), "bias": bias.to(device=device, dtype=dtype)}


def reference(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """y = gelu(x + bias), gelu(h) = h * Phi(h) = 0.5 * h * (1 + erf(h / sqrt(2))), as eager PyTorch runs it."""
    return F.gelu(x + bias)
