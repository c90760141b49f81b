"""Row softmax over the last dimension (fp16 in, fp16 out): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: normal logits with a spread like attention scores or LM logits (std 4), so the softmax
    is far from uniform (a few entries per row carry most of the mass) and subtracting the row max matters."""
    m, n = int(config["M"]), int(config["N"])
    x = 4.0 * torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.float16)}


def reference(x: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """y[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k]), in fp32, rounded once."""
    assert x.shape == (M, N)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    return torch.softmax(x.to(acc), dim=-1).to(x.dtype)
