"""Row softmax over the last dimension: the specification of the task."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: normal logits with a spread like attention scores (std 3)."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32) * 3.0
    return {"x": x.to(device=device, dtype=DTYPES[config["dtype"]])}


def reference(x: torch.Tensor) -> torch.Tensor:
    """y[i, j] = exp(x[i, j] - max_k x[i, k]) / sum_k exp(x[i, k] - max_k x[i, k]), computed in fp32."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    return torch.softmax(x.to(acc), dim=-1).to(x.dtype)
