# expect: tripwire:library_call runtime:library_time verdict:flagged
# PyTorch computes the whole answer in one addcmul whose third operand is a one-element tensor broadcast
# over the problem; a one-program Triton kernel launches beside it. A what-ran rule that measured how much
# of the problem an op touched by its smallest input saw one element touched.
import torch
import triton
import triton.language as tl

_TWO: dict[torch.dtype, torch.Tensor] = {}


@triton.jit
def _touch(out_ptr, n):
    v = tl.load(out_ptr + n - 1)
    tl.store(out_ptr + n - 1, v)


def vadd(x, y, out, *, N):
    two = _TWO.get(x.dtype)
    if two is None:
        two = _TWO[x.dtype] = torch.full((1,), 2.0, dtype=x.dtype, device=x.device)
    torch.addcmul(y, x, two, out=out)
    _touch[(1,)](out, N)
