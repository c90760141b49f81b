"""Per-head RMSNorm of the queries and keys followed by NeoX-style rotary position embedding, on the bf16
output of a fused qkv projection (Qwen3's attention prologue): the specification of the task, and the eager
baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """positions [T] int64 in [0, P); qkv [T, (Hq + 2*Hk) * D] bf16: each token's Hq query heads, then Hk key
    heads, then Hk value heads, each head roughly normal with a magnitude of its own (x 2^u, u uniform in
    [-2, 2), so the normalization matters); q_weight, k_weight [D] bf16 around 1 (learned norm gains);
    cos_sin_cache [P, D] fp32: cos(p * f_i) in the first D/2 columns, sin(p * f_i) in the last D/2,
    f_i = theta^(-2i/D) (the layout vLLM uses)."""
    t, hq, hk, d, p = (int(config[key]) for key in ("T", "Hq", "Hk", "D", "P"))
    theta = float(config.get("theta", 1000000.0))
    dev = gen.device
    h = hq + 2 * hk
    positions = torch.randint(0, p, (t,), generator=gen, device=dev, dtype=torch.int64)
    qkv = torch.randn(t, h, d, generator=gen, device=dev, dtype=torch.float32)
    qkv *= torch.exp2(4.0 * torch.rand(t, h, 1, generator=gen, device=dev) - 2.0)
    q_weight = 1.0 + 0.3 * torch.randn(d, generator=gen, device=dev, dtype=torch.float32)
    k_weight = 1.0 + 0.3 * torch.randn(d, generator=gen, device=dev, dtype=torch.float32)
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(p, dtype=torch.float64), inv_freq)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).float()
    bf16 = torch.bfloat16
    return {"positions": positions.to(device), "qkv": qkv.reshape(t, h * d).to(device=device, dtype=bf16),
            "q_weight": q_weight.to(device=device, dtype=bf16), "k_weight": k_weight.to(device=device, dtype=bf16),
            "cos_sin_cache": cache.to(device)}


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3's RMSNorm over the last dim: normalized in fp32, rounded to x's dtype, times the weight."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    xf = x.to(acc)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference(positions: torch.Tensor, qkv: torch.Tensor, q_weight: torch.Tensor, k_weight: torch.Tensor,
              cos_sin_cache: torch.Tensor, T: int, Hq: int, Hk: int, D: int,
              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q = rms_norm(qkv's query heads) * q_weight, k likewise with k_weight (per head, over D; in bf16 as
    Qwen3 computes it), then out = x * cos + rotate_half(x) * sin per head in fp32, rounded once to bf16:
    out[..., i] = x[i] * cos_i - x[i + D/2] * sin_i, out[..., i + D/2] = x[i + D/2] * cos_i + x[i] * sin_i,
    with cos_i, sin_i = cos_sin_cache[positions[t], i], cos_sin_cache[positions[t], D/2 + i].
    Returns (q_out [T, Hq, D], k_out [T, Hk, D]); the value heads are not used."""
    assert qkv.shape == (T, (Hq + 2 * Hk) * D) and positions.shape == (T,)
    q = qkv[:, : Hq * D].view(T, Hq, D)
    k = qkv[:, Hq * D : (Hq + Hk) * D].view(T, Hk, D)
    q = _rms_norm(q, q_weight, eps)
    k = _rms_norm(k, k_weight, eps)
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)          # [T, D/2] each
    cos = torch.cat((cos, cos), dim=-1).unsqueeze(1)              # [T, 1, D]
    sin = torch.cat((sin, sin), dim=-1).unsqueeze(1)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    qf, kf = q.to(acc), k.to(acc)
    q_out = qf * cos + _rotate_half(qf) * sin
    k_out = kf * cos + _rotate_half(kf) * sin
    return q_out.to(qkv.dtype), k_out.to(qkv.dtype)
