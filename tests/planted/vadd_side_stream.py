# Launches its kernel on a side stream and never joins it back: the work escapes the caller's stream.
import torch
import triton
import triton.language as tl

SIDE = []


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    if not SIDE:
        SIDE.append(torch.cuda.Stream())
    with torch.cuda.stream(SIDE[0]):
        _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
