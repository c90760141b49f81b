"""Per-(token, head) dynamic FP8 (e4m3) quantization of the new keys and values before they are written to
an FP8 KV cache (vLLM's per-token-head kv-cache scales, SGLang's / TRT-LLM's dynamic FP8 KV cache): the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)  # vLLM's floor on a dynamic scale (an all-zero head stays finite)


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """k, v [T, H, D]: the projected keys (after RoPE) and values of T new tokens on H KV heads (bf16).
    Keys get a magnitude per head and a few outlier channels (as real keys have), values ~N(0, 1)."""
    t, h, d = int(config["T"]), int(config["H"]), int(config["D"])
    k = torch.randn(t, h, d, generator=gen, device=gen.device, dtype=torch.float32)
    head_mag = 0.5 + 2.0 * torch.rand(1, h, 1, generator=gen, device=gen.device, dtype=torch.float32)
    outlier = 1.0 + 5.0 * (torch.rand(1, 1, d, generator=gen, device=gen.device) < 0.05).float()
    k = k * head_mag * outlier
    v = torch.randn(t, h, d, generator=gen, device=gen.device, dtype=torch.float32)
    bf16 = torch.bfloat16
    return {"k": k.to(device=device, dtype=bf16), "v": v.to(device=device, dtype=bf16)}


def _quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: computed in float64
    xf = x.to(acc)
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = (amax / FP8_MAX).clamp(min=MIN_SCALE)
    q = (xf / scale).clamp(-FP8_MAX, FP8_MAX)
    # float64 in (the precision oracle): the same function before its last rounding, to e4m3
    return (q if acc == torch.float64 else q.to(FP8)), scale.squeeze(-1)


def reference(k: torch.Tensor, v: torch.Tensor, T: int, H: int,
              D: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each token t and head h, over the D elements of k[t, h, :] (in fp32):
    k_scale[t, h] = max(max|k[t, h, :]| / 448, 1 / (448 * 512));
    q_k[t, h, :] = float8_e4m3fn(clamp(k[t, h, :] / k_scale[t, h], -448, 448)); the same for v.
    Returns (q_k, q_v, k_scale, v_scale)."""
    assert k.shape == (T, H, D) and v.shape == (T, H, D)
    q_k, k_scale = _quant(k)
    q_v, v_scale = _quant(v)
    return q_k, q_v, k_scale, v_scale
