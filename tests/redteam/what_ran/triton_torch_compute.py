# expect: tripwire:library_call runtime:no_own_kernel verdict:flagged
# No kernel of its own: PyTorch computes the answer.
import torch


def vadd(x, y, out, *, N):
    torch.add(y, x, alpha=2, out=out)
