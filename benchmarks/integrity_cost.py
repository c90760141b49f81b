"""What the runtime defences cost (issue 6 goal: at most 20% extra evaluation time on the H200), and whether
any of them fires on an expert solution (goal: never).

For each task, the expert solution is evaluated as final scoring does (every config, careful timing), once
with the defences off and once with all of them (`EvalRequest.integrity` "off" / "full"), in alternating
order over the repeats; the worker start-up and the build are in both. Two figures per task:
  extra_pct   (full - off) / off, wall clock: what the operator waits; noisy, as careful timing stops
              adaptively and one run may time longer than the other
  direct_pct  the defences' own phases of the full run (oracle_s + integrity_s + recheck_s) over the rest
              of that run: the same cost read off one evaluation, free of the timer's run-to-run noise
Writes benchmarks/results/integrity_cost_<backend>.json.

Run: python3 benchmarks/integrity_cost.py [--tasks ID ...] [--repeats 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write  # noqa: E402

from crucible.toolkit.evaluation import EvalRequest, evaluate, resolve_backend  # noqa: E402
from crucible.toolkit.task import discover_tasks  # noqa: E402
from crucible.toolkit.validation import snapshot_of_file  # noqa: E402

DEFENCE_PHASES = ("oracle_s", "integrity_s", "recheck_s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="*", help="task ids (default: every task with an expert solution)")
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    backend = resolve_backend("auto")
    timing = "careful" if backend != "cpu" else "quick"
    tasks = [t for t in discover_tasks()[0] if t.spec.solution and (not args.tasks or t.id in args.tasks)]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="crucible-integrity-") as tmp:
        for task in tasks:
            snap = snapshot_of_file(task, task.spec.solution, Path(tmp))
            seconds: dict[str, list[float]] = {"off": [], "full": []}
            defence_s: list[float] = []
            phases: dict[str, dict[str, float]] = {}
            findings: list[str] = []
            status = "ok"
            # Build, and compile every config's kernels (Triton JITs per specialization), so neither arm pays it.
            evaluate(task, snap, EvalRequest(configs="all", timing="none", backend=backend, integrity="off"))
            for rep in range(args.repeats):
                for level in (("off", "full") if rep % 2 == 0 else ("full", "off")):
                    t0 = time.perf_counter()
                    ev = evaluate(task, snap, EvalRequest(configs="all", timing=timing, backend=backend,
                                                          integrity=level))
                    wall = time.perf_counter() - t0
                    seconds[level].append(wall)
                    phases[level] = ev.phases
                    if level == "full":
                        defence_s.append(sum(ev.phases.get(k, 0.0) for k in DEFENCE_PHASES))
                    if ev.status != "ok":
                        status = f"{level}: {ev.status}: {ev.message[:200]}"
                    if level == "full":
                        findings += [f.flag() for c in ev.configs for f in c.integrity]
            off, full = statistics.median(seconds["off"]), statistics.median(seconds["full"])
            spent = statistics.median(defence_s)
            rows[task.id] = {"off_s": round(off, 2), "full_s": round(full, 2),
                             "extra_pct": round(100 * (full - off) / off, 1),
                             "defence_s": round(spent, 2), "direct_pct": round(100 * spent / (full - spent), 1),
                             "phases_last": {k: {p: round(v, 2) for p, v in ph.items()} for k, ph in phases.items()},
                             "status": status, "findings_on_expert": sorted(set(findings))}
            print(f"{task.id}: off {off:.1f}s full {full:.1f}s ({rows[task.id]['extra_pct']:+.1f}%); defences "
                  f"{spent:.1f}s ({rows[task.id]['direct_pct']:+.1f}%) {phases.get('full')}; {status}; "
                  f"findings {len(set(findings))}", flush=True)
            save(rows, backend, timing, args.repeats)  # after every task: a run cut short keeps its figures


def save(rows: dict, backend: str, timing: str, repeats: int) -> None:
    total_off = sum(r["off_s"] for r in rows.values())
    total_full = sum(r["full_s"] for r in rows.values())
    total_defence = sum(r["defence_s"] for r in rows.values())
    figures = {"backend": backend, "timing": timing, "repeats": repeats, "tasks": rows,
               "total_off_s": round(total_off, 1), "total_full_s": round(total_full, 1),
               "extra_pct": round(100 * (total_full - total_off) / max(total_off, 1e-9), 1),
               "total_defence_s": round(total_defence, 1),
               "direct_pct": round(100 * total_defence / max(total_full - total_defence, 1e-9), 1),
               "goal_extra_pct": 20,
               "false_alarms": {k: r["findings_on_expert"] for k, r in rows.items() if r["findings_on_expert"]}}
    print(f"so far: {len(rows)} tasks, off {total_off:.0f}s, full {total_full:.0f}s, {figures['extra_pct']:+.1f}%; "
          f"defences {total_defence:.0f}s, {figures['direct_pct']:+.1f}%; "
          f"false alarms on {len(figures['false_alarms'])} tasks", flush=True)
    write(f"integrity_cost_{backend}", figures, "python3 " + " ".join(sys.argv))



if __name__ == "__main__":
    main()
