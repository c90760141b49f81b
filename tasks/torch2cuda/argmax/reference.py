"""Row-wise argmax (fp32 in, int64 out): the specification of the task, and the eager baseline it is timed
against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: standard normal fp32 values (e.g. logits). With `ties = 1` in the config the values are
    rounded to multiples of 1/4, so the maximum of a row usually occurs several times."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    if int(config.get("ties", 0)):
        x = torch.round(x * 4.0) / 4.0
    return {"x": x.to(device=device)}


def reference(x: torch.Tensor, M: int, N: int) -> torch.Tensor:
    """idx[i] = the smallest j with x[i, j] == max_j x[i, j] (torch.argmax keeps the first maximum)."""
    assert x.shape == (M, N)
    return torch.argmax(x, dim=-1)
