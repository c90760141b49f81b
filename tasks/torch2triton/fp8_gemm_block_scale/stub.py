"""FP8 GEMM with DeepSeek-V3 block scales in Triton: write your kernel here.

    c[m, n] = sum_k a[m, k] * a_s[m, k // 128] * b[n, k] * b_s[n // 128, k // 128]
    a: [M, K] float8_e4m3fn, a_s: [M, K / 128] float32, b: [N, K] float8_e4m3fn (c = a @ b^T),
    b_s: [ceil(N / 128), K / 128] float32, c: [M, N] bfloat16 (preallocated); accumulate in fp32.
"""

import torch
import triton  # noqa: F401
import triton.language as tl  # noqa: F401


def entry(a: torch.Tensor, a_s: torch.Tensor, b: torch.Tensor, b_s: torch.Tensor, c: torch.Tensor) -> None:
    """Write the block-scaled a @ b^T into c [M, N] (bf16, preallocated); return None."""
    raise NotImplementedError("write a Triton kernel and launch it from entry()")
