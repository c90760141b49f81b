"""Where the time of `crucible tool test` goes: process start, imports, CUDA init, the sandboxed worker,
the checks and the quick timing.   Run: python3 benchmarks/turnaround_breakdown.py [TASK]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    from crucible.toolkit.evaluation import EvalRequest, evaluate
    from crucible.toolkit.task import find_task
    from crucible.toolkit.workspace import materialize, take_snapshot

    task_id = sys.argv[1] if len(sys.argv) > 1 else "triton2triton/softmax"
    py = sys.executable
    f: dict[str, float] = {}
    f["python_start"] = wall([py, "-c", "pass"])
    f["import_torch"] = wall([py, "-c", "import torch"])
    f["import_torch_triton_cuda_init"] = wall([py, "-c", "import torch, triton; torch.zeros(1, device='cuda')"])
    if shutil.which("nvidia-smi"):
        f["nvidia_smi_query"] = wall(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    f["cli_import"] = wall([py, "-c", "import crucible.harness.cli"])
    with tempfile.TemporaryDirectory() as tmp:
        task = find_task(task_id)
        ws = Path(tmp) / "ws"
        materialize(task, ws)
        (ws / task.spec.candidate).write_bytes(task.file(task.spec.solution).read_bytes())
        snap = take_snapshot(task, ws)
        for timing in ("none", "quick"):
            for rep in range(2):
                t0 = time.perf_counter()
                marks: list[float] = []
                res = evaluate(task, snap, EvalRequest(timing=timing, backend="cuda"),
                               on_progress=lambda m, marks=marks, t0=t0: marks.append(time.perf_counter() - t0))
                f[f"evaluate_{timing}_{rep}"] = time.perf_counter() - t0
                f[f"evaluate_{timing}_{rep}_first_progress"] = marks[0] if marks else -1.0
                assert res.status == "ok", res.message
        t0 = time.perf_counter()
        res = evaluate(task, snap, EvalRequest(timing="quick", backend="cuda", seeds=1))
        f["evaluate_quick_1seed"] = time.perf_counter() - t0
        f["worker_isolation"] = str(res.isolation)  # type: ignore[assignment]
    from common import write

    write("turnaround_breakdown", f, f"python3 benchmarks/turnaround_breakdown.py {task_id}")
    for k, v in f.items():
        print(f"{k}: {v:.3f}s" if isinstance(v, float) else f"{k}: {v}")


if __name__ == "__main__":
    main()
