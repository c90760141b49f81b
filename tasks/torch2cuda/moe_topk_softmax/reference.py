"""MoE router gating (softmax, top-k, renormalize; fp32 in, fp32 weights and int64 ids out): the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """logits [T, E]: router logits, every row a random permutation of E distinct levels.

    Row t is ((r + u) * 8 / E - 4) * s_t + b_t with r a random permutation of 0..E-1, u uniform in
    [0, 0.5), a per-row temperature s_t in [0.5, 1.5) and a per-row shift b_t ~ N(0, 1). Values in a row
    are distinct, at least 2 / E apart (far more than fp32 rounding, also after the runtime's random
    positive scale and offset), so their softmax probabilities are distinct too: the top-k experts and
    their order are unique and the int64 ids can be compared exactly. The jitter u and the temperature
    make the selected weights differ from row to row; the shift tests the max subtraction."""
    t, e = int(config["T"]), int(config["E"])
    dev = gen.device
    ranks = torch.rand(t, e, generator=gen, device=dev).argsort(dim=1, stable=True).float()
    jitter = 0.5 * torch.rand(t, e, generator=gen, device=dev)
    temperature = 0.5 + torch.rand(t, 1, generator=gen, device=dev)
    shift = torch.randn(t, 1, generator=gen, device=dev)
    logits = ((ranks + jitter) * (8.0 / e) - 4.0) * temperature + shift
    return {"logits": logits.to(device=device, dtype=torch.float32)}


def reference(logits: torch.Tensor, T: int, E: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """weights[t, :], ids[t, :] = the K largest softmax probabilities of row t, in descending order, and
    their expert indices; the weights are then divided by their sum (they sum to 1 per token)."""
    assert logits.shape == (T, E)
    probs = torch.softmax(logits, dim=-1)  # in the logits' dtype: fp32 (float64 for the precision oracle)
    weights, ids = torch.topk(probs, K, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids
