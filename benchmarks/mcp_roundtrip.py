"""What the MCP layer costs: `get_task` round trips over stdio (goal: p50 <= 5 ms), and what `run_tests`
through the server adds over calling `evaluate` directly (same snapshot, same request, interleaved).

Run: python3 benchmarks/mcp_roundtrip.py [--task ID] [--calls 200] [--repeats 5]
(default: the fixture task tests/fixtures/tasks/triton2triton/vadd, which the CPU interpreter runs fast).
Writes benchmarks/results/mcp_roundtrip_<backend>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("CRUCIBLE_TASKS", str(ROOT / "tests/fixtures/tasks"))

from common import write  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from crucible.toolkit.evaluation import EvalRequest, evaluate, resolve_backend  # noqa: E402
from crucible.toolkit.task import find_task  # noqa: E402
from crucible.toolkit.workspace import materialize, take_snapshot  # noqa: E402


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


async def measure(args: argparse.Namespace, root: Path) -> dict:
    task = find_task(args.task)
    backend = resolve_backend("auto")
    ws = root / "ws"
    materialize(task, ws)
    config = task.spec.configs[0].name
    params = StdioServerParameters(command=sys.executable, args=[
        "-m", "crucible.harness.cli", "serve", "--task", task.id, "--workspace", str(ws),
        "--ledger", str(root / "session" / "ledger.db")], env=dict(os.environ))
    request = EvalRequest(configs=[config], seeds=1, timing="quick", backend=backend)
    snap = take_snapshot(task, ws)
    async with Client(params, mode="legacy") as client:  # the initialize handshake, as agents do
        for _ in range(10):
            await client.call_tool("get_task", {})
        rtts = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            result = await client.call_tool("get_task", {})
            rtts.append((time.perf_counter() - t0) * 1e3)
            assert not result.is_error
        # Warm both paths (build cache, Triton cache), then interleave so drift hits both alike.
        await client.call_tool("run_tests", {"configs": [config], "seeds": 1})
        evaluate(task, snap, request)
        direct, served, layer, phases = [], [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ev = await anyio.to_thread.run_sync(lambda: evaluate(task, snap, request))
            direct.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = await client.call_tool("run_tests", {"configs": [config], "seeds": 1})
            served.append(time.perf_counter() - t0)
            # The engine's own time is in the report: the rest is the server's (snapshot, ledger, JSON, pipe).
            layer.append(served[-1] - result.structured_content["seconds"])
            phases.append({"direct": ev.phases, "served": result.structured_content.get("phases", {})})
            assert ev.status == "ok" and result.structured_content["status"] == "ok", result.content
            assert result.structured_content["source_hash"] == snap.digest
    return {
        "task": task.id, "backend": backend,
        "get_task_stdio": {"calls": args.calls, "p50_ms": round(percentile(rtts, 50), 3),
                           "p99_ms": round(percentile(rtts, 99), 3), "mean_ms": round(statistics.mean(rtts), 3),
                           "goal_p50_ms": 5},
        "run_tests_overhead": {
            "config": config, "seeds": 1, "repeats": args.repeats,
            "evaluate_direct_median_s": round(statistics.median(direct), 4),
            "run_tests_stdio_median_s": round(statistics.median(served), 4),
            "added_median_s": round(statistics.median(served) - statistics.median(direct), 4),
            "added_pairwise_median_s": round(statistics.median(s - d for s, d in zip(served, direct, strict=True)), 4),
            "server_layer_median_ms": round(statistics.median(layer) * 1e3, 2),
            "phases_last": phases[-1] if phases else {},
            "note": "added_*: wall time of run_tests over stdio minus evaluate() in-process (noisy: the worker's "
                    "start-up varies by ~0.2 s); server_layer: run_tests wall time minus the engine's own "
                    "`seconds` in the report (snapshot, lock, thread, ledger, JSON, stdio)",
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="triton2triton/vadd")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="crucible-bench-") as tmp:
        os.environ.setdefault("CRUCIBLE_CACHE", str(Path(tmp) / "cache"))
        figures = anyio.run(measure, args, Path(tmp))
    print(figures)
    write(f"mcp_roundtrip_{figures['backend']}", figures, "python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
