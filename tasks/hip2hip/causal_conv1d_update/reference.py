"""Mamba-style causal conv1d decode update (fp16, width 4, SiLU): the specification of the task."""

from __future__ import annotations

import torch

W = 4  # the convolution width (d_conv) of every Mamba, Mamba-2, Jamba and Zamba layer


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [B, D]: this step's input of each sequence; conv_state [B, D, W-1]: its previous W-1 inputs (oldest
    first); weight [D, W]: the depthwise filter (a trained conv's scale, ~ U(-1, 1) / sqrt(W) * 2); bias [D]."""
    b, d = int(config["B"]), int(config["D"])
    x = torch.randn(b, d, generator=gen, device=gen.device, dtype=torch.float32)
    state = torch.randn(b, d, W - 1, generator=gen, device=gen.device, dtype=torch.float32)
    weight = (torch.rand(d, W, generator=gen, device=gen.device, dtype=torch.float32) * 2 - 1)
    bias = 0.5 * torch.randn(d, generator=gen, device=gen.device, dtype=torch.float32)
    f16 = torch.float16
    return {"x": x.to(device=device, dtype=f16), "conv_state": state.to(device=device, dtype=f16),
            "weight": weight.to(device=device, dtype=f16), "bias": bias.to(device=device, dtype=f16)}


def reference(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              B: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """window = cat(conv_state, x) along the last axis ([B, D, W]);
    out = silu(sum_j window[..., j] * weight[:, j] + bias), in fp32, rounded once to fp16;
    new_state = window[..., 1:] (the state shifted left by one, x appended). Returns (out, new_state)."""
    assert x.shape == (B, D) and conv_state.shape == (B, D, W - 1) and weight.shape == (D, W)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    window = torch.cat((conv_state, x.unsqueeze(-1)), dim=-1)            # [B, D, W]
    y = (window.to(acc) * weight.to(acc)).sum(dim=-1) + bias.to(acc)
    out = torch.nn.functional.silu(y).to(x.dtype)
    return out, window[..., 1:].contiguous()
