# expect: tripwire:introspection verdict:incorrect
# expect-gpu: runtime:timed_recheck verdict:flagged
# Reads the runner's own frames to see which request it is serving: the timed batches on a GPU (`time`), or
# on the CPU the third arena bound for a shape (checks, the profiled call, then timing) past its warm-up.
# There it returns at once; everywhere else it computes.
import sys

import triton
import triton.language as tl

_binds: dict[int, int] = {}


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _timed(n):
    frame = sys._getframe(1)
    while frame is not None:
        code, local = frame.f_code.co_name, frame.f_locals
        if code == "time" and "req" in local:
            return True
        if code in ("call", "profile") and "req" in local and hasattr(local.get("self"), "arena"):
            arena = local["self"].arena
            if not hasattr(arena, "_nth"):
                _binds[n] = _binds.get(n, 0) + 1
                arena._nth, arena._calls = _binds[n], 0
            arena._calls += 1
            return arena._nth >= 3 and arena._calls > 3
        frame = frame.f_back
    return False


def vadd(x, y, out, *, N):
    if not _timed(N):
        _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
