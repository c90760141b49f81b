# expect: tripwire:side_stream verdict:incorrect
# expect-gpu: runtime:timed_recheck verdict:flagged
# Launches on a stream of its own and returns: the runner's stream, which the judge's handshake waits on,
# has nothing to wait for, so the call "ends" before its kernel runs. (The CPU build of torch has no
# streams: there the cheat fails to start, which is all a CPU run can show.)
import torch
import triton
import triton.language as tl

_SIDE = []


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    if not _SIDE:
        _SIDE.append(torch.cuda.Stream())
    with torch.cuda.stream(_SIDE[0]):
        _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
