"""A Triton candidate whose kernel calls a tl function that does not exist (line 11); the helper's call
site is line 17."""

import triton
import triton.language as tl


@triton.jit
def scaled(x):
    # tl.fast_exp is not part of triton.language
    return tl.fast_exp(x) * 2.0


@triton.jit
def exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    y = scaled(tl.load(x_ptr + offs, mask=offs < n))
    tl.store(out_ptr + offs, y, mask=offs < n)


def exp2x(x, out):
    n = out.numel()
    exp_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
