"""SwiGLU activation (SiLU-and-mul) fused with dynamic per-token FP8 (e4m3fn) quantization, bf16 in: the
specification of the task, and the eager baseline it is timed against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

FP8_MAX = 448.0
"""The largest finite float8_e4m3fn value."""
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)
"""The smallest scale (as vLLM's per-token quantization): guards all-zero rows. In fp32 this is the
constant `1.0f / (448.0f * 512.0f)`."""


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [T, 2*D]: the fused gate/up projection output of a gated MLP (gate in the first D columns, up in
    the last D), roughly normal with std 2; each row gets a magnitude of its own (x 2^u, u uniform in
    [-1, 1)) and a few up channels are outliers (x 8), as real activations have, so the rows' maxima and
    scales differ and the quantized values span the e4m3 exponents."""
    t, d = int(config["T"]), int(config["D"])
    dev = gen.device
    x = torch.randn(t, 2 * d, generator=gen, device=dev, dtype=torch.float32) * 2.0
    x *= torch.exp2(2.0 * torch.rand(t, 1, generator=gen, device=dev) - 1.0)
    outliers = torch.randperm(d, generator=gen, device=dev)[: max(1, d // 512)]
    x[:, d + outliers] *= 8.0
    return {"x": x.to(device=device, dtype=torch.bfloat16)}


def reference(x: torch.Tensor, T: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """y = silu(x[:, :D]) * x[:, D:] in x's dtype (bf16: what vLLM's silu_and_mul writes; PyTorch computes
    silu in fp32 and rounds, then the product in fp32 and rounds); then per token, in fp32:
    scale[t] = max(max_j |y[t, j]| / 448, MIN_SCALE), q[t, j] = float8_e4m3fn(clamp(y[t, j] / scale[t],
    -448, 448)) (IEEE division, round to nearest even). Returns (q, scale). Given float64 x (the
    evaluation's precision oracle) everything is computed in float64 and q is returned unrounded, as
    float64: the quotient that the e4m3 rounding approximates, so a candidate's q is measured against it."""
    assert x.shape == (T, 2 * D)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = F.silu(x[:, :D]) * x[:, D:]
    yf = y.to(acc)
    amax = yf.abs().amax(dim=-1, keepdim=True)
    # Divide by tensors, never by a Python number: on the GPU PyTorch turns `t / 448.0` into a multiply by
    # the reciprocal, which is not the IEEE quotient the specification (and a CUDA `/`) gives.
    scale = torch.clamp_min(amax / torch.full_like(amax, FP8_MAX), MIN_SCALE)
    q = torch.clamp(yf / scale, -FP8_MAX, FP8_MAX)
    if acc != torch.float64:  # float64 in (the precision oracle): q is the exact quotient the e4m3 rounds
        q = q.to(torch.float8_e4m3fn)
    return q, scale.squeeze(-1)
