"""Row softmax in Triton: a straightforward first version.

One program per row walks the row in fixed 1024-element chunks, three times:
pass 1 finds the row max, pass 2 sums exp(x - max), pass 3 writes exp(x - max) / sum.
Computes in fp32 whatever the input dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride

    # Pass 1: the row max.
    acc_max = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        acc_max = tl.maximum(acc_max, x)
    row_max = tl.max(acc_max, axis=0)

    # Pass 2: the sum of exponentials.
    acc_sum = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        acc_sum += tl.exp(x - row_max)
    row_sum = tl.sum(acc_sum, axis=0)

    # Pass 3: normalize and write.
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def entry(x: torch.Tensor, y: torch.Tensor) -> None:
    """Softmax over the last dim of x [M, N] into y [M, N] (same dtype)."""
    n_rows, n_cols = x.shape
    _softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=1024, num_warps=4)
