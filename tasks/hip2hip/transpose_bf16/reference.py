"""Batched transpose of the last two dimensions (bf16): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [B, M, N]: random bf16 values (every element distinct enough that a misplaced one shows)."""
    b, m, n = int(config["B"]), int(config["M"]), int(config["N"])
    x = torch.randn(b, m, n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, B: int, M: int, N: int) -> torch.Tensor:
    """y[b, j, i] = x[b, i, j]: a contiguous [B, N, M] tensor (an exact copy of the values)."""
    assert x.shape == (B, M, N)
    # Not `.contiguous()`: with a size-1 dimension it may keep the transposed (non-unit) strides.
    y = torch.empty((B, N, M), dtype=x.dtype, device=x.device)
    y.copy_(x.transpose(1, 2))
    return y
