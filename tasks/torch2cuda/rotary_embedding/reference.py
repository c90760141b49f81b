"""Rotary position embedding (RoPE, NeoX / Llama "rotate-half" style) on bf16 queries and keys: the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """positions [T] int64 in [0, P); q [T, Hq, D], k [T, Hk, D] bf16 roughly standard normal;
    cos_sin_cache [P, D] fp32: cos(p * f_i) in the first D/2 columns, sin(p * f_i) in the last D/2,
    f_i = theta^(-2i/D) / factor (the layout vLLM uses; factor: linear RoPE scaling)."""
    t, hq, hk, d, p = (int(config[key]) for key in ("T", "Hq", "Hk", "D", "P"))
    theta = float(config.get("theta", 10000.0))
    positions = torch.randint(0, p, (t,), generator=gen, device=gen.device, dtype=torch.int64)
    q = torch.randn(t, hq, d, generator=gen, device=gen.device, dtype=torch.float32)
    k = torch.randn(t, hk, d, generator=gen, device=gen.device, dtype=torch.float32)
    # Linear RoPE scaling ("position interpolation") by a factor in [1, 4), drawn per seed.
    factor = 1.0 + 3.0 * float(torch.rand(1, generator=gen, device=gen.device, dtype=torch.float64).item())
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(p, dtype=torch.float64) / factor, inv_freq)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).float()
    return {"positions": positions.to(device), "q": q.to(device=device, dtype=torch.bfloat16),
            "k": k.to(device=device, dtype=torch.bfloat16), "cos_sin_cache": cache.to(device)}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def reference(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
              T: int, Hq: int, Hk: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """out = x * cos + rotate_half(x) * sin per head, in fp32, rounded once to bf16:
    out[..., i] = x[i] * cos_i - x[i + D/2] * sin_i and out[..., i + D/2] = x[i + D/2] * cos_i + x[i] * sin_i."""
    assert q.shape == (T, Hq, D) and k.shape == (T, Hk, D) and positions.shape == (T,)
    cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)          # [T, D/2] each
    cos = torch.cat((cos, cos), dim=-1).unsqueeze(1)              # [T, 1, D]
    sin = torch.cat((sin, sin), dim=-1).unsqueeze(1)
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    qf, kf = q.to(acc), k.to(acc)
    q_out = qf * cos + _rotate_half(qf) * sin
    k_out = kf * cos + _rotate_half(kf) * sin
    return q_out.to(q.dtype), k_out.to(k.dtype)
