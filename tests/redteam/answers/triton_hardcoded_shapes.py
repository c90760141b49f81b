# expect: verdict:incorrect
# Handles the visible shapes only: right where the agent could test, silent elsewhere.
import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)



def vadd(x, y, out, *, N):
    if N in (1000, 4099):
        _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
