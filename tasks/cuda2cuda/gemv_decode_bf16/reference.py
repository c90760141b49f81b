"""Decode-time GEMV, y = x W^T (bf16 in, bf16 out): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [B, K]: activations ~ N(0, 1); W [N, K]: weights ~ N(0, 1/K) (nn.Linear layout; y stays O(1))."""
    b, n, k = int(config["B"]), int(config["N"]), int(config["K"])
    x = torch.randn(b, k, generator=gen, device=gen.device, dtype=torch.float32)
    w = torch.randn(n, k, generator=gen, device=gen.device, dtype=torch.float32) / (k ** 0.5)
    return {"x": x.to(device=device, dtype=torch.bfloat16), "W": w.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, W: torch.Tensor, B: int, N: int, K: int) -> torch.Tensor:
    """y[b, n] = sum_k x[b, k] * W[n, k], products and sums in fp32 (never TF32), rounded once to bf16."""
    assert x.shape == (B, K) and W.shape == (N, K)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return (x.to(acc) @ W.to(acc).T).to(x.dtype)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
