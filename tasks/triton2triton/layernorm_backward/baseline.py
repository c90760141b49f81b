"""LayerNorm backward in Triton: a straightforward first version, two independent kernels.

dx: one program per row walks the row in fixed 512-element chunks, twice: pass 1 sums g = dy * w and
g * xhat (xhat = (x - mean) * rstd), pass 2 recomputes xhat and g and writes
dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
dw, db: one program per 64-column strip walks all M rows in 32-row tiles, accumulating dy * xhat and dy
in fp32, then sums the tile's rows: a fixed order, so the result is deterministic.
Computes in fp32 whatever the input dtype.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ln_bwd_dx_kernel(x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dx_ptr, N, x_stride, dy_stride, dx_stride,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    dy_row = dy_ptr + row * dy_stride
    dx_row = dx_ptr + row * dx_stride
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)

    # Pass 1: sum(g) and sum(g * xhat).
    acc_g = tl.zeros([BLOCK], tl.float32)
    acc_gx = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        g = dy * w
        acc_g += g
        acc_gx += g * xhat
    c_g = tl.sum(acc_g, axis=0) / N
    c_gx = tl.sum(acc_gx, axis=0) / N

    # Pass 2: dx.
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = (x - mean) * rstd
        dx = rstd * (dy * w - c_g - xhat * c_gx)
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ln_bwd_dwdb_kernel(x_ptr, mean_ptr, rstd_ptr, dy_ptr, dw_ptr, db_ptr, M, N, x_stride, dy_stride,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    acc_dw = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_db = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)
        x = tl.load(x_ptr + rows64[:, None] * x_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows64[:, None] * dy_stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)
        xhat = (x - mean[:, None]) * rstd[:, None]
        acc_dw += dy * xhat
        acc_db += dy
    tl.store(dw_ptr + cols, tl.sum(acc_dw, axis=0), mask=col_ok)
    tl.store(db_ptr + cols, tl.sum(acc_db, axis=0), mask=col_ok)


def entry(x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor,
          dx: torch.Tensor, dw: torch.Tensor, db: torch.Tensor) -> None:
    """LayerNorm backward over the last dim of x [M, N]: dx [M, N] (x's dtype), dw, db [N] (fp32)."""
    n_rows, n_cols = x.shape
    _ln_bwd_dx_kernel[(n_rows,)](x, w, mean, rstd, dy, dx, n_cols, x.stride(0), dy.stride(0), dx.stride(0),
                                 BLOCK=512, num_warps=4)
    _ln_bwd_dwdb_kernel[(triton.cdiv(n_cols, 64),)](x, mean, rstd, dy, dw, db, n_rows, n_cols, x.stride(0),
                                                    dy.stride(0), BLOCK_M=32, BLOCK_N=64, num_warps=4)
