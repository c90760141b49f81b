"""Row softmax backward over the last dimension: the specification of the task."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """y [M, N]: the softmax of normal logits (std 2), as the forward saved it; dy [M, N]: the upstream
    gradient, normal with std N (a loss scale: with y ~ 1/N it keeps dx ~ O(1), so the tolerances bind).
    fp16 configs keep N <= 4096 so that dy stays far inside fp16's range."""
    m, n = int(config["M"]), int(config["N"])
    dtype = DTYPES[config["dtype"]]
    logits = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32) * 2.0
    y = torch.softmax(logits, dim=-1)
    dy = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32) * float(n)
    return {"y": y.to(device=device, dtype=dtype), "dy": dy.to(device=device, dtype=dtype)}


def reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx[i, j] = y[i, j] * (dy[i, j] - sum_k dy[i, k] * y[i, k]), computed in fp32, rounded once."""
    acc = torch.float64 if y.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    yf, dyf = y.to(acc), dy.to(acc)
    dot = (yf * dyf).sum(dim=-1, keepdim=True)
    return (yf * (dyf - dot)).to(y.dtype)
