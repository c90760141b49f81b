"""Where the integrity pass's time goes: what torch.profiler costs in a fresh process (the worker is one), and
a cProfile of one whole evaluation run in this process.

Part 1, in fresh subprocesses: the first and the second profiler session (entering, the calls, leaving,
reading its events), with and without the CUDA activity (CUPTI), for a few small kernel calls; through the
torch.profiler wrapper (whose first start imports torch._inductor) and through torch.autograd.profiler
directly, as integrity.profile_calls does.
Part 2: `evaluate` of one task's expert solution with every defence on, its worker job run in this process
under cProfile; prints the phases and the functions with the most cumulative time.
Writes benchmarks/results/profiler_cost_<backend>.json.

Run: python3 benchmarks/profiler_cost.py [--task cuda2cuda/rmsnorm] [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
if not Path("/dev/nvidiactl").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # as the worker runs Triton on a CPU; read at import

from common import write  # noqa: E402

from crucible.toolkit import evaluation  # noqa: E402
from crucible.toolkit.judge.evaluate import run_evaluation  # noqa: E402
from crucible.toolkit.task import discover_tasks  # noqa: E402
from crucible.toolkit.validation import snapshot_of_file  # noqa: E402
from crucible.toolkit.worker import WorkerOutcome  # noqa: E402

SESSIONS = r"""
import json, sys, time, torch
from torch.profiler import ProfilerActivity, profile
from torch.autograd.profiler import profile as direct
cuda = torch.cuda.is_available() and sys.argv[1] == "cuda"
dev = "cuda" if torch.cuda.is_available() else "cpu"
out = {}
t = time.perf_counter()
x = torch.randn(1 << 20, device=dev)
if dev == "cuda":
    torch.cuda.synchronize()
out["first_kernel_s"] = time.perf_counter() - t
acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
for n in (1, 2):
    t0 = time.perf_counter()
    p = profile(activities=acts) if sys.argv[2] == "wrapper" else direct(use_kineto=True, use_device=dev if cuda else None)
    p.__enter__()
    t1 = time.perf_counter()
    for _ in range(24):
        (x * 2).sum()
    if dev == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    p.__exit__(None, None, None)
    t3 = time.perf_counter()
    events = p.events() if sys.argv[2] == "wrapper" else p.function_events
    t4 = time.perf_counter()
    out[f"session{n}"] = {"enter_s": t1 - t0, "calls_s": t2 - t1, "exit_s": t3 - t2, "events_s": t4 - t3,
                          "events": len(events)}
print(json.dumps(out))
"""


def sessions(activity: str, api: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SESSIONS, activity, api], capture_output=True, text=True, timeout=300
    )
    if done.returncode:
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def profiled_evaluation(task_id: str, top: int) -> dict:
    task = next(t for t in discover_tasks()[0] if t.id == task_id)
    backend = evaluation.resolve_backend("auto")
    stats = cProfile.Profile()

    def in_process(task, kind, payload, backend, request, on_progress, cancel, pool=None):  # noqa: ANN001
        stats.enable()
        try:
            result = run_evaluation(payload, lambda _p: None)
        finally:
            stats.disable()
        return WorkerOutcome(
            status="ok",
            result=result,
            message="",
            exit_code=0,
            signal=None,
            stderr_tail="",
            seconds=0.0,
            isolation={},
        )

    evaluation._run = in_process  # type: ignore[assignment]
    os.environ.update(evaluation._worker_env())  # what the worker would see
    with tempfile.TemporaryDirectory(prefix="crucible-profcost-") as tmp:
        snap = snapshot_of_file(task, task.spec.solution, Path(tmp))
        timing = "careful" if backend != "cpu" else "quick"
        ev = evaluation.evaluate(
            task,
            snap,
            evaluation.EvalRequest(configs="all", timing=timing, backend=backend, integrity="full"),
        )
    text = io.StringIO()
    pstats.Stats(stats, stream=text).sort_stats("cumulative").print_stats(top)
    print(text.getvalue())
    return {"status": ev.status, "message": ev.message[:500], "phases": ev.phases, "configs": len(ev.configs)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="cuda2cuda/rmsnorm")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    backend = evaluation.resolve_backend("auto")
    figures = {
        f"sessions_{act}_{api}": sessions(act, api)
        for act in ("cpu", "cuda")[: 2 if backend == "cuda" else 1]
        for api in ("wrapper", "direct")
    }
    print(json.dumps(figures, indent=1), flush=True)
    figures["evaluation"] = profiled_evaluation(args.task, args.top)
    print(json.dumps(figures["evaluation"], indent=1))
    write(f"profiler_cost_{backend}", figures, "python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
