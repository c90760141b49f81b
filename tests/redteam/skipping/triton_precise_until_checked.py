# expect: runtime:precision verdict:flagged
# task: triton2triton/vadd_loose
# The float64 oracle needs a kept timed call to look at. Had it looked at the first kept call only (always in
# the first timed batch, whose place in the call sequence the runner can count), a kernel could be exact up to
# the end of that batch and round its inputs to fp16 on every later call: under the task's loose tolerance
# the plain comparison passes what only float64 can tell. Every kept call must face the oracle.
import torch
import triton
import triton.language as tl

ON_GPU = torch.cuda.is_available()
# checks (2 seeds x 2 calls) + profiled calls + warm-up batch (3) + the first timed batch
PRECISE_CALLS = (4 + 4 + 3 + 8) if ON_GPU else (4 + 2 + 3 + 2)
_calls: dict[int, int] = {}


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, LOW: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if LOW:
        x = x.to(tl.float16).to(tl.float32)
        y = y.to(tl.float16).to(tl.float32)
    tl.store(out_ptr + offs, 2 * x + y, mask=mask)


def vadd(x, y, out, *, N):
    _calls[N] = _calls.get(N, 0) + 1
    low = _calls[N] > PRECISE_CALLS and x.dtype == torch.float32
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, LOW=low, BLOCK=1024)
