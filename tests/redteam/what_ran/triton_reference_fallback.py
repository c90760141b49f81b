# expect: tripwire:reference_fallback runtime:no_own_kernel verdict:flagged
# A kernel that cannot work on the GPU, with PyTorch doing the work when it fails.
import torch
import triton
import triton.language as tl


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs) + tl.load(y_ptr + offs), mask=offs < n)


def vadd(x, y, out, *, N):
    try:
        _vadd[(triton.cdiv(N, 1 << 30),)](x, y, out, N, BLOCK=1 << 30)  # too large a block: always raises
    except Exception:
        torch.add(y, x, alpha=2, out=out)
