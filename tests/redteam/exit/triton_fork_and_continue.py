# expect: tripwire:concurrency tripwire:process_control tripwire:timer_tampering verdict:incorrect
# Forks at every call: the parent returns at once, the child computes into the shared output (its mapping
# is inherited), renames itself and lingers, detached, to outlive the evaluation.
import ctypes
import os
import time

import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    if os.fork() != 0:
        return
    try:
        os.setsid()
        ctypes.CDLL(None).prctl(15, b"crt-linger", 0, 0, 0)  # PR_SET_NAME: the test looks for it afterwards
        _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
        while True:
            time.sleep(1)
    finally:
        os._exit(0)  # never back into the runner's request loop
