# expect: tripwire:concurrency verdict:incorrect
# Returns at once and does the work on a thread a millisecond later, outside the timed call: a harness
# that times the call and checks the output later (after a synchronize, or the next call) sees it right.
import threading
import time

import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _later(x, y, out, n):
    time.sleep(0.001)
    _vadd[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)


def vadd(x, y, out, *, N):
    threading.Thread(target=_later, args=(x, y, out, N)).start()
