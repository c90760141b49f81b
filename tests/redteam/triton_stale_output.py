# expect: verdict:incorrect
# Computes on the first call only, trusting the output buffer to still hold an answer afterwards.
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)



def vadd(x, y, out, *, N):
    _CALLS[0] += 1
    if _CALLS[0] == 1:
        _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
