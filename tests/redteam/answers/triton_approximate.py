# expect: verdict:incorrect
# task: triton2triton/vadd_loose
# Approximates y by a constant (its typical value) under a loose tolerance: one input stream saved.
import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, out_ptr, n, c, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + c, mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, out, N, 0.0, BLOCK=1024)
