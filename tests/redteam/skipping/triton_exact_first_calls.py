# expect: runtime:precision verdict:flagged
# task: triton2triton/vadd_loose
# Exact for the first calls of each shape (the correctness checks, the profiled call, the warm-up), then
# rounds its inputs to fp16 for the rest: under the task's loose tolerance, so only float64 can tell.
import triton
import triton.language as tl

EXACT_CALLS = 8
_calls: dict[tuple, int] = {}


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, LOW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if LOW:
        x = x.to(tl.float16).to(tl.float32)
        y = y.to(tl.float16).to(tl.float32)
    tl.store(out_ptr + offs, (2 * x + y).to(out_ptr.dtype.element_ty), mask=mask)


def vadd(x, y, out, *, N):
    key = (N, x.dtype)
    _calls[key] = _calls.get(key, 0) + 1
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, LOW=_calls[key] > EXACT_CALLS, BLOCK=1024)
