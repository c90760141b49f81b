"""Fused residual add + RMSNorm + static per-tensor FP8 (e4m3) quantization, as an FP8-quantized Llama
layer runs it before its QKV / gate-up projection (vLLM's fused_add_rms_norm_static_fp8_quant): the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [M, N]: a sublayer's output; residual [M, N]: the residual stream (larger); w [N]: a gain around 1;
    scale [1]: the calibrated static activation scale (fp32, positive, 0.006..0.012, so most of
    normed / scale lands inside +-448 and the largest values saturate)."""
    m, n = int(config["M"]), int(config["N"])
    x = torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    residual = 2.0 * torch.randn(m, n, generator=gen, device=gen.device, dtype=torch.float32)
    w = 1.0 + 0.25 * torch.randn(n, generator=gen, device=gen.device, dtype=torch.float32)
    scale = 0.006 + 0.006 * torch.rand(1, generator=gen, device=gen.device, dtype=torch.float32)
    bf16 = torch.bfloat16
    return {"x": x.to(device=device, dtype=bf16), "residual": residual.to(device=device, dtype=bf16),
            "w": w.to(device=device, dtype=bf16), "scale": scale.to(device)}


def reference(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, scale: torch.Tensor, M: int, N: int,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The Hugging Face Llama RMSNorm, eagerly, then vLLM's static FP8 quantization:
    h = x + residual (bf16); normed = w * (h / sqrt(mean(h^2) + eps)).to(bf16) (statistics in fp32);
    q = clamp(normed / scale, -448, 448) as float8_e4m3fn (round to nearest even).
    Returns (q, h): the quantized activations and the updated residual stream."""
    h = x + residual
    acc = torch.float64 if h.dtype == torch.float64 else torch.float32  # float64 in: computed in float64
    hf = h.to(acc)
    variance = hf.pow(2).mean(-1, keepdim=True)
    normed = w * (hf * torch.rsqrt(variance + eps)).to(h.dtype)
    q = (normed.to(acc) / scale.to(acc)).clamp(-FP8_MAX, FP8_MAX)
    # float64 in (the precision oracle): the same function before its last rounding, to e4m3
    return (q if acc == torch.float64 else q.to(FP8)), h
