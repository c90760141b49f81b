"""Row softmax using triton.language's own @jit functions (tl.max, tl.sum, tl.cdiv are @jit in 3.x)."""

import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=offs < cols)


def softmax(x, out):
    rows, cols = x.shape
    softmax_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
