"""Rotary position embedding, NeoX / Llama style (the two halves of each head rotate together): the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, H, D]: queries (or keys) of T tokens; cos, sin [T, D/2]: the rotation of each token's position
    (random positions up to the model's context, the model's rope theta)."""
    t, h, d = int(config["T"]), int(config["H"]), int(config["D"])
    x = torch.randn(t, h, d, generator=gen, device=gen.device, dtype=torch.float32)
    pos = torch.randint(0, int(config["max_pos"]), (t,), generator=gen, device=gen.device).to(torch.float64)
    inv_freq = float(config["theta"]) ** (-torch.arange(0, d // 2, device=gen.device, dtype=torch.float64) * 2 / d)
    angle = pos[:, None] * inv_freq[None, :]
    dtype = DTYPES[config["dtype"]]
    return {"x": x.to(device=device, dtype=dtype), "cos": angle.cos().to(device=device, dtype=dtype),
            "sin": angle.sin().to(device=device, dtype=dtype)}


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """y = x * cos + rotate_half(x) * sin per head, in fp32 (float64 for float64 inputs), rounded once."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    c, s = cos.to(acc)[:, None, :], sin.to(acc)[:, None, :]
    half = x.shape[-1] // 2
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
