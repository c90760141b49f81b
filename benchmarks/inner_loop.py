"""The agent's inner loop through the MCP server over stdio, as an agent sees it: `compile` and `run_tests`
on a task's expert solution, called back to back, with where each call's seconds go.

    compile   first call (nothing cached), then the unchanged workspace (goal on the CPU: <= 0.3 s)
    run_tests first call (after that compile), then the unchanged workspace (p50; goals: no slower than
              1.7 s on the CPU, <= 1.5 s on the H200, first call <= 4 s there)
    edit      then compile, then run_tests, three times: a new snapshot each time

Each run_tests row keeps the evaluation's phases (`Evaluation.phases`: build_s in the server, worker_s the
judge's whole job as the server saw it, then the judge's own: load_s, check_s, oracle_s, timing_s, ...).

Run: python3 benchmarks/inner_loop.py [--task triton2triton/softmax] [--repeats 7] [--gap S] [--spares N]
  --gap S      seconds between calls (an agent reading the result); 0, the default, is back to back
  --spares N   the served pool's number of judges started ahead (default: the server's own), to compare
Writes benchmarks/results/inner_loop_<backend>[_<label>].json (a fresh, empty crucible cache for the run).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from crucible.toolkit.evaluation import resolve_backend  # noqa: E402
from crucible.toolkit.task import find_task  # noqa: E402
from crucible.toolkit.workspace import materialize  # noqa: E402

SERVE_WITH_SPARES = """
import sys
import crucible.toolkit.evaluation as evaluation
from crucible.toolkit.worker import WorkerPool

class Pool(WorkerPool):
    def __init__(self, **kw):
        super().__init__(**{**kw, "spares": SPARES})

evaluation.WorkerPool = Pool
from crucible.harness.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""The server with another pool size: a patch in the served process only (`--spares`)."""


async def timed(client: Client, tool: str, arguments: dict[str, Any], gap_s: float) -> tuple[float, dict[str, Any]]:
    await anyio.sleep(gap_s)  # the agent reading the previous result
    t0 = time.perf_counter()
    result = await client.call_tool(tool, arguments)
    seconds = time.perf_counter() - t0
    assert not result.is_error, result.content
    return seconds, result.structured_content or {}


def phases_median(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r})
    return {k: round(statistics.median(r.get(k, 0.0) for r in rows), 4) for k in keys}


async def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    task = find_task(args.task)
    ws = root / "ws"
    materialize(task, ws)
    assert task.spec.solution is not None
    kernel = ws / task.spec.candidate
    kernel.write_bytes(task.file(task.spec.solution).read_bytes())
    serve = ["serve", "--task", task.id, "--workspace", str(ws), "--ledger", str(root / "session" / "ledger.db")]
    command = (["-m", "crucible.harness.cli", *serve] if args.spares is None
               else ["-c", SERVE_WITH_SPARES.replace("SPARES", str(args.spares)), *serve])
    params = StdioServerParameters(command=sys.executable, args=command, env=dict(os.environ))
    edits = iter(range(1_000_000))

    def edit() -> None:  # a new snapshot with the same kernel: what an agent's edit costs before its effect
        kernel.write_text(kernel.read_text() + f"\n# edit {next(edits)}\n")

    async with Client(params, mode="legacy") as client:  # an agent's session: look, compile, test, edit
        await client.call_tool("get_task", {})
        compile_first, _ = await timed(client, "compile", {}, args.gap)
        compile_same = [(await timed(client, "compile", {}, args.gap))[0] for _ in range(args.repeats)]
        first_s, first = await timed(client, "run_tests", {}, args.gap)
        assert first["status"] == "ok" and first["correct"], first
        same, same_phases = [], []
        for _ in range(args.repeats):
            seconds, report = await timed(client, "run_tests", {}, args.gap)
            same.append(seconds)
            same_phases.append(report.get("phases", {}))
        compile_edited, edited, edited_phases = [], [], []
        for _ in range(3):  # edit, compile, test: the new snapshot's kernels are built once, by the compile
            edit()
            compile_edited.append((await timed(client, "compile", {}, args.gap))[0])
            seconds, report = await timed(client, "run_tests", {}, args.gap)
            edited.append(seconds)
            edited_phases.append(report.get("phases", {}))
    return {
        "task": task.id, "backend": resolve_backend("auto"), "repeats": args.repeats, "gap_s": args.gap,
        "spares": args.spares or "server default",
        "configs_run": [c["config"] for c in first.get("configs", []) if c.get("status") != "skipped"],
        "compile": {"first_s": round(compile_first, 3), "unchanged_p50_s": round(statistics.median(compile_same), 3),
                    "unchanged_max_s": round(max(compile_same), 3),
                    "after_edit_p50_s": round(statistics.median(compile_edited), 3), "goal_unchanged_cpu_s": 0.3},
        "run_tests": {"first_s": round(first_s, 3), "first_phases": first.get("phases", {}),
                      "unchanged_p50_s": round(statistics.median(same), 3), "unchanged_all_s": [round(s, 3) for s in same],
                      "unchanged_phases_p50": phases_median(same_phases),
                      "after_edit_p50_s": round(statistics.median(edited), 3),
                      "after_edit_phases_p50": phases_median(edited_phases),
                      "goals": {"cpu_unchanged_p50_s": 1.7, "h200_unchanged_p50_s": 1.5, "h200_first_s": 4.0}},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="triton2triton/softmax")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--gap", type=float, default=0.0)
    p.add_argument("--spares", type=int, default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="crucible-bench-") as tmp:
        os.environ["CRUCIBLE_CACHE"] = str(Path(tmp) / "cache")
        figures = anyio.run(measure, args, Path(tmp))
    for section in ("compile", "run_tests"):
        print(section, {k: v for k, v in figures[section].items() if not k.endswith("phases")})
    print("run_tests phases, unchanged (p50):", figures["run_tests"]["unchanged_phases_p50"])
    print("run_tests phases, after an edit (p50):", figures["run_tests"]["after_edit_phases_p50"])
    label = "".join([f"_gap{args.gap:g}" if args.gap else "", f"_spares{args.spares}" if args.spares else ""])
    write(f"inner_loop_{figures['backend']}{label}", figures, "python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
