# expect: tripwire:introspection tripwire:library_call runtime:library_time verdict:flagged
# The kernel list behind no_own_kernel and library_time is the runner's own report: replace the runner's
# profiler with one that times the call and says a Triton kernel did it, and let PyTorch do the work.
import sys
import time

import torch
import triton
import triton.language as tl

from crucible.toolkit.protocol import KernelClaim, Profiled


@triton.jit
def _vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def _profile_call(call, reps, on_gpu):
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    us = (time.perf_counter() - t0) * 1e6 / reps
    name = "_vadd_0d1d2d3de" if on_gpu else "_vadd"
    return Profiled(kernels=[KernelClaim(name=name, us=us, calls=1)], interpreter_launches=None if on_gpu else 1.0,
                    ops=[])


import crucible.toolkit.runner.profiler as _profiler  # noqa: E402  (the runner imports it lazily, by name)

_profiler.profile_call = _profile_call
sys.modules["crucible.toolkit.runner.profiler"] = _profiler


def vadd(x, y, out, *, N):
    torch.add(y, x, alpha=2, out=out)
