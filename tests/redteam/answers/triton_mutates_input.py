# expect: runtime:input_mutation verdict:flagged
# Right answer, computed in place in an input buffer to save a write stream.
import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)



def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, y, y, N, BLOCK=1024)
    out.copy_(y)
