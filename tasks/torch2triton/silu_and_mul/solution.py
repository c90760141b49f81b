"""SiLU-and-mul in Triton: the expert version.

Key ideas (the op is memory-bound: the floor is one read of x [T, 2D] and one write of y [T, D]):
- One fused kernel: eager PyTorch runs silu (read a, write a temporary) then mul (read the temporary
  and b, write y): 5*T*D element moves against 3*T*D here, so ~1.6x from fusion alone.
- A 2-D tile of [ROWS, BLOCK_D] per program: BLOCK_D covers up to 2048 columns of a row and ROWS packs
  several short rows together, so every program moves ~4K output elements (several 16-byte loads per
  thread in flight) whatever the shape. Contiguous rows let Triton emit 16-byte vector loads and stores
  when D % 8 == 0 (it specializes the row stride on divisibility by 16); odd D still works, with
  narrower accesses.
- Math in fp32: silu(a) = a * sigmoid(a) = a / (1 + 2^(-a*log2 e)), one rounding to the output dtype.
- int64 row offsets (T * 2D can pass 2^31 elements on large prefill batches); masks on both edges.
"""

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _silu_and_mul(x_ptr, y_ptr, T, D, x_stride, y_stride, BLOCK_D: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = (rows < T)[:, None] & (cols < D)[None, :]
    rows = rows.to(tl.int64)
    x_off = rows[:, None] * x_stride + cols[None, :]
    a = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + x_off + D, mask=mask, other=0.0).to(tl.float32)
    y = a / (1.0 + tl.exp2(-a * LOG2E)) * b
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def entry(x: torch.Tensor, y: torch.Tensor) -> None:
    """Write silu(x[:, :D]) * x[:, D:] into y [T, D] (preallocated, same dtype as x); return None."""
    n_tok, d = y.shape
    if n_tok == 0 or d == 0:
        return
    block_d = min(2048, triton.next_power_of_2(d))
    rows = max(1, 4096 // block_d)
    rows = min(rows, triton.next_power_of_2(n_tok))
    num_warps = 8 if rows * block_d >= 4096 else 4
    grid = (triton.cdiv(n_tok, rows), triton.cdiv(d, block_d))
    _silu_and_mul[grid](x, y, n_tok, d, x.stride(0), y.stride(0),
                        BLOCK_D=block_d, ROWS=rows, num_warps=num_warps)
