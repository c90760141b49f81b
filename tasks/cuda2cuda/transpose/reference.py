"""2-D transpose (fp32): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: random fp32 values (every element distinct in practice, so a misplaced one shows)."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device)}


def reference(x: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """y [N, M] with y[j, i] = x[i, j], contiguous."""
    assert x.shape == (M, N)
    return x.t().contiguous()
