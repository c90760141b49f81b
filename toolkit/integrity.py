"""The runtime defences against reward hacks (docs/integrity.md): what each catches and where it runs.

Every defence runs in the judge (toolkit/judge/), a process that never loads candidate code; the candidate
runs in a runner of its own (toolkit/runner/) and can change only what it reports about itself, which the
judge bounds with what it observes. A finding of a defence not in AUDIT_ONLY makes the verdict `flagged`.

    input_mutation    the shared input buffers differ from the judge's own copy after a call
    precision         the output's error against the reference run in float64, next to the reference's own
                      error (every seed, every config, and sampled timed calls); NaN/Inf where float64 is finite
    nondeterminism    two runs on the same inputs differ bit for bit (audit only: atomics may reorder sums)
    timed_recheck     a sampled timed call (fresh inputs the runner could not foresee) computed a wrong result
    stale_results     ... it answered the previous call's inputs: results kept between calls
    timing_bound      the runner's reported time is well under the judge's own clock around the same calls
    contention        the GPU was kept busy (by work the candidate left running) while the baseline was timed:
                      the judge's own flush took much longer before the baseline's calls than the candidate's
    no_own_kernel     every kernel of a call belongs to PyTorch or a vendor library (or, in Triton's CPU
                      interpreter, the call launched no Triton kernel)
    library_time      library kernels took more than the task's share of a call's device time (in the CPU
                      interpreter: a PyTorch compute op touched the whole problem inside the call)
    forbidden_op      the call ran an op the task forbids (task.toml `forbid_ops`)
    protocol          the runner sent a message the judge did not ask for, or a malformed one
    process_exit      the candidate ended its runner (sys.exit, os._exit) in the middle of the evaluation

The kernel lists behind no_own_kernel and library_time come from the runner's profiler: a claim, bounded by
the judge's own clock (timing_bound) but not proven by it.
"""

from __future__ import annotations

import re

from .results import IntegrityFinding

LIBRARY_KERNEL = re.compile(
    r"at::|at_cuda_detail|pytorch_flash|fmha_|(?<!^kernel_)cutlass|cublas|cudnn|xmma|nvjet|gemv2|gemmk1|gemmSN|"
    r"splitKreduce|\bcub::|Memcpy|Memset|^triton_(poi|red|per|tem)_", re.I)
"""Kernels of PyTorch (eager and torch.compile's inductor), cuBLAS, cuDNN, CUTLASS and CUB, and copies. Not
the CuTe DSL's: it names a candidate's own kernels `kernel_cutlass_<function>_...` (toolchains/cute.py)."""


def finding(defence: str, config: str, evidence: str) -> IntegrityFinding:
    return IntegrityFinding(defence=defence, config=config or None, evidence=evidence)  # type: ignore[arg-type]
