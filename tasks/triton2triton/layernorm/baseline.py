"""LayerNorm in Triton: a straightforward first version.

One program per row walks the row in fixed 512-element chunks, three times (as in the Triton tutorial):
pass 1 sums x for the mean, pass 2 sums (x - mean)^2 for the variance, pass 3 normalizes, applies the
weight and bias, and writes. Computes in fp32 whatever the input dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride

    # Pass 1: the mean.
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N

    # Pass 2: the variance.
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        d = tl.where(cols < N, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)

    # Pass 3: normalize, scale, shift, write.
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def entry(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, *, eps: float) -> None:
    """LayerNorm over the last dim of x [M, N] with weight w [N] and bias b [N], into y [M, N]."""
    n_rows, n_cols = x.shape
    _layernorm_kernel[(n_rows,)](x, w, b, y, n_cols, x.stride(0), y.stride(0), eps, BLOCK=512, num_warps=4)
