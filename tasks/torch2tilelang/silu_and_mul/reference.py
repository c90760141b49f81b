"""SiLU-and-mul (SwiGLU activation): the specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, 2*D]: the fused gate/up projection output of an MLP, roughly standard normal."""
    t, d = int(config["T"]), int(config["D"])
    x = torch.randn(t, 2 * d, generator=gen, device=gen.device, dtype=torch.float32) * 2.0
    return {"x": x.to(device=device, dtype=DTYPES[config["dtype"]])}


def reference(x: torch.Tensor) -> torch.Tensor:
    """y = silu(x[:, :D]) * x[:, D:], where silu(a) = a * sigmoid(a)."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]
