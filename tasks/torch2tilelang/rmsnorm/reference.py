"""RMSNorm (Llama, Mistral, Qwen, Gemma...): the specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: hidden states (roughly standard normal, a few large channels); w [N]: the norm's weight near 1."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    x[:, :: max(1, n // 16)] *= 8.0  # outlier channels, as in real activations
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    dtype = DTYPES[config["dtype"]]
    return {"x": x.to(device=device, dtype=dtype), "w": w.to(device=device, dtype=dtype)}


def reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x * rsqrt(mean(x^2 over the row) + eps) * w, in fp32 (float64 for float64 inputs), rounded once."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.to(acc)).to(x.dtype)
