# Forgets to subtract the row max and normalizes by a sum over only the first block of columns.
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x)
    s = tl.sum(tl.where(offs < 64, e, 0.0), axis=0)
    tl.store(y_ptr + row * N + offs, (e / s).to(y_ptr.dtype.element_ty), mask=mask)


def entry(x, y):
    M, N = x.shape
    _softmax[(M,)](x, y, N, BLOCK=triton.next_power_of_2(N))
