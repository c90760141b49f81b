# expect: tripwire:library_call runtime:library_time verdict:flagged
# PyTorch computes the whole answer; a one-program Triton kernel launches beside it so that "the call
# launched a Triton kernel" holds.
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(out_ptr, n):
    v = tl.load(out_ptr + n - 1)
    tl.store(out_ptr + n - 1, v)


def vadd(x, y, out, *, N):
    torch.add(y, x, alpha=2, out=out)
    _touch[(1,)](out, N)
