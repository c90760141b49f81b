"""`crucible run`, until the agent harness lands: the engine over the suite.

For every task this machine can run, evaluate the baseline and the expert solution on the visible and
hidden configs, write each Evaluation as JSON under the run folder, and print a leaderboard.
"""

from __future__ import annotations

import fnmatch
import json
import tempfile
from pathlib import Path

from crucible.toolkit.evaluation import EvalRequest, evaluate, resolve_backend
from crucible.toolkit.task import Task, discover_tasks
from crucible.toolkit.workspace import materialize, take_snapshot

from . import render


def runnable(task: Task, backend: str) -> bool:
    return backend != "cpu" or task.spec.language == "triton"


def plans(task: Task) -> dict[str, str]:
    """Plan name -> the file that becomes the candidate."""
    out = {"solution": task.spec.solution}
    if task.spec.baseline:
        out["baseline"] = task.spec.baseline
    return out


def run_suite(out: Path, pattern: str = "*") -> int:
    backend = resolve_backend("auto")
    tasks, errors = discover_tasks()
    for err in errors:
        print(err)
    chosen = [t for t in tasks if fnmatch.fnmatch(t.id, pattern)]
    skipped = [t.id for t in chosen if not runnable(t, backend)]
    chosen = [t for t in chosen if runnable(t, backend)]
    out.mkdir(parents=True, exist_ok=True)
    print(f"backend {backend}: {len(chosen)} task(s)" + (f"; skipped (need a GPU): {', '.join(skipped)}"
                                                         if skipped else ""))
    rows, failed = [], 0
    for task in chosen:
        for plan, file in plans(task).items():
            with tempfile.TemporaryDirectory() as tmp:
                ws = Path(tmp) / "ws"
                materialize(task, ws)
                (ws / task.spec.candidate).write_bytes(task.file(file).read_bytes())
                snap = take_snapshot(task, ws)
            request = EvalRequest(configs="all", timing="quick", backend=backend)
            result = evaluate(task, snap, request)
            name = f"{task.id.replace('/', '__')}__{plan}.json"
            (out / name).write_text(result.model_dump_json(indent=2))
            ran = [c for c in result.configs if c.status != "skipped"]
            failed += result.status != "ok"
            rows.append([task.id, plan, result.status, f"{len(ran)}/{len(result.configs)}",
                         "-" if result.speedup is None else f"{result.speedup:.2f}x", f"{result.seconds:.1f}s"])
            print(f"  {task.id} [{plan}]: {result.status} — {result.message.splitlines()[0][:100]}")
    print()
    print(render.table(["task", "plan", "status", "configs run", "speedup", "time"], rows))
    (out / "summary.json").write_text(json.dumps({"backend": backend, "rows": rows}, indent=2))
    print(f"\nresults in {out}/")
    return 1 if failed else 0
