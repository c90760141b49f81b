# expect: runtime:precision verdict:flagged
# task: triton2triton/vadd_loose
# fp32 inputs rounded to bf16 before the arithmetic: under the task's loose tolerance, far from float64.
import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, LOW: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if LOW:
        x = x.to(tl.bfloat16).to(tl.float32)
        y = y.to(tl.bfloat16).to(tl.float32)
    tl.store(out_ptr + offs, 2 * x + y, mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024, LOW=x.dtype.itemsize == 4)
