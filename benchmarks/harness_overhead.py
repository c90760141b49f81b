"""The harness's own cost per session: everything but the agent's tool calls and the evaluations.

Runs `crucible run` (in-process) with the scripted agent and an empty replay plan over the fixture task,
so the agent only connects to its MCP endpoint and leaves, and the session has no submission to score.
Per session: total (the session row's start to end) minus the agent's wall time = the harness's part
(run folder, workspace, server start/stop, ledger copy, store writes). Then the same phases timed one by one.
Goal: <= 2 s per session. Runs anywhere (no GPU needed).

    .venv/bin/python benchmarks/harness_overhead.py [--sessions N]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("CRUCIBLE_TASKS", str(ROOT / "tests" / "fixtures" / "tasks"))
os.environ.setdefault("CRUCIBLE_BACKEND", "cpu")

from common import write  # noqa: E402

from crucible.harness.models import (  # noqa: E402
    RunConfig,
    SessionSpec,
    Usage,  # noqa: E402
)
from crucible.harness.run import execute  # noqa: E402
from crucible.harness.session import read_ledger, serve_session  # noqa: E402
from crucible.harness.store import STORE_FILE, SessionRecord, SessionRow, Store  # noqa: E402
from crucible.server import SessionConfig  # noqa: E402
from crucible.toolkit.task import find_task  # noqa: E402
from crucible.toolkit.workspace import materialize  # noqa: E402

TASK = "triton2triton/vadd"


def seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def whole_sessions(tmp: Path, n: int) -> dict:
    plan = tmp / "empty.json"
    plan.write_text("[]")
    out = tmp / "run"
    execute(RunConfig(model=f"replay:{plan}", repeats=n), out=out, stream=io.StringIO())
    store = Store(out / STORE_FILE)
    totals, agents = [], []
    for s in store.sessions():
        usage = store.usage(s.id)
        assert s.started_at and s.finished_at and usage is not None
        totals.append(seconds(s.started_at, s.finished_at))
        agents.append(usage.wall_s)
    overhead = [t - a for t, a in zip(totals, agents, strict=True)]
    return {"sessions": n, "session_total_s_median": statistics.median(totals),
            "agent_connect_s_median": statistics.median(agents),
            "harness_overhead_s_median": statistics.median(overhead), "harness_overhead_s_max": max(overhead),
            "first_session_overhead_s": overhead[0]}


def phases(tmp: Path, n: int) -> dict:
    task = find_task(TASK)
    times: dict[str, list[float]] = {"materialize": [], "server_start": [], "server_stop": [], "ledger_read": [],
                                     "store_write": []}
    store = Store(tmp / "phases.db")
    for i in range(n):
        folder = tmp / f"s{i}"
        t0 = time.perf_counter()
        materialize(task, folder / "workspace")
        t1 = time.perf_counter()
        session = SessionConfig(task_id=task.id, workspace=folder / "workspace", ledger=folder / "ledger.db",
                                backend="cpu")
        with serve_session(session, secrets.token_urlsafe(32)):
            t2 = time.perf_counter()
        t3 = time.perf_counter()
        spec = SessionSpec(run_id="bench", task=task.id, agent="scripted", model=f"m{i}", repeat=1)
        calls, subs = read_ledger(spec, folder / "ledger.db")
        t4 = time.perf_counter()
        store.add_pending([spec])
        store.mark_running(spec.id, "now", str(folder))
        store.finish_session(SessionRecord(session=SessionRow.pending(spec), tool_calls=calls, submissions=subs,
                                           usage=Usage(), score=None))
        t5 = time.perf_counter()
        for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            times[k].append(v)
    return {f"{k}_s_median": statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crucible-overhead-") as tmp:
        os.environ.setdefault("CRUCIBLE_CACHE", str(Path(tmp) / "cache"))
        figures = {"whole_session": whole_sessions(Path(tmp), args.sessions),
                   "phases": phases(Path(tmp), args.sessions), "goal_s": 2.0}
    print(json.dumps(figures, indent=2))
    write("harness_overhead", figures, f"benchmarks/harness_overhead.py --sessions {args.sessions}")


if __name__ == "__main__":
    main()
