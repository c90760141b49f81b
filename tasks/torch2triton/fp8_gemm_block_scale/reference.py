"""FP8 (e4m3) GEMM with DeepSeek-V3 block scales, bf16 out: activations quantized per token and 128-column
group, weights per 128x128 block (DeepSeek-V3/R1, Qwen3-FP8, vLLM's `w8a8_block_fp8_matmul`, DeepGEMM's
normal GEMM). The specification of the task, and the eager baseline it is timed against (dequantize both
operands to fp32 block by block, then one fp32 matmul)."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
GROUP = 128
"""Quantization block: a_s has one scale per (row, 128 columns), b_s one per 128 x 128 block of b."""
QMAX = 200.0
"""make_inputs quantizes onto [-QMAX, QMAX] (not 448): the judge's random scale (up to ~2x) and offset
(up to 0.5) must keep every perturbed value inside e4m3's range (+-448), where it stays finite."""


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """a [M, K] e4m3 and a_s [M, K/128] fp32: normal activations whose (token, group) magnitudes vary by
    e^N(0, 0.7), quantized per group (scale = amax / QMAX); b [N, K] e4m3 and b_s [ceil(N/128), K/128] fp32:
    std-0.02 weights whose 128x128 blocks vary by e^N(0, 0.5), quantized per block. Scales that differ from
    group to group make a kernel that applies the wrong one fail."""
    m, n, k = int(config["M"]), int(config["N"]), int(config["K"])
    assert k % GROUP == 0, "K must be a multiple of 128"
    dev, kg, ng = gen.device, k // GROUP, -(-n // GROUP)
    x = torch.randn(m, kg, GROUP, generator=gen, device=dev, dtype=torch.float32)
    x *= torch.exp(0.7 * torch.randn(m, kg, 1, generator=gen, device=dev, dtype=torch.float32))
    a_s = x.abs().amax(dim=-1) / QMAX                                      # [M, K/128]
    a = (x / a_s[..., None]).reshape(m, k).to(FP8)
    w = 0.02 * torch.randn(ng * GROUP, kg, GROUP, generator=gen, device=dev, dtype=torch.float32)
    w = w.view(ng, GROUP, kg, GROUP) * torch.exp(
        0.5 * torch.randn(ng, 1, kg, 1, generator=gen, device=dev, dtype=torch.float32))
    w = w.reshape(ng * GROUP, kg, GROUP)
    w[n:] = 0.0                                                     # the last block row may be partial
    w = w.view(ng, GROUP, kg, GROUP)
    b_s = w.abs().amax(dim=(1, 3)) / QMAX                           # [ceil(N/128), K/128]
    b = (w / b_s[:, None, :, None]).reshape(ng * GROUP, k)[:n].to(FP8)
    return {"a": a.to(device), "a_s": a_s.to(device), "b": b.to(device), "b_s": b_s.to(device)}


def reference(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor) -> torch.Tensor:
    """c[m, n] = sum_k (a[m, k] * a_s[m, k // 128]) * (b[n, k] * b_s[n // 128, k // 128]): dequantize block by
    block, one fp32 matmul (no TF32), one rounding to bf16. Given float64 inputs (the precision oracle) it
    computes and returns float64."""
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    out = torch.float64 if acc == torch.float64 else torch.bfloat16
    m, k = a.shape
    n = b.shape[0]
    a_deq = (a.to(acc).view(m, k // GROUP, GROUP) * a_s.to(acc)[:, :, None]).view(m, k)
    b_scale = b_s.to(acc).repeat_interleave(GROUP, dim=0)[:n].repeat_interleave(GROUP, dim=1)  # [N, K]
    b_deq = b.to(acc) * b_scale
    return (a_deq @ b_deq.T).to(out)
