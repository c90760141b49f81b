"""Per-token cross-entropy loss (fp32 logits): the specification of the task."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [T, V]: ~N(0, 2^2) plus one boosted class per row; target [T]: classes in [0, V)."""
    t, v = int(config["T"]), int(config["V"])
    logits = 2.0 * torch.randn(t, v, generator=gen, device=gen.device, dtype=torch.float32)
    # A confident model: boost one random class per row (sometimes the target) well above the rest.
    boost = torch.randint(0, v, (t,), generator=gen, device=gen.device)
    logits[torch.arange(t, device=gen.device), boost] += 3.0 + math.log(v)
    target = torch.randint(0, v, (t,), generator=gen, device=gen.device, dtype=torch.int64)
    hit = torch.rand(t, generator=gen, device=gen.device) < 0.3
    target = torch.where(hit, boost, target)
    return {"logits": logits.to(device), "target": target.to(device)}


def reference(logits: torch.Tensor, target: torch.Tensor, T: int, V: int) -> torch.Tensor:
    """loss[t] = logsumexp(logits[t, :]) - logits[t, target[t]], i.e. F.cross_entropy(reduction="none")."""
    assert logits.shape == (T, V) and target.shape == (T,)
    return F.cross_entropy(logits, target, reduction="none")
