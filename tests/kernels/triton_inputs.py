"""Trusted input makers for trace_build in the tests: each returns the entry's positional arguments."""

import torch


def vector_add(n: int = 3000) -> tuple[torch.Tensor, ...]:
    return torch.randn(n), torch.randn(n), torch.empty(n)


def matmul(m: int = 64, n: int = 40, k: int = 48, dtype: str = "float32") -> tuple[torch.Tensor, ...]:
    dt = getattr(torch, dtype)
    return torch.randn(m, k).to(dt), torch.randn(k, n).to(dt), torch.empty(m, n, dtype=dt)


def exp2x(n: int = 300) -> tuple[torch.Tensor, ...]:
    return torch.randn(n), torch.empty(n)


def softmax(rows: int = 8, cols: int = 100) -> tuple[torch.Tensor, ...]:
    return torch.randn(rows, cols), torch.empty(rows, cols)
