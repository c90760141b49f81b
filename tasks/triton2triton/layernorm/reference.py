"""LayerNorm over the last dimension with weight and bias: the specification of the task."""

from __future__ import annotations

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: activations with a per-row offset; w [N]: a gain around 1; b [N]: a small bias."""
    m, n = int(config["M"]), int(config["N"])
    dtype = DTYPES[config["dtype"]]
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    x = x * 2.0 + torch.randn(m, 1, generator=gen, device=gen.device, dtype=torch.float32)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    b = 0.5 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=dtype), "w": w.to(device=device, dtype=dtype),
            "b": b.to(device=device, dtype=dtype)}


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float) -> torch.Tensor:
    """y = (x - mean) / sqrt(var + eps) * w + b over each row (biased variance), in fp32, rounded once."""
    n = x.shape[-1]
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    y = F.layer_norm(x.to(acc), (n,), w.to(acc), b.to(acc), eps)
    return y.to(x.dtype)
