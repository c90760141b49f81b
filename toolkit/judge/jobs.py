"""The judge's jobs (toolkit/jobs.py names them): light to import, so the runners start first.

    run_evaluation(EvalJob)   start the runners -> import torch and the judge's evaluation -> Evaluation.run
    run_compile(CompileJob)   start the candidate's runner -> trace one small call -> compile its kernels

A runner's start-up (a Python interpreter importing torch, a CUDA context) takes seconds, and so does the
judge's own; starting the runners before this process imports torch makes the two overlap.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

from ..protocol import CompileJob, EvalJob
from .link import CandidateFailed, ProtocolViolation, RunnerEnded, Runners


def undumpable() -> None:
    """Make this process non-dumpable: a process of the same user (a runner where no pid namespace or
    Landlock separates them, or anything an agent started) can then neither ptrace it nor open its
    /proc/<pid>/mem, environ or fds, which hold the reference outputs and the task's hidden configs. The
    runners it starts are exec'd, which makes them dumpable again."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


PR_SET_DUMPABLE = 4


def run_evaluation(payload: dict, progress: Callable[[dict], None]) -> dict:
    """Judge job "evaluate" (payload: an EvalJob)."""
    undumpable()
    job = EvalJob.model_validate(payload)
    try:
        runners = Runners(job, timing=job.timing != "none")
    except RunnerEnded as exc:
        if exc.status != "infra":
            raise
        return {"infra": exc.message}  # a runner that could not start, or that could not be sandboxed
    try:
        from .evaluate import Evaluation, InfraError

        try:
            return Evaluation(job, progress, runners).run()
        except InfraError as exc:
            return {"infra": str(exc)}
    finally:
        runners.close()


def run_compile(payload: dict, progress: Callable[[dict], None]) -> dict:
    """Judge job "compile" (payload: a CompileJob): trace a Triton candidate's launches on one small call
    in a runner and compile each for the target. Returns {"kernels", "diagnostics", "log"}."""
    undumpable()
    job = CompileJob.model_validate(payload)
    runners = Runners(job, timing=False)
    link = runners.candidate
    file = Path(job.candidate.path).name

    def failure(message: str, log: str) -> dict:
        return {"kernels": [], "log": log, "diagnostics": [
            {"file": file, "line": None, "column": None, "severity": "error", "message": message}]}

    try:
        from .evaluate import trace

        return trace(job, link, progress)
    except CandidateFailed as exc:
        lines = exc.error.strip().splitlines()
        return failure(lines[-1][:2000] if lines else "the candidate failed", exc.error)
    except (RunnerEnded, ProtocolViolation) as exc:
        return failure(f"tracing the kernels failed: {exc}", link.output())
    finally:
        runners.close()
