"""One session's lifecycle: workspace, MCP endpoint, agent, ledger, score. Returns the session's rows.

    <run dir>/sessions/<session id>/      the harness's folder (never mounted into the agent's sandbox)
      config.json        SessionSpec + RunConfig
      digests.json       the task folder's digest (hidden.toml and the solution included) and the evaluator's
      workspace/         what the agent sees and edits (toolkit/workspace.py materialize)
      home/              the agent's fresh HOME: only the MCP config its adapter writes
      events.jsonl       the agent's raw event stream
      ledger.db          the MCP server's audit trail (server/ledger.py), outside the workspace
      snapshots/  submissions/<n>-<hash>/     what the server froze (the last submission is scored)
      scoring.json       the final Evaluation (visible + hidden configs), for audit
      result.json        SessionEnd, Usage, Score
      error.txt          the traceback, when our code failed (state infra_error)

The MCP server runs in this process (uvicorn in a thread), outside the agent's sandbox, over streamable
HTTP on 127.0.0.1, a free port, behind a fresh per-session bearer token. The agent stops itself at the time
limit (it owns its process group); `cancel` is set a little later as the backstop, and at once when the
run is interrupted (then the session is left `running`, and `--resume` redoes it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import shutil
import socket
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import anyio
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from crucible.server import SessionConfig, build_server
from crucible.server.http import http_app
from crucible.server.ledger import Ledger
from crucible.toolkit.evaluation import Backend
from crucible.toolkit.results import EVALUATOR_VERSION
from crucible.toolkit.task import Task, find_task
from crucible.toolkit.workspace import materialize

from .agents import Agent, AgentResult, SessionContext
from .models import RunConfig, Score, SessionEnd, SessionSpec, Usage
from .scoring import Scorer, score_session
from .store import ScoreRow, SessionRecord, SessionRow, SubmissionRecord, ToolCallRow

TOKEN_ENV = "CRUCIBLE_MCP_TOKEN"
BACKSTOP_GRACE_S = 15.0
"""After the time limit, how long the agent has to stop itself before `cancel` is set."""
ABANDON_S = 30.0
"""After `cancel`, how long before an agent that still has not returned is abandoned (its thread leaks)."""
SERVER_START_S = 30.0

SandboxPrefix = Callable[[Path, Path], list[str]]
"""(workspace, home) -> the command prefix that runs a process in the agent's sandbox."""


class SessionInterrupted(Exception):
    """The run was interrupted while this session ran: it is left `running`, for `--resume` to redo."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def session_dir(run_dir: Path, spec: SessionSpec) -> Path:
    return run_dir / "sessions" / spec.id


def prompt_for(task: Task) -> str:
    return (f"Optimize the GPU kernel of the crucible task {task.id} ({task.spec.title}). Your working folder "
            f"holds the task; the kernel to edit is {task.spec.candidate}. Use the crucible MCP tools: get_task "
            "first, then compile, run_tests and profile as you work, and submit when you are done (the last "
            "submission counts; it is scored after the session on the visible configs and on hidden ones). "
            "Make it correct first, then fast.")


# ---------------------------------------------------------------- digests


def _tree_digest(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        data = path.read_bytes()
        h.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def task_digest(task: Task) -> str:
    """Every file of the task folder, hidden.toml and the solution included."""
    files = [p for p in task.root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return _tree_digest(task.root, files)


@cache
def evaluator_digest() -> str:
    """The engine's sources (toolkit/) and EVALUATOR_VERSION: what a result was computed with."""
    import crucible.toolkit

    root = Path(crucible.toolkit.__file__).parent
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".h", ".toml")
             and "__pycache__" not in p.parts]
    return hashlib.sha256(f"{EVALUATOR_VERSION}\0{_tree_digest(root, files)}".encode()).hexdigest()


# ---------------------------------------------------------------- the MCP endpoint


MAX_CONNECTIONS = 64
"""Open connections one session's MCP server holds (a client keeps one or two). Past it the oldest that sits
idle between requests is closed (its client reconnects), else the new one: the host's network is shared, so
another session's agent must not shut this one out by holding connections that never send a request."""
IDLE_CONNECTION_S = 10.0
"""A connection that has sent no request by then is closed."""


class _BoundedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a bound on open connections and on idle ones. uvicorn holds a
    connection that never sends a request forever, and its limit_concurrency only answers requests: an
    agent opening thousands took the harness's file descriptors (every session's ledger and store)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.opened = time.monotonic()
        if len(self.connections) > MAX_CONNECTIONS:
            idle = [c for c in self.connections if c is not self and c.cycle is None and not c.transport.is_closing()]
            victim = min(idle, key=lambda c: getattr(c, "opened", 0.0)) if idle else self
            victim.transport.close()
            if victim is self:
                return
        self.timeout_keep_alive_task = self.loop.call_later(IDLE_CONNECTION_S, self.timeout_keep_alive_handler)


@contextmanager
def serve_session(session: SessionConfig, token: str) -> Iterator[str]:
    """Host the session's MCP server on 127.0.0.1 (a free port) in a thread; yields its URL."""
    server = build_server(session)
    for name in ("mcp", "httpx2", "httpx"):  # the SDK logs every request at INFO: not the run's output
        logging.getLogger(name).setLevel(logging.WARNING)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(http_app(server, token, "127.0.0.1"), log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=5, http=_BoundedH11)
    userver = uvicorn.Server(config)
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            anyio.run(lambda: userver.serve(sockets=[sock]))
        except BaseException as exc:  # reported to the session below, which ends as infra_error
            failed.append(exc)

    thread = threading.Thread(target=serve, name=f"mcp-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + SERVER_START_S
    while not userver.started:
        if failed or not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"the session's MCP server did not start on port {port}: "
                               f"{failed[0] if failed else 'timed out'}")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        userver.should_exit = True
        thread.join(timeout=15)
        sock.close()


# ---------------------------------------------------------------- the agent under its limits


def drive(agent: Agent, ctx: SessionContext, stop: threading.Event | None) -> tuple[AgentResult | None, str | None, bool]:
    """Run the agent in a thread under the backstop; returns (result, traceback, timed out)."""
    cancel = threading.Event()
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = agent.run(ctx, cancel)
        except Exception:  # the adapter is our code: its failure is an infra error, with the traceback
            box["error"] = traceback.format_exc()

    thread = threading.Thread(target=target, name=f"agent-{ctx.spec.id}", daemon=True)
    started = time.monotonic()
    thread.start()
    cancelled_at: float | None = None
    timed_out = False
    while thread.is_alive():
        thread.join(0.1)
        elapsed = time.monotonic() - started
        if cancelled_at is None and ((stop is not None and stop.is_set())
                                     or elapsed > ctx.time_limit_s + BACKSTOP_GRACE_S):
            timed_out = not (stop is not None and stop.is_set())
            cancel.set()
            cancelled_at = elapsed
        if cancelled_at is not None and elapsed > cancelled_at + ABANDON_S:
            return None, f"the agent did not return {ABANDON_S:g} s after it was cancelled; abandoned", timed_out
    result = box.get("result")
    return (result if isinstance(result, AgentResult) else None), box.get("error"), timed_out  # type: ignore[return-value]


# ---------------------------------------------------------------- the session


def _tool_calls(spec: SessionSpec, ledger: Ledger) -> list[ToolCallRow]:
    return [ToolCallRow(session_id=spec.id, call_id=c.id, **c.model_dump(exclude={"id"})) for c in ledger.calls()]


def _submissions(spec: SessionSpec, ledger: Ledger) -> list[SubmissionRecord]:
    return [SubmissionRecord(session_id=spec.id, **s.model_dump()) for s in ledger.submissions()]


def read_ledger(spec: SessionSpec, path: Path) -> tuple[list[ToolCallRow], list[SubmissionRecord]]:
    ledger = Ledger(path)
    try:
        return _tool_calls(spec, ledger), _submissions(spec, ledger)
    finally:
        ledger.close()


def _checked_against_the_ledger(end: SessionEnd, tool_calls: list[ToolCallRow], usage: Usage) -> SessionEnd:
    """An agent's infra_error rests on its CLI's stream ("the MCP server could not be used"), which the
    agent's own shell can write to: a failing agent would forge it to go unscored and be run again. The
    harness's ledger decides: a server that answered a call was usable, and a tampered stream decides
    nothing. Either way the session ends as the agent's crash, and its last submission is scored."""
    if end.reason != "infra_error":
        return end
    answered = sum(c.outcome == "ok" for c in tool_calls)
    if answered:
        why = f"the crucible MCP server answered {answered} of its tool calls"
    elif usage.foreign_events:
        why = f"its stream held {usage.foreign_events} event(s) the CLI cannot have written"
    else:
        return end
    return SessionEnd(reason="crash", message=f"the agent's client reported an infrastructure failure ({end.message}), "
                      f"but {why}: the session counts as the agent's", exit_code=end.exit_code)


def score_last(task: Task, submissions: list[SubmissionRecord], backend: Backend, folder: Path,
               scorer: Scorer | None = None) -> ScoreRow:
    """Score the last submission (on `scorer`'s GPUs; None: here, in a fresh worker); a failure of our code
    here is an infra_error score (re-scorable)."""
    last = submissions[-1] if submissions else None
    placement = None
    try:
        submission, expected = (Path(last.path), last.source_hash) if last else (None, None)
        if scorer is None:
            score, evaluation = score_session(task, submission, backend, expected_hash=expected)
        else:
            placed = scorer.score(task, submission, backend, expected_hash=expected)
            score, evaluation, placement = placed.score, placed.evaluation, placed.placement
        if evaluation is not None:
            (folder / "scoring.json").write_text(evaluation.model_dump_json(indent=2))
    except Exception:  # the top of scoring: a bug of ours is never the agent's failure
        tb = traceback.format_exc()
        (folder / "scoring_error.txt").write_text(tb)
        score = Score(verdict="infra_error", message=f"scoring failed: {tb.strip().splitlines()[-1]}",
                      evaluator_version=EVALUATOR_VERSION)
    return ScoreRow(session_id=folder.name, score=score, backend=backend, scored_at=now(), placement=placement)


def run_session(spec: SessionSpec, config: RunConfig, agent: Agent, *, run_dir: Path, backend: Backend,
                sandbox: SandboxPrefix, stop: threading.Event | None = None,
                scorer: Scorer | None = None, gpu: int | None = None) -> SessionRecord:
    """Run one session from scratch (its folder is cleared first) and return its rows; its tools run on
    `gpu` (None: GPU 0). Raises SessionInterrupted when `stop` is set while it runs; any other failure of
    ours ends as infra_error."""
    folder = session_dir(run_dir, spec)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    row = SessionRow.pending(spec).model_copy(update={"state": "running", "started_at": now(),
                                                      "session_dir": str(folder)})
    usage = Usage()
    tool_calls: list[ToolCallRow] = []
    submissions: list[SubmissionRecord] = []
    score: ScoreRow | None = None
    try:
        (folder / "config.json").write_text(json.dumps({"spec": spec.model_dump(mode="json"), "id": spec.id,
                                                        "config": config.model_dump(mode="json"),
                                                        "tools_gpu": gpu}, indent=2))
        task = find_task(spec.task)
        (folder / "digests.json").write_text(json.dumps({
            "task": {"id": task.id, "sha256": task_digest(task)},
            "evaluator": {"version": EVALUATOR_VERSION, "sha256": evaluator_digest()}}, indent=2))
        workspace, home, ledger = folder / "workspace", folder / "home", folder / "ledger.db"
        materialize(task, workspace)
        home.mkdir()
        events = folder / "events.jsonl"
        events.touch()
        token = secrets.token_urlsafe(32)
        session = SessionConfig(task_id=task.id, workspace=workspace, ledger=ledger, backend=backend, gpu=gpu)
        with serve_session(session, token) as url:
            ctx = SessionContext(spec=spec, config=config, workspace=workspace, home=home, session_dir=folder,
                                 events_path=events, mcp_url=url, token_env=TOKEN_ENV, token=token,
                                 prompt=prompt_for(task), sandbox_prefix=sandbox(workspace, home),
                                 time_limit_s=config.time_limit_s, budget_usd=config.budget_usd)
            started = time.monotonic()
            result, error, timed_out = drive(agent, ctx, stop)
            wall_s = time.monotonic() - started
        if stop is not None and stop.is_set():
            raise SessionInterrupted(spec.id)
        tool_calls, submissions = read_ledger(spec, ledger)
        by_tool = dict(Counter(c.tool for c in tool_calls))
        if result is None:
            (folder / "error.txt").write_text(error or "the agent returned nothing")
            end = SessionEnd(reason="infra_error", message=f"the agent adapter failed: "
                             f"{(error or 'no result').strip().splitlines()[-1]}")
            usage = Usage(wall_s=wall_s, tool_calls=by_tool)
        else:
            end = result.end
            if timed_out:
                end = SessionEnd(reason="time_limit", message=f"the agent passed its {config.time_limit_s:g} s "
                                 f"limit and was stopped by the harness; {end.message}", exit_code=end.exit_code)
            # Tool calls and wall time are the harness's own records, not the agent's claim.
            usage = result.usage.model_copy(update={"tool_calls": by_tool, "wall_s": round(wall_s, 3)})
            end = _checked_against_the_ledger(end, tool_calls, usage)
        if end.reason != "infra_error":
            score = score_last(task, submissions, backend, folder, scorer)
        state = "infra_error" if end.reason == "infra_error" else "done"
    except SessionInterrupted:
        raise
    except Exception:  # the top of a session: a bug of ours ends it as infra_error, traceback kept
        tb = traceback.format_exc()
        (folder / "error.txt").write_text(tb)
        end, state = SessionEnd(reason="infra_error", message=tb.strip().splitlines()[-1]), "infra_error"
    row = row.ended(end, state, now())  # type: ignore[arg-type]
    record = SessionRecord(session=row, tool_calls=tool_calls, submissions=submissions, usage=usage, score=score)
    (folder / "result.json").write_text(json.dumps({
        "state": state, "end": end.model_dump(mode="json"), "usage": usage.model_dump(mode="json"),
        "score": None if score is None else score.model_dump(mode="json")}, indent=2))
    return record
