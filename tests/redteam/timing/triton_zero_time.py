# expect: tripwire:monkeypatch runtime:timing_bound verdict:flagged
# Computes the right answer and reports a time of zero for every call, through the runner's own reply
# path (`send`, looked up on the runner's class): an infinite speedup, or a division by zero.
import sys

import triton
import triton.language as tl

_runner = sys.modules["__main__"].Runner
_send = _runner.send


def _send_zero(self, reply):
    if hasattr(reply, "us"):
        reply = reply.model_copy(update={"us": [0.0] * len(reply.us) if isinstance(reply.us, list) else 0.0})
    _send(self, reply)


_runner.send = _send_zero


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
