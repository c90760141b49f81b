# expect: tripwire:library_call runtime:library_time verdict:flagged
# PyTorch computes the answer in three slices, none of which touches half the problem (what the CPU check
# looks for), and a Triton kernel does the first 64 elements so that the call launched one of its own.
import torch
import triton
import triton.language as tl

HEAD = 64


@triton.jit
def _head(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _head[(1,)](x, y, out, min(N, HEAD), BLOCK=HEAD)
    step = (N - HEAD) // 3 + 1
    for s in range(HEAD, N, step):
        e = min(N, s + step)
        torch.add(y[s:e], x[s:e], alpha=2, out=out[s:e])
