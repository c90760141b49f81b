"""SiLU-and-mul (the SwiGLU activation of Llama/Qwen/Mistral MLPs), bf16: the specification of the task."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, 2H]: the fused gate/up projection output of an MLP (gate half first), spread of ~2."""
    m, h = int(config["M"]), int(config["H"])
    x = 2.0 * torch.randn(m, 2 * h, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, M: int, H: int) -> torch.Tensor:
    """y = silu(x[:, :H]) * x[:, H:], silu(a) = a * sigmoid(a); in fp32, rounded once to x's dtype."""
    assert x.shape == (M, 2 * H)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    xf = x.to(acc)
    return (F.silu(xf[:, :H]) * xf[:, H:]).to(x.dtype)
