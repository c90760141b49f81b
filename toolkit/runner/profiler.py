"""What one call launches, as the runner's own profiler sees it: a claim the judge weighs against its clock.

torch.autograd.profiler (Kineto) directly: torch.profiler's wrapper imports torch._inductor on its first
start, seconds in every fresh process (benchmarks/profiler_cost.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from ..protocol import KernelClaim, Profiled

GATHER_OPS = ("aten::index", "aten::embedding", "aten::gather", "aten::take")
"""Ops that touch as many elements as their index asks for, not as their table holds (index_select too)."""


@contextmanager
def count_interpreter_launches() -> Iterator[list[int]]:
    """In Triton's interpreter, count the kernel launches that ran to the end inside the block."""
    from triton.runtime import interpreter

    count = [0]
    original = interpreter.GridExecutor.__call__

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        count[0] += 1
        return result

    interpreter.GridExecutor.__call__ = counting  # type: ignore[method-assign]
    try:
        yield count
    finally:
        interpreter.GridExecutor.__call__ = original  # type: ignore[method-assign]


def profile_call(call: Callable[[], None], reps: int, on_gpu: bool) -> Profiled:
    from torch.autograd.profiler import profile

    counting = nullcontext([0]) if on_gpu else count_interpreter_launches()
    with profile(use_kineto=True, use_device="cuda" if on_gpu else None, record_shapes=not on_gpu) as prof, \
            counting as count:
        for _ in range(reps):
            call()
        if on_gpu:
            torch.cuda.synchronize()
    us: dict[str, float] = {}
    calls: dict[str, float] = {}
    elements: dict[str, int] = {}
    ops: set[str] = set()
    for e in prof.function_events:
        on_device = str(getattr(e, "device_type", "")).endswith("CUDA")
        if not on_device:
            ops.add(e.name[:200])
        if on_gpu != on_device:
            continue  # on a GPU the device's kernels, copies and memsets; on the CPU the host ops
        if not on_gpu:  # how much of the problem the op touched, summed over its calls: its largest tensor
            # input (a one-element operand broadcast over the whole problem touches the whole problem), but
            # a gather's index (8 rows of a big table touch 8)
            shapes = [s for s in (getattr(e, "input_shapes", None) or [])
                      if s and all(isinstance(d, int) for d in s)]  # a TensorList's is a list of shapes
            sizes = [math.prod(s) for s in shapes]
            pick = min if any(g in e.name for g in GATHER_OPS) else max
            elements[e.name] = elements.get(e.name, 0) + pick(sizes, default=0) // reps
        t = float(e.time_range.elapsed_us()) if on_device else float(e.self_cpu_time_total)
        us[e.name] = us.get(e.name, 0.0) + t / reps
        calls[e.name] = calls.get(e.name, 0.0) + 1 / reps
    kernels = sorted((KernelClaim(name=n[:200], us=us[n], calls=calls[n], elements=elements.get(n, 0))
                      for n in us), key=lambda k: -k.us)
    return Profiled(kernels=kernels[:200], interpreter_launches=None if on_gpu else count[0] / reps,
                    ops=sorted(ops)[:200])
