"""Row softmax backward in Triton: a straightforward first version.

One program per row walks the row in fixed 1024-element chunks, twice:
pass 1 accumulates dot = sum(y * dy), pass 2 reads y and dy again and writes y * (dy - dot).
Computes in fp32 whatever the input dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_cols, y_stride, dy_stride, dx_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y_row = y_ptr + row * y_stride
    dy_row = dy_ptr + row * dy_stride
    dx_row = dx_ptr + row * dx_stride

    # Pass 1: dot = sum(y * dy) over the row.
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        acc += y * dy
    dot = tl.sum(acc, axis=0)

    # Pass 2: dx = y * (dy - dot).
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        y = tl.load(y_row + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        dx = y * (dy - dot)
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def entry(y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor) -> None:
    """Softmax backward over the last dim: y, dy [M, N] -> dx [M, N] (all the same dtype)."""
    n_rows, n_cols = y.shape
    _softmax_bwd_kernel[(n_rows,)](y, dy, dx, n_cols, y.stride(0), dy.stride(0), dx.stride(0),
                                   BLOCK=1024, num_warps=4)
