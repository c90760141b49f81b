"""SGEMM (fp32): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """A [M, K], B [K, N]: standard normal fp32 values."""
    m, n, k = int(config["M"]), int(config["N"]), int(config["K"])
    a = torch.randn(m, k, generator=gen, device=gen.device, dtype=torch.float32)
    b = torch.randn(k, n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"A": a.to(device=device), "B": b.to(device=device)}


def reference(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    """C = A @ B, computed in float64 and rounded once to fp32 (so only the candidate's rounding counts)."""
    assert A.shape == (M, K) and B.shape == (K, N)
    return (A.double() @ B.double()).to(A.dtype)
