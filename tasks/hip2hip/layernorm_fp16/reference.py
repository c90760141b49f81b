"""LayerNorm (fp16 in, fp16 out): the specification of the task."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: activations with a per-row offset and spread; w [N]: a gain around 1; b [N]: a small bias."""
    m, n = int(config["M"]), int(config["N"])
    row_mean = 2.0 * torch.randn(m, 1, generator=gen, device=gen.device, dtype=torch.float32)
    row_std = 0.5 + torch.rand(m, 1, generator=gen, device=gen.device, dtype=torch.float32)
    x = row_mean + row_std * torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    b = 0.1 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    return {"x": x.to(device=device, dtype=torch.float16), "w": w.to(device=device, dtype=torch.float16),
            "b": b.to(device=device, dtype=torch.float16)}


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, M: int, N: int, eps: float) -> torch.Tensor:
    """y = (x - mean) / sqrt(var + eps) * w + b over each row (biased variance), in fp32, rounded once."""
    assert x.shape == (M, N) and w.shape == (N,) and b.shape == (N,)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    y = torch.nn.functional.layer_norm(x.to(acc), (N,), w.to(acc), b.to(acc), eps)
    return y.to(x.dtype)
