"""Rotary position embedding (RoPE) in Triton: write your kernel here.

For each token t and head h, with half = D // 2 and j < half:
    out[t, h, j]        = x[t, h, j] * cos[t, j] - x[t, h, j + half] * sin[t, j]
    out[t, h, j + half] = x[t, h, j + half] * cos[t, j] + x[t, h, j] * sin[t, j]
for x = q [T, HQ, D] -> q_out and x = k [T, HK, D] -> k_out; cos, sin: [T, D // 2] fp32.
"""

import torch
import triton  # noqa: F401
import triton.language as tl  # noqa: F401


def entry(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
          q_out: torch.Tensor, k_out: torch.Tensor) -> None:
    """Write RoPE(q) into q_out and RoPE(k) into k_out (preallocated, same dtypes as q, k); return None."""
    raise NotImplementedError("write a Triton kernel and launch it from entry()")
