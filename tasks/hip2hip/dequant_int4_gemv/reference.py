"""Int4 weight-only GEMV for decode (AWQ/GPTQ-style groups of 128, fp16): the specification of the task."""

from __future__ import annotations

import torch

GROUP = 128  # quantization group size along K, as AWQ and GPTQ checkpoints use


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """x [B, K]: activations ~ N(0, 1); qweight [N, K/8] int32: 4-bit codes q in [0, 15], 8 per word, code
    of column k = 8 j + e in bits 4e..4e+3 of word j; scales [N, K/128]: per-group fp16 scales (sized so y is
    O(1)); zeros [N, K/128]: per-group fp16 zero points (integers 6..9, as an asymmetric quantizer gives)."""
    b, n, k = int(config["B"]), int(config["N"]), int(config["K"])
    g = k // GROUP
    codes = torch.randint(0, 16, (n, k // 8, 8), generator=gen, device=gen.device, dtype=torch.int64)
    shifts = torch.arange(0, 32, 4, device=gen.device, dtype=torch.int64)
    words = (codes << shifts).sum(dim=-1)                                    # [N, K/8], in [0, 2^32)
    qweight = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    scales = (0.5 + torch.rand(n, g, generator=gen, device=gen.device)) / (4.6 * k ** 0.5)
    zeros = torch.randint(6, 10, (n, g), generator=gen, device=gen.device).to(torch.float32)
    x = torch.randn(b, k, generator=gen, device=gen.device, dtype=torch.float32)
    f16 = torch.float16
    return {"x": x.to(device=device, dtype=f16), "qweight": qweight.to(device),
            "scales": scales.to(device=device, dtype=f16), "zeros": zeros.to(device=device, dtype=f16)}


def reference(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
              B: int, N: int, K: int) -> torch.Tensor:
    """W[n, k] = (q[n, k] - zeros[n, k // 128]) * scales[n, k // 128], with q[n, 8 j + e] = (qweight[n, j] >> 4e)
    & 15; y = x @ W^T, in fp32, rounded once to fp16."""
    assert x.shape == (B, K) and qweight.shape == (N, K // 8) and scales.shape == (N, K // GROUP)
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    shifts = torch.arange(0, 32, 4, device=qweight.device, dtype=torch.int32)
    q = (qweight.unsqueeze(-1) >> shifts) & 15                                # [N, K/8, 8]: arithmetic shift, mask
    w = q.view(N, K // GROUP, GROUP).to(acc)                                  # [N, groups, 128]
    w = (w - zeros.to(acc).unsqueeze(-1)) * scales.to(acc).unsqueeze(-1)
    return (x.to(acc) @ w.view(N, K).T).to(x.dtype)
