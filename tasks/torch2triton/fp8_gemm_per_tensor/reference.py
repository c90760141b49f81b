"""FP8 (e4m3) GEMM with per-tensor scales, bf16 out: C = (A @ B^T) * a_scale * b_scale, the W8A8 linear layer
of FP8-served models (vLLM's `Fp8LinearMethod` with per-tensor scales, TensorRT-LLM, torchao float8). The
specification of the task, and the eager baseline it is timed against (dequantize to fp32, fp32 matmul)."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
QMAX = 200.0
"""make_inputs quantizes onto [-QMAX, QMAX] (not 448): the judge's random scale (up to ~2x) and offset
(up to 0.5) must keep every perturbed value inside e4m3's range (+-448), where it stays finite."""


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor quantization as serving does it: scale = amax / QMAX, q = x / scale rounded to e4m3."""
    scale = x.abs().amax() / QMAX
    return (x / scale).to(FP8), scale.reshape(1).to(torch.float32)


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """a [M, K] e4m3 (activations: standard normal, a few channels 8x larger, as LLM activations have),
    b [N, K] e4m3 (weights: normal, std 0.02), each quantized per tensor; a_scale, b_scale: [1] fp32."""
    m, n, k = int(config["M"]), int(config["N"]), int(config["K"])
    dev = gen.device
    x = torch.randn(m, k, generator=gen, device=dev, dtype=torch.float32)
    outliers = torch.randperm(k, generator=gen, device=dev)[: max(1, k // 64)]
    x[:, outliers] *= 8.0
    w = 0.02 * torch.randn(n, k, generator=gen, device=dev, dtype=torch.float32)
    a, a_scale = _quantize(x)
    b, b_scale = _quantize(w)
    return {"a": a.to(device), "b": b.to(device), "a_scale": a_scale.to(device), "b_scale": b_scale.to(device)}


def reference(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor) -> torch.Tensor:
    """c[m, n] = sum_k (a[m, k] * a_scale) * (b[n, k] * b_scale): dequantize, then one fp32 matmul (no TF32),
    one rounding to bf16. Given float64 inputs (the precision oracle) it computes and returns float64."""
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    out = torch.float64 if acc == torch.float64 else torch.bfloat16
    a_deq = a.to(acc) * a_scale.to(acc)
    b_deq = b.to(acc) * b_scale.to(acc)
    return (a_deq @ b_deq.T).to(out)
