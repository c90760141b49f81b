"""LayerNorm backward over the last dimension (dx, dw, db): the specification of the task."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """What the forward saved and the upstream gradient: x [M, N] activations with a per-row offset; w [N]
    a gain around 1; mean, rstd [M] in fp32, the statistics of x as stored (eps 1e-5); dy [M, N] normal."""
    m, n = int(config["M"]), int(config["N"])
    dtype = DTYPES[config["dtype"]]
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    x = (x * 2.0 + torch.randn(m, 1, generator=gen, device=gen.device, dtype=torch.float32)).to(dtype)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    dy = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    xf = x.to(torch.float32)
    mean = xf.mean(dim=-1)
    rstd = torch.rsqrt(xf.var(dim=-1, unbiased=False) + 1e-5)
    return {"x": x.to(device), "w": w.to(device=device, dtype=dtype), "mean": mean.to(device),
            "rstd": rstd.to(device), "dy": dy.to(device=device, dtype=dtype)}


def reference(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
              dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """With xhat = (x - mean) * rstd and g = dy * w, per row:
        dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat))     (rounded once to x's dtype)
        dw = sum over rows of dy * xhat,   db = sum over rows of dy (both fp32)."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    xf, wf, dyf = x.to(acc), w.to(acc), dy.to(acc)
    r = rstd.to(acc)[:, None]
    xhat = (xf - mean.to(acc)[:, None]) * r
    g = dyf * wf
    dx = r * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True))
    dw = (dyf * xhat).sum(dim=0)
    db = dyf.sum(dim=0)
    return dx.to(x.dtype), dw, db
