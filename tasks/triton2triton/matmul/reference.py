"""Matrix multiply C = A @ B (fp16 in, fp32 accumulation, fp16 out): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """a [M, K] and b [K, N]: roughly standard normal fp16 (activations and weights)."""
    m, n, k = int(config["M"]), int(config["N"]), int(config["K"])
    a = torch.randn(m, k, generator=gen, device=gen.device, dtype=torch.float32)
    b = torch.randn(k, n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"a": a.to(device=device, dtype=torch.float16), "b": b.to(device=device, dtype=torch.float16)}


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """c = a @ b, computed in fp64 (exact products of fp16 values, no TF32), rounded once to fp16."""
    return (a.double() @ b.double()).to(a.dtype)
