"""Rotary position embedding, rotate-half (GPT-NeoX / Llama-HF) form, bf16: the specification."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, H, D]: queries or keys; cos, sin [T, D/2]: the rotary tables at each token's position
    (positions scattered as in a packed batch, theta = 500000 as in Llama 3)."""
    t, h, d = int(config["T"]), int(config["H"]), int(config["D"])
    x = torch.randn(t, h, d, generator=gen, device=gen.device, dtype=torch.float32)
    pos = torch.randint(0, 8192, (t,), generator=gen, device=gen.device).to(torch.float64)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d // 2, device=gen.device, dtype=torch.float64) * 2 / d))
    angles = pos[:, None] * inv_freq[None, :]
    return {"x": x.to(device=device, dtype=torch.bfloat16),
            "cos": angles.cos().to(device=device, dtype=torch.float32),
            "sin": angles.sin().to(device=device, dtype=torch.float32)}


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, T: int, H: int, D: int) -> torch.Tensor:
    """x1, x2 = the two halves of each head; y = cat(x1*cos - x2*sin, x2*cos + x1*sin), in fp32, to bf16."""
    assert x.shape == (T, H, D) and cos.shape == (T, D // 2) and sin.shape == (T, D // 2)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    xf = x.to(acc)
    x1, x2 = xf[..., : D // 2], xf[..., D // 2:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
