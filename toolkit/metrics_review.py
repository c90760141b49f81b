"""The review of a task's `[metrics]` against what its reference really moves and computes.

A speed-of-light time (bytes over bandwidth, flops over the dtype's peak) is only as honest as the
task's formulas: bytes counted twice make every kernel look closer to the limit. So each formula is
compared, on the configs small enough to run on the CPU, with the reference itself:

    flops   at most what torch's flop counter counts, wherever it counts anything (matmuls,
            convolutions, attention), and within 2% of it unless `flops_note` says why less is needed
            (causal attention skips the masked half the reference computes); elementwise work the
            counter does not see is left to the formula
    bytes   at least the outputs, at most every input read once plus every output written once; below
            that only with `bytes_note` saying why (a gather reads only the rows it is asked for)
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel
from torch.utils.flop_counter import FlopCounterMode

from .judge.cases import DTYPES, params_of, raw_inputs
from .judge.evaluate import import_reference, reference_outputs
from .task import Config, Task, output_shape, resolve_dtype, task_metrics

FLOPS_TOLERANCE = 0.02
BYTES_SLACK = 0.01
"""Rounding in a formula (an index or two counted as 8 bytes rather than 4) is not a finding."""
REVIEW_BYTES = 16 * 2**20
REVIEW_FLOPS = 2e9
"""Configs whose formulas move or compute more than these are not run on the CPU (the smallest one always is)."""


class MetricsReview(BaseModel):
    """One config: the formula's figures beside the reference's."""

    config: str
    flops: float
    counted_flops: float
    """From torch's flop counter: matmul-like operations only; 0 when it counts none."""
    bytes: float
    tensor_bytes: float
    """Every input once and every output once: the most a kernel must move."""
    output_bytes: float
    problems: list[str]


def _nbytes(tensors: list[torch.Tensor]) -> float:
    return float(sum(t.numel() * t.element_size() for t in tensors))


def review_config(task: Task, config: Config) -> MetricsReview:
    ref = import_reference(task)
    inputs = raw_inputs(task, ref, config, 0, torch.device("cpu"))
    with FlopCounterMode(display=False) as counter:
        outputs = reference_outputs(ref, inputs, params_of(task, config))
    flops, nbytes = task_metrics(task.spec, config)
    counted = float(counter.get_total_flops())
    # a drawn output's reference is its probabilities; the kernel writes only the draws
    output_bytes = sum(math.prod(output_shape(spec, config)) * DTYPES[resolve_dtype(spec.dtype, config)].itemsize
                       if spec.check == "sample" else _nbytes([out])
                       for spec, out in zip(task.spec.signature.outputs, outputs, strict=True))
    tensor_bytes = _nbytes(inputs) + output_bytes
    problems = []
    if counted and flops > counted * (1 + FLOPS_TOLERANCE):
        problems.append(f"flops: the formula gives {flops:.4g}, more than the reference's matmul-like "
                        f"operations ({counted:.4g}) and the rest: fix `[metrics] flops`")
    elif counted and flops < counted * (1 - FLOPS_TOLERANCE) and not task.spec.metrics.flops_note:
        problems.append(f"flops: the formula gives {flops:.4g}, less than the reference's matmul-like "
                        f"operations alone ({counted:.4g}); if a kernel really need not do them all, say "
                        "why in `[metrics] flops_note`")
    if nbytes > tensor_bytes * (1 + BYTES_SLACK):
        problems.append(f"bytes: the formula gives {nbytes:.4g}, more than every input and output once "
                        f"({tensor_bytes:.4g}): count each tensor once, the compulsory traffic")
    elif nbytes < output_bytes * (1 - BYTES_SLACK):
        problems.append(f"bytes: the formula gives {nbytes:.4g}, less than the outputs alone ({output_bytes:.4g})")
    elif nbytes < tensor_bytes * (1 - BYTES_SLACK) and not task.spec.metrics.bytes_note:
        problems.append(f"bytes: the formula gives {nbytes:.4g}, less than the tensors hold ({tensor_bytes:.4g}); "
                        "if a kernel really need not read all of them, say why in `[metrics] bytes_note`")
    return MetricsReview(config=config.name, flops=flops, counted_flops=counted, bytes=nbytes,
                         tensor_bytes=tensor_bytes, output_bytes=output_bytes, problems=problems)


def review_metrics(task: Task) -> list[MetricsReview]:
    """Every config small enough for the CPU (REVIEW_BYTES, REVIEW_FLOPS), and always the smallest."""
    sized = sorted(task.configs("all"), key=lambda c: task_metrics(task.spec, c)[::-1])

    def small(c: Config) -> bool:
        flops, nbytes = task_metrics(task.spec, c)
        return flops <= REVIEW_FLOPS and nbytes <= REVIEW_BYTES

    chosen = [c for c in sized if small(c)] or sized[:1]
    return [review_config(task, c) for c in chosen]
