"""Cross-entropy backward with respect to the logits: the specification of the task, and the eager baseline
it is timed against."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
IGNORE_INDEX = -100
"""A label that takes no part in the loss (padding, prompt tokens): its row of dlogits is zero."""


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [M, V]: ~N(0, 2^2) with one class per row boosted by 3 (sometimes the label); labels [M]:
    classes in [0, V), ~10% of them IGNORE_INDEX; dloss [M]: the per-token gradient of the loss, a loss
    scale of 8 V times a per-token weight in [0.5, 1.5] (with softmax values ~1/V it keeps dlogits ~ O(1),
    so the tolerances bind)."""
    m, v = int(config["M"]), int(config["V"])
    dtype = DTYPES[config["dtype"]]
    logits = 2.0 * torch.randn(m, v, generator=gen, device=gen.device, dtype=torch.float32)
    boost = torch.randint(0, v, (m,), generator=gen, device=gen.device)
    logits[torch.arange(m, device=gen.device), boost] += 3.0
    labels = torch.randint(0, v, (m,), generator=gen, device=gen.device, dtype=torch.int64)
    hit = torch.rand(m, generator=gen, device=gen.device) < 0.3
    labels = torch.where(hit, boost, labels)
    ignored = torch.rand(m, generator=gen, device=gen.device) < 0.1
    labels = torch.where(ignored, torch.full_like(labels, IGNORE_INDEX), labels)
    dloss = 8.0 * v * (0.5 + torch.rand(m, generator=gen, device=gen.device, dtype=torch.float32))
    return {"logits": logits.to(device=device, dtype=dtype), "labels": labels.to(device),
            "dloss": dloss.to(device)}


def reference(logits: torch.Tensor, labels: torch.Tensor, dloss: torch.Tensor) -> torch.Tensor:
    """dlogits[i, :] = (softmax(logits[i, :]) - onehot(labels[i])) * dloss[i], zero where labels[i] is
    IGNORE_INDEX: the backward of F.cross_entropy(logits, labels, reduction="none", ignore_index=-100),
    computed in fp32 and rounded once to the logits' dtype."""
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    valid = labels != IGNORE_INDEX
    grad = torch.softmax(logits, dim=-1, dtype=acc)
    rows = torch.arange(labels.shape[0], device=labels.device)
    grad[rows[valid], labels[valid]] -= 1.0
    grad *= torch.where(valid, dloss.to(acc), 0.0)[:, None]
    return grad.to(logits.dtype)
