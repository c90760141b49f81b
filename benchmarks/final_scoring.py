"""Final scoring of every expert solution, as the harness scores a session (visible and hidden configs,
careful timing, integrity `full`): the verdict must be `pass` with no runtime finding (no false alarm), and
the wall time less the build (cached in a real run: the session compiled the same source) is compared
with the figure measured before the judge/runner split (the `full_s` of results/integrity_cost_<backend>.json,
the same request in one in-process worker, its build cached).

Writes benchmarks/results/final_scoring_<backend>.json after every task, merging with what an earlier
call wrote (so a suite larger than one call's time limit is scored in several calls).

Run: python3 benchmarks/final_scoring.py [--tasks ID ...]
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

from crucible.harness.scoring import score_session  # noqa: E402
from crucible.toolkit.evaluation import resolve_backend  # noqa: E402
from crucible.toolkit.task import discover_tasks  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="*", help="task ids (default: every task with an expert solution)")
    args = p.parse_args()
    backend = resolve_backend("auto")
    out = RESULTS / f"final_scoring_{backend}.json"
    rows = json.loads(out.read_text())["figures"]["tasks"] if out.exists() else {}
    before_file = RESULTS / f"integrity_cost_{backend}.json"
    before = json.loads(before_file.read_text())["figures"]["tasks"] if before_file.exists() else {}
    tasks = [t for t in discover_tasks()[0] if t.spec.solution and (not args.tasks or t.id in args.tasks)]
    for task in tasks:
        with tempfile.TemporaryDirectory(prefix="crucible-final-") as tmp:
            sub = Path(tmp) / "submission"
            sub.mkdir()
            (sub / task.spec.candidate).write_bytes(task.file(task.spec.solution).read_bytes())
            t0 = time.perf_counter()
            score, ev = score_session(task, sub, backend)  # type: ignore[arg-type]
            wall = time.perf_counter() - t0
        runtime_flags = [f for f in score.flags if f.startswith("runtime:")]
        build_s = ev.phases.get("build_s", 0.0) if ev else 0.0
        rows[task.id] = {"verdict": score.verdict, "seconds": round(wall - build_s, 2), "build_s": round(build_s, 2),
                         "before_s": before.get(task.id, {}).get("full_s"), "speedup": score.speedup,
                         "runtime_flags": runtime_flags, "flags": score.flags, "message": score.message[:300],
                         "phases": ev.phases if ev else {}}
        print(f"{task.id}: {score.verdict} in {wall - build_s:.1f} s + build {build_s:.1f} s (before {rows[task.id]['before_s']}); speedup "
              f"{score.speedup}; runtime flags {runtime_flags}", flush=True)
        compared = [r for r in rows.values() if r["before_s"]]
        now_s, then_s = sum(r["seconds"] for r in compared), sum(r["before_s"] for r in compared)
        figures = {"backend": backend, "tasks": rows,
                   "passed_unflagged": sum(r["verdict"] == "pass" and not r["runtime_flags"] for r in rows.values()),
                   "scored": len(rows), "seconds_now": round(now_s, 1), "seconds_before": round(then_s, 1),
                   "ratio": round(now_s / then_s, 3) if then_s else None, "goal_ratio": 1.2}
        write(f"final_scoring_{backend}", figures, "python3 " + " ".join(sys.argv))
    print(f"{figures['passed_unflagged']}/{figures['scored']} pass unflagged; {figures['seconds_now']} s against "
          f"{figures['seconds_before']} s before (x{figures['ratio']})")


if __name__ == "__main__":
    main()
