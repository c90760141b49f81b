"""Per-token cross-entropy loss of bf16 logits over a vocabulary (fp32 loss, ignore_index -100), as the
loss of LLM training and the log-likelihood of evaluation and RL scoring compute it: the specification of
the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [M, V] bf16: N(0, 1) scaled per row by a temperature in [1, 4) (flat to peaked rows), plus a
    bump of 6 on the label of about half of the rows (a model that is right, as in training); labels [M]
    int64 uniform in [0, V), about 1 in 8 set to -100 (padding and prompt tokens)."""
    m, v = int(config["M"]), int(config["V"])
    dev = gen.device
    labels = torch.randint(0, v, (m,), generator=gen, device=dev, dtype=torch.int64)
    logits = torch.randn(m, v, generator=gen, device=dev, dtype=torch.float32)
    logits *= 1.0 + 3.0 * torch.rand(m, 1, generator=gen, device=dev)
    right = torch.rand(m, generator=gen, device=dev) < 0.5
    rows = torch.arange(m, device=dev)
    logits[rows, labels] += 6.0 * right.float()
    ignored = torch.rand(m, generator=gen, device=dev) < 0.125
    labels = torch.where(ignored, torch.full_like(labels, IGNORE_INDEX), labels)
    return {"logits": logits.to(device=device, dtype=torch.bfloat16), "labels": labels.to(device)}


def reference(logits: torch.Tensor, labels: torch.Tensor, M: int, V: int) -> torch.Tensor:
    """loss[i] = logsumexp(logits[i, :]) - logits[i, labels[i]] in fp32, 0 where labels[i] == -100
    (F.cross_entropy on the upcast logits, reduction="none", as Hugging Face models compute it)."""
    assert logits.shape == (M, V) and labels.shape == (M,)
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    return F.cross_entropy(logits.to(acc), labels, ignore_index=IGNORE_INDEX, reduction="none")
