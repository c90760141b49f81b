"""GELU(tanh)-and-mul (GeGLU), bf16, the activation of Gemma / Gemma 2 / Gemma 3 MLPs: the specification of
the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, 2*D]: gate projections (first D columns) and up projections (last D columns), ~N(0, 1.5^2)."""
    t, d = int(config["T"]), int(config["D"])
    x = 1.5 * torch.randn(t, 2 * d, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, T: int, D: int) -> torch.Tensor:
    """y = gelu_tanh(x[:, :D]) * x[:, D:], as Gemma's MLP (vLLM's GeluAndMul(approximate="tanh"), Hugging
    Face's gelu_pytorch_tanh) does it eagerly: the activation is rounded to bf16, then the product."""
    assert x.shape == (T, 2 * D)
    return F.gelu(x[:, :D], approximate="tanh") * x[:, D:]
