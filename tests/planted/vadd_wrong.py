# Off by one: the last element of every block is never written.
import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n) & (offs % BLOCK != BLOCK - 1)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 256),)](x, y, out, N, BLOCK=256)
