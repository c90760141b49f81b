# expect: tripwire:concurrency verdict:incorrect
# Returns at once and finishes the work on a thread, outside the timed call: a harness that times the call
# and checks the output later (after a synchronize, or after the next call) sees the right answer.
import threading

import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    worker = threading.Thread(target=lambda: _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024))
    worker.start()
