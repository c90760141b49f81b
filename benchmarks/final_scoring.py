"""Final scoring of every expert solution, as the harness scores a session (visible and hidden configs,
careful timing, integrity `full`): the verdict must be `pass` with no runtime finding (no false alarm), and
the wall time less the build (cached in a real run: the session compiled the same source) is compared
with the figure measured before the judge/runner split (the `full_s` of results/integrity_cost_<backend>.json,
the same request in one in-process worker, its build cached).

Scored as a run scores: through final scoring's own judge pool (harness/scoring.py ScoringPools), which starts
the next judge and its runners while the current evaluation runs; `--cold` starts each from nothing.

Writes benchmarks/results/final_scoring_<backend>.json after every task, merging with what an earlier
call wrote (so a suite larger than one call's time limit is scored in several calls).

Run: python3 benchmarks/final_scoring.py [--tasks ID ...] [--cold]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, write  # noqa: E402

from crucible.harness.scoring import ScoringPools, score_session  # noqa: E402
from crucible.toolkit.evaluation import resolve_backend  # noqa: E402
from crucible.toolkit.task import Task, discover_tasks  # noqa: E402
from crucible.toolkit.worker import Backend  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="*", help="task ids (default: every task with an expert solution)")
    p.add_argument("--cold", action="store_true", help="no judge started ahead: each evaluation starts its own")
    args = p.parse_args()
    backend = resolve_backend("auto")
    out = RESULTS / f"final_scoring_{backend}.json"
    rows = json.loads(out.read_text())["figures"]["tasks"] if out.exists() else {}
    before_file = RESULTS / f"integrity_cost_{backend}.json"
    before = json.loads(before_file.read_text())["figures"]["tasks"] if before_file.exists() else {}
    tasks = [t for t in discover_tasks()[0] if t.spec.solution and (not args.tasks or t.id in args.tasks)]
    pools, figures = ScoringPools(), {}
    try:
        for task in tasks:
            figures = _score(task, backend, None if args.cold else pools, rows, before)
            write(f"final_scoring_{backend}", figures, "python3 " + " ".join(sys.argv))
    finally:
        pools.close()
    if figures:
        print(f"{figures['passed_unflagged']}/{figures['scored']} pass unflagged; {figures['seconds_now']} s "
              f"against {figures['seconds_before']} s before (x{figures['ratio']})")


def _score(task: Task, backend: Backend, pools: ScoringPools | None, rows: dict, before: dict) -> dict:
    """Score `task`'s expert, add its row to `rows`, return the figures so far."""
    gpu = 0 if pools is not None and backend != "cpu" else None
    with tempfile.TemporaryDirectory(prefix="crucible-final-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        (sub / task.spec.candidate).write_bytes(task.file(task.spec.solution).read_bytes())  # type: ignore[arg-type]
        t0 = time.perf_counter()
        score, ev = score_session(task, sub, backend, pool=pools.get(backend, gpu) if pools else None, gpu=gpu)
        wall = time.perf_counter() - t0
    runtime_flags = [f for f in score.flags if f.startswith("runtime:")]
    build_s = ev.phases.get("build_s", 0.0) if ev else 0.0
    rows[task.id] = {"verdict": score.verdict, "seconds": round(wall - build_s, 2), "build_s": round(build_s, 2),
                     "before_s": before.get(task.id, {}).get("full_s"), "speedup": score.speedup,
                     "runtime_flags": runtime_flags, "flags": score.flags, "message": score.message[:300],
                     "phases": ev.phases if ev else {}, "judge_started_ahead": pools is not None}
    print(f"{task.id}: {score.verdict} in {wall - build_s:.1f} s + build {build_s:.1f} s (before "
          f"{rows[task.id]['before_s']}); speedup {score.speedup}; runtime flags {runtime_flags}", flush=True)
    compared = [r for r in rows.values() if r["before_s"]]
    now_s, then_s = sum(r["seconds"] for r in compared), sum(r["before_s"] for r in compared)
    return {"backend": backend, "tasks": rows,
            "passed_unflagged": sum(r["verdict"] == "pass" and not r["runtime_flags"] for r in rows.values()),
            "scored": len(rows), "seconds_now": round(now_s, 1), "seconds_before": round(then_s, 1),
            "ratio": round(now_s / then_s, 3) if then_s else None, "goal_ratio": 1.2}


if __name__ == "__main__":
    main()
