"""Merging two partial attention results by their log-sum-exp (bf16 outputs, fp32 LSE), as vLLM does after a
chunked-prefill / prefix-cached / cascade attention split the keys in two: the specification of the task,
and the eager baseline it is timed against."""

from __future__ import annotations

import torch


def make_inputs(config: dict, gen: torch.Generator, device: torch.device) -> dict[str, torch.Tensor]:
    """prefix_output, suffix_output [T, H, D]: the attention outputs over the two key sets (bf16, ~N(0, 1));
    prefix_lse, suffix_lse [H, T]: their log-sum-exp of the scaled scores (fp32, finite, ~8 +- 2 each, so
    either side can dominate a (token, head))."""
    t, h, d = int(config["T"]), int(config["H"]), int(config["D"])
    po = torch.randn(t, h, d, generator=gen, device=gen.device, dtype=torch.float32)
    so = torch.randn(t, h, d, generator=gen, device=gen.device, dtype=torch.float32)
    pl = 8.0 + 2.0 * torch.randn(h, t, generator=gen, device=gen.device, dtype=torch.float32)
    sl = 8.0 + 2.0 * torch.randn(h, t, generator=gen, device=gen.device, dtype=torch.float32)
    bf16 = torch.bfloat16
    return {"prefix_output": po.to(device=device, dtype=bf16), "prefix_lse": pl.to(device),
            "suffix_output": so.to(device=device, dtype=bf16), "suffix_lse": sl.to(device)}


def reference(prefix_output: torch.Tensor, prefix_lse: torch.Tensor, suffix_output: torch.Tensor,
              suffix_lse: torch.Tensor, T: int, H: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """m = max(p_lse, s_lse); a = exp(p_lse - m); b = exp(s_lse - m);
    output = (prefix_output * a + suffix_output * b) / (a + b)   (fp32, rounded once to bf16)
    output_lse = m + log(a + b)                                  (fp32)"""
    assert prefix_output.shape == (T, H, D) and prefix_lse.shape == (H, T)
    acc = torch.float64 if prefix_output.dtype == torch.float64 else torch.float32  # float64 in: the precision oracle
    p = prefix_lse.to(acc).t()[:, :, None]   # [T, H, 1]
    s = suffix_lse.to(acc).t()[:, :, None]
    m = torch.maximum(p, s)
    a = torch.exp(p - m)
    b = torch.exp(s - m)
    total = a + b
    out = prefix_output.to(acc) * (a / total) + suffix_output.to(acc) * (b / total)
    out_lse = (m + torch.log(total))[:, :, 0].t().contiguous()  # [H, T]
    return out.to(prefix_output.dtype), out_lse
