"""Turnaround of `crucible tool test` for a Triton candidate whose build is cached, and the expert
solutions' speedups over their baselines (`crucible tool bench`), for every task of the suite.

Run: python3 benchmarks/tool_turnaround.py [--tasks ID ...]   (default: every task)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "crucible.harness.cli"]


def tool(args: list[str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run(CLI + args + ["--json"], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    try:
        return seconds, json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"crucible {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None


def workspace(task_id: str, plan: str, root: Path) -> Path:
    from crucible.toolkit.task import find_task

    task = find_task(task_id)
    ws = root / f"{task_id.replace('/', '_')}_{plan}"
    subprocess.run(CLI + ["workspace", task_id, str(ws)], check=True, capture_output=True)
    source = task.spec.solution if plan == "solution" else (task.spec.baseline or task.spec.stub)
    (ws / task.spec.candidate).write_bytes(task.file(source).read_bytes())
    return ws


def main() -> None:
    from crucible.toolkit.task import discover_tasks

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="*", help="task ids (default: every task)")
    args = p.parse_args()
    tasks = [t for t in discover_tasks()[0] if not args.tasks or t.id in args.tasks]
    figures: dict = {"turnaround": {}, "speedups": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for task in tasks:
            ws = workspace(task.id, "solution", root)
            args = ["tool", "test", "--task", task.id, "--workspace", str(ws)]
            cold, _ = tool(args)
            warm = [tool(args)[0] for _ in range(3)]
            figures["turnaround"][task.id] = {"cold_s": cold, "cached_s": statistics.median(warm),
                                              "language": task.spec.language}
            seconds, bench = tool(["tool", "bench", "--task", task.id, "--workspace", str(ws)])
            figures["speedups"][task.id] = {
                "status": bench["status"], "speedup": bench["speedup"], "against": bench["speedup_against"],
                "speedup_vs_compiled": bench["speedup_vs_compiled"], "bench_seconds": seconds,
                "configs": {c["config"]: {"status": c["status"], "candidate_us": (c["candidate"] or {}).get("median_us"),
                                          "baseline_us": (c["baseline"] or {}).get("median_us"),
                                          "compiled_us": (c["compiled"] or {}).get("median_us"),
                                          "speedup": c["speedup"], "peak_fraction": c["peak_fraction"]}
                            for c in bench["configs"]}}
            print(f"{task.id}: test cold {cold:.2f}s cached {statistics.median(warm):.2f}s; bench "
                  f"{bench['status']} speedup {bench['speedup']} vs {bench['speedup_against']}")
    from common import write

    write("tool_turnaround", figures, "python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
