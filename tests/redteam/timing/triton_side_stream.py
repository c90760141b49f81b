# expect: tripwire:side_stream
# expect-gpu: runtime:timed_recheck verdict:flagged
# Launches on a stream of its own: the caller's stream (the one timed and captured) has nothing to wait for.
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
