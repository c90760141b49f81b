"""LayerNorm in Triton: the expert version (Hopper / H200).

LayerNorm is memory-bound: the floor is one read of x and one write of y (2*M*N*itemsize bytes; w and b
are tiny and stay in L2). At ~4.3 TB/s, bf16 8192x4096 (134 MB) takes ~31 us.

Why it is faster than the baseline (one row per program, 4 warps, 512-wide chunks, three sweeps):
- Rows up to 16384 elements: ONE sweep. The whole row lives in registers (BLOCK_N = next_power_of_2(N)),
  x is read from memory exactly once, and mean, centred variance ((x - mean)^2, exact, no E[x^2]-E[x]^2
  cancellation) and the normalized output are all computed from the register copy. The baseline reads x
  three times (the 2nd and 3rd mostly from L2, but with a dependent reduction and a block-wide barrier
  between sweeps, and only one 512-element load in flight per program per step).
- Short rows: a program takes a [ROWS, BLOCK_N] tile of several rows (~4-8 K elements), so each program
  has several 16-byte loads per thread in flight and w/b are loaded once per program, not per row; ROWS
  shrinks when M is small so the grid still covers the 132 SMs. num_warps grows with the tile so every
  thread holds 8-32 values.
- Rows over 16384 elements: two sweeps (statistics, then normalize) instead of three: the first keeps
  per-lane sums of (x - x[0]) and (x - x[0])^2 (shifted by the row's first value: no cancellation for
  rows with a large mean), the second walks the row backwards so its first chunks are still in L2.
- int64 row offsets, masks on both edges, one reciprocal sqrt per row.
Expected on the H200: ~80-90% of HBM bandwidth against ~35-55% for the baseline, so ~1.6-2.5x on
long rows and more on short rows (bf16 65536x768: the baseline's one 768-element row per 4-warp program
is launch-/latency-bound).
"""

import functools

import torch
import triton
import triton.language as tl

MAX_FUSED = 16384       # longest row kept in registers


@triton.jit
def _layernorm_fused(x_ptr, w_ptr, b_ptr, y_ptr, M, N, x_stride, y_stride, eps,
                     BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    row_ok = rows < M
    rows = tl.minimum(rows, M - 1).to(tl.int64)   # out-of-range rows re-read the last row, never stored
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=col_ok[None, :],
                other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    d = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
    var = tl.sum(d * d, axis=1) / N
    rstd = 1.0 / tl.sqrt(var + eps)
    y = d * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _layernorm_wide(x_ptr, w_ptr, b_ptr, y_ptr, N, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    offs = tl.arange(0, BLOCK)
    shift = tl.load(x_row).to(tl.float32)         # shifted sums: robust when |mean| >> std
    s1 = tl.zeros([BLOCK], tl.float32)
    s2 = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift, 0.0)
        s1 += d
        s2 += d * d
    m1 = tl.sum(s1, axis=0) / N                   # mean - shift
    var = tl.maximum(tl.sum(s2, axis=0) / N - m1 * m1, 0.0)
    mean = shift + m1
    rstd = 1.0 / tl.sqrt(var + eps)
    n_chunks = tl.cdiv(N, BLOCK)
    for i in range(0, n_chunks):
        cols = (n_chunks - 1 - i) * BLOCK + offs  # backwards: the freshest chunks are still in L2
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@functools.cache
def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


def entry(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, y: torch.Tensor, *, eps: float) -> None:
    """LayerNorm over the last dim of x [M, N] with weight w [N] and bias b [N], into y [M, N]."""
    n_rows, n_cols = x.shape
    if n_rows == 0 or n_cols == 0:
        return
    block_n = triton.next_power_of_2(n_cols)
    if block_n <= MAX_FUSED:
        # ~4K elements per program for short rows, but keep >= 4 programs per SM when M allows.
        rows = max(1, 4096 // block_n)
        while rows > 1 and triton.cdiv(n_rows, rows) < 4 * _num_sms(x.device):
            rows //= 2
        tile = rows * block_n
        num_warps = 4 if tile <= 2048 else 8 if tile <= 8192 else 16
        grid = (triton.cdiv(n_rows, rows),)
        _layernorm_fused[grid](x, w, b, y, n_rows, n_cols, x.stride(0), y.stride(0), eps,
                               BLOCK_N=block_n, ROWS=rows, num_warps=num_warps)
    else:
        _layernorm_wide[(n_rows,)](x, w, b, y, n_cols, x.stride(0), y.stride(0), eps,
                                   BLOCK=4096, num_warps=16)
