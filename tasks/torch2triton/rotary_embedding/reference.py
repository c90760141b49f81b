"""Rotary position embedding (RoPE, LLaMA / GPT-NeoX "rotate half" style) on q and k: the specification of
the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """q [T, HQ, D], k [T, HK, D]: projected activations; cos, sin [T, D/2]: fp32 tables for each token's
    position (packed sequences: positions are arbitrary), with theta = 500000 as in Llama 3."""
    t, hq, hk, d = int(config["T"]), int(config["HQ"]), int(config["HK"]), int(config["D"])
    dtype = DTYPES[config["dtype"]]
    q = torch.randn(t, hq, d, generator=gen, device=gen.device, dtype=torch.float32)
    k = torch.randn(t, hk, d, generator=gen, device=gen.device, dtype=torch.float32)
    positions = torch.randint(0, 8192, (t,), generator=gen, device=gen.device).to(torch.float64)
    inv_freq = 500000.0 ** (-torch.arange(0, d, 2, device=gen.device, dtype=torch.float64) / d)
    freqs = positions[:, None] * inv_freq[None, :]
    cos, sin = freqs.cos().to(torch.float32), freqs.sin().to(torch.float32)
    return {"q": q.to(device=device, dtype=dtype), "k": k.to(device=device, dtype=dtype),
            "cos": cos.to(device), "sin": sin.to(device)}


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """q_out = q * cos + rotate_half(q) * sin (same for k), with cos/sin repeated over both halves and
    broadcast over heads; the fp32 tables promote the products to fp32, rounded once to q's dtype."""
    cos = torch.cat((cos, cos), dim=-1).unsqueeze(1)   # [T, 1, D]
    sin = torch.cat((sin, sin), dim=-1).unsqueeze(1)
    q_out = (q * cos + rotate_half(q) * sin).to(q.dtype)
    k_out = (k * cos + rotate_half(k) * sin).to(k.dtype)
    return q_out, k_out
