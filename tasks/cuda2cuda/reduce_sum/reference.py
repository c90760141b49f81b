"""Row sums (fp32): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: standard normal fp32 values (the runtime adds a random offset and scale per seed)."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device)}


def reference(x: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """y[i] = sum_j x[i, j], computed in float64 and rounded once to x's dtype (fp32)."""
    assert x.shape == (M, N)
    return x.double().sum(dim=-1).to(x.dtype)
