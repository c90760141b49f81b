# expect: tripwire:monkeypatch verdict:defeated
# expect-gpu: runtime:protocol verdict:flagged
# Answers the judge's timed batches at once with small, plausible times and queues nothing: the runner's
# `time` is replaced in its own module. On a GPU the judge's stream then waits for a `done` word no one will
# write; a judge that synchronizes on it hangs until the evaluation's time limit (then nothing is scored but
# a timeout), and one that does not wait at all would take the claims. On the CPU timed calls are requests
# the runner answers one by one, which this does not touch: the kernel there is honest.
import sys

import triton
import triton.language as tl

_runner = sys.modules["__main__"]


def _time(self, req):
    self.send(_runner.Timed(first_seq=req.first_seq, us=[1.0] * (req.count * getattr(req, "per_go", 1))))


if hasattr(_runner, "Runner"):
    _runner.Runner.time = _time


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
