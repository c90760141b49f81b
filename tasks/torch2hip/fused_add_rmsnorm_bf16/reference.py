"""Fused residual add + RMSNorm (bf16), as in every pre-norm LLM decoder layer: the specification."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: a sublayer's output; residual [M, N]: the residual stream (larger); w [N]: a gain around 1."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    residual = 2.0 * torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    bf16 = torch.bfloat16
    return {"x": x.to(device=device, dtype=bf16), "residual": residual.to(device=device, dtype=bf16),
            "w": w.to(device=device, dtype=bf16)}


def reference(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, M: int, N: int,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The Hugging Face Llama way, eagerly:
    h = x + residual (bf16); out = w * (h / sqrt(mean(h^2) + eps)).to(bf16) (statistics in fp32).
    Returns (out, h): the normalized activations and the updated residual stream."""
    h = x + residual
    acc = torch.float64 if h.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    hf = h.to(acc)
    variance = hf.pow(2).mean(-1, keepdim=True)
    normed = hf * torch.rsqrt(variance + eps)
    out = w * normed.to(h.dtype)
    return out, h
