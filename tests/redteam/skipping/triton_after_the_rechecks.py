# expect: verdict:incorrect
# The judge keeps a few timed calls' outputs to check after the fact. Had it checked the first few kept calls
# only, a kernel could count its calls per shape (the checks, the profiled call, the warm-up batch, then one
# kept call per timed batch) and stop computing once the checks were spent: every later timed call leaves the
# poisoned outputs untouched and costs nothing, and the median of the timed calls is an empty call's. The
# count below is the one those phases would use; the calls that are checked must be drawn from the whole
# timing phase for this to fail (a call past the count is wrong when checked again too: incorrect).
import torch
import triton
import triton.language as tl

ON_GPU = torch.cuda.is_available()
# checks (2 seeds x 2 calls) + profiled calls + warm-up batch (3) + 8 timed batches (2 calls on the CPU, 8 on
# a GPU), with room to spare
HONEST_CALLS = (4 + 4 + 3 + 8 * 8 + 8) if ON_GPU else (4 + 2 + 3 + 8 * 2)
_calls: dict[int, int] = {}


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def vadd(x, y, out, *, N):
    _calls[N] = _calls.get(N, 0) + 1
    if _calls[N] > HONEST_CALLS:
        return  # nobody looks any more
    _vadd[(triton.cdiv(N, 1024),)](x, y, out, N, BLOCK=1024)
