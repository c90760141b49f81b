"""Sampling one token per row from softmax(logits / temperature): the specification of the task.

The output is a draw, so the reference does not return one: it returns, for the output `token`, each row's
probabilities (shape [B, V]), and the judge tests the kernel's draws against them (check = "sample").
"""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [B, V]: normal with std 2, like a language model's next-token logits (spread enough that
    no row is nearly one-hot and the draws differ from the likeliest class)."""
    b, v = int(config["B"]), int(config["V"])
    logits = torch.randn(b, v, generator=gen, device=gen.device, dtype=torch.float32) * 2.0
    return {"logits": logits.to(device)}


def reference(logits: torch.Tensor, *, temperature: float, seed: int) -> torch.Tensor:
    """P(token[i] = j) = softmax(logits[i] / temperature)[j], in fp32 (float64 given float64 logits). `seed`
    only picks the draws; the distribution does not depend on it."""
    acc = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return torch.softmax(logits.to(acc) / temperature, dim=-1)
