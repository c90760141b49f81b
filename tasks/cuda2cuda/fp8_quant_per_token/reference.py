"""Dynamic per-token FP8 (e4m3fn) quantization of bf16 activations: the specification of the task."""

from __future__ import annotations

import torch

FP8_MAX = 448.0
"""The largest finite float8_e4m3fn value."""
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)
"""The smallest scale (as vLLM's per-token quantization): guards all-zero rows. In fp32 this is the
constant `1.0f / (448.0f * 512.0f)`."""


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, K]: activations, roughly standard normal, with a few outlier channels (x10) as real LLM
    activations have, so rows' maxima differ and most values use the lower exponents of e4m3."""
    m, k = int(config["M"]), int(config["K"])
    x = torch.randn(m, k, generator=gen, device=gen.device, dtype=torch.float32)
    outliers = torch.randperm(k, generator=gen, device=gen.device)[: max(1, k // 512)]
    x[:, outliers] *= 10.0
    return {"x": x.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, M: int, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scale[i] = max(amax_j |x[i, j]| / 448, MIN_SCALE), in fp32;
    q[i, j] = float8_e4m3fn(clamp(x[i, j] / scale[i], -448, 448)): an IEEE fp32 division, rounded to the
    nearest e4m3 value (ties to even), returned as its uint8 bit pattern. Returns (q, scale)."""
    assert x.shape == (M, K)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    xf = x.to(acc)
    amax = xf.abs().amax(dim=-1, keepdim=True)
    # Divide by tensors, never by a Python number: on the GPU PyTorch turns `t / 448.0` into a multiply by
    # the reciprocal, which is not the IEEE quotient the specification (and a CUDA `/`) gives.
    scale = torch.clamp_min(amax / torch.full_like(amax, FP8_MAX), MIN_SCALE)
    q = torch.clamp(xf / scale, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return q, scale.squeeze(-1)
