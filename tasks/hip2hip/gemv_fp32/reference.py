"""Matrix-vector product y = A x in fp32: the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """A [M, K]: weights ~ N(0, 1/K) (so y stays O(1) for any K); x [K]: activations ~ N(0, 1)."""
    m, k = int(config["M"]), int(config["K"])
    a = torch.randn(m, k, generator=gen, device=gen.device, dtype=torch.float32) / (k ** 0.5)
    x = torch.randn(k, generator=gen, device=gen.device, dtype=torch.float32)
    return {"A": a.to(device), "x": x.to(device)}


def reference(A: torch.Tensor, x: torch.Tensor, M: int, K: int) -> torch.Tensor:
    """y[i] = sum_k A[i, k] * x[k], computed in float64 and rounded to fp32 (any fp32 summation order passes)."""
    assert A.shape == (M, K) and x.shape == (K,)
    return (A.double() @ x.double()).to(A.dtype)
