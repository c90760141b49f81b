"""Bias + GELU in Triton: the expert version (Hopper / H200).

The op is memory-bound: the floor is one read of x [T, N] and one write of y [T, N] (the bias, N
elements, stays in L1/L2). Eager PyTorch runs two kernels, `h = x + bias` (read x, write h) and
`gelu(h)` (read h, write y): 4*T*N element moves against 2*T*N here, so ~2x from fusion alone
(bf16 4096x18176: 298 MB -> ~70 us at ~4.3 TB/s, against ~140+ us eager).

- A 2-D tile of [ROWS, BLOCK_N] per program: BLOCK_N covers up to 2048 columns of a row and ROWS packs
  several short rows, so every program moves ~4K elements (several 16-byte loads per thread in flight);
  the bias slice is loaded once per program and broadcast over its rows. Contiguous rows give 16-byte
  vector accesses when N % 8 == 0 (Triton specializes the row stride on divisibility by 16); odd N still
  works, with narrower accesses.
- Math in fp32 with the exact erf (libdevice), one rounding to the output dtype (the reference rounds h
  to the input dtype first; the difference is far inside the tolerance).
- int64 row offsets (T * N can pass 2^31 elements); masks on both edges.
"""

import torch
import triton
import triton.language as tl

INV_SQRT2 = tl.constexpr(0.7071067811865476)


@triton.jit
def _bias_gelu(x_ptr, b_ptr, y_ptr, T, N, x_stride, y_stride, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    mask = (rows < T)[:, None] & col_ok[None, :]
    rows = rows.to(tl.int64)
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    h = x + b[None, :]
    y = 0.5 * h * (1.0 + tl.math.erf(h * INV_SQRT2))
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def entry(x: torch.Tensor, bias: torch.Tensor, y: torch.Tensor) -> None:
    """Write gelu(x + bias) into y [T, N] (preallocated, same dtype as x); return None."""
    n_tok, n = x.shape
    if n_tok == 0 or n == 0:
        return
    block_n = min(2048, triton.next_power_of_2(n))
    rows = max(1, 4096 // block_n)
    rows = min(rows, triton.next_power_of_2(n_tok))
    num_warps = 8 if rows * block_n >= 4096 else 4
    grid = (triton.cdiv(n_tok, rows), triton.cdiv(n, block_n))
    _bias_gelu[grid](x, bias, y, n_tok, n, x.stride(0), y.stride(0), BLOCK_N=block_n, ROWS=rows,
                     num_warps=num_warps)
