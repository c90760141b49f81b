"""SwiGLU activation in fp16 (SiLU-and-mul): the specification of the task, and the eager baseline it is
timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, 2*D]: the fused gate/up projection output of an MLP, roughly normal with std 2."""
    t, d = int(config["T"]), int(config["D"])
    x = torch.randn(t, 2 * d, generator=gen, device=gen.device, dtype=torch.float32) * 2.0
    return {"x": x.to(device=device, dtype=torch.float16)}


def reference(x: torch.Tensor, T: int, D: int) -> torch.Tensor:
    """y = silu(x[:, :D]) * x[:, D:], where silu(a) = a * sigmoid(a)."""
    assert x.shape == (T, 2 * D)
    return F.silu(x[:, :D]) * x[:, D:]
