"""One session's lifecycle: what the agent is handed, how a session ends (finished, time limit, a bug of ours),
and that an infrastructure failure is recorded apart, with its traceback."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from crucible.harness.agents import AgentResult, SessionContext
from crucible.harness.agents.scripted import AGENT as SCRIPTED
from crucible.harness.models import RunConfig, SessionEnd, SessionSpec, Usage
from crucible.harness.session import run_session

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"
TASK = "triton2triton/vadd"


@pytest.fixture(autouse=True)
def _fixture_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))


def spec(model: str) -> SessionSpec:
    return SessionSpec(run_id="r", task=TASK, agent="scripted", model=model, repeat=1)


def status_of(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


class Inspecting:
    """An agent that records what it was handed and checks the endpoint's guard, then does nothing."""

    name = "scripted"

    def __init__(self) -> None:
        self.seen: dict[str, object] = {}

    def preflight(self, config: RunConfig) -> None: ...

    def run(self, ctx: SessionContext, cancel: threading.Event) -> AgentResult:
        self.seen = {"ctx": ctx, "home_empty": not any(ctx.home.iterdir()),
                     "workspace": sorted(p.name for p in ctx.workspace.iterdir()),
                     "no_token": status_of(ctx.mcp_url, {}),
                     "token": status_of(ctx.mcp_url, {"authorization": f"Bearer {ctx.token}"})}
        return AgentResult(end=SessionEnd(reason="finished"), usage=Usage(turns=1, cost_source="none"))


class Broken:
    name = "scripted"

    def preflight(self, config: RunConfig) -> None: ...

    def run(self, ctx: SessionContext, cancel: threading.Event) -> AgentResult:
        raise RuntimeError("a bug in the adapter")


def test_the_agent_gets_a_fresh_home_the_visible_workspace_and_a_token_guarded_endpoint(tmp_path: Path) -> None:
    agent = Inspecting()
    record = run_session(spec("x"), RunConfig(), agent, run_dir=tmp_path, backend="cpu",  # type: ignore[arg-type]
                         sandbox=lambda ws, home: ["sandbox-of", str(ws)])
    seen = agent.seen
    ctx = seen["ctx"]
    assert isinstance(ctx, SessionContext)
    assert ctx.mcp_url.startswith("http://127.0.0.1:") and ctx.mcp_url.endswith("/mcp")
    assert seen["no_token"] == 401 and seen["token"] == 200
    assert seen["home_empty"] and seen["workspace"] == ["PROMPT.md", "baseline.py", "kernel.py", "reference.py",
                                                         "task.json"]
    assert ctx.sandbox_prefix == ["sandbox-of", str(ctx.workspace)]
    assert TASK in ctx.prompt and "submit" in ctx.prompt and ctx.token not in ctx.prompt
    folder = tmp_path / "sessions" / spec("x").id
    assert ctx.session_dir == folder and not ctx.workspace.is_relative_to(folder / "ledger.db")
    assert record.session.state == "done" and record.score is not None
    assert record.score.score.verdict == "no_submission"


def test_a_bug_in_the_agent_adapter_is_an_infra_error_with_its_traceback_and_no_score(tmp_path: Path) -> None:
    record = run_session(spec("x"), RunConfig(), Broken(), run_dir=tmp_path, backend="cpu",  # type: ignore[arg-type]
                         sandbox=lambda ws, home: [])
    assert record.session.state == "infra_error" and record.session.end_reason == "infra_error"
    assert "a bug in the adapter" in record.session.end_message and record.score is None
    error = (tmp_path / "sessions" / spec("x").id / "error.txt").read_text()
    assert "Traceback" in error and "RuntimeError: a bug in the adapter" in error


def test_an_unknown_task_is_an_infra_error_not_a_crash_of_the_run(tmp_path: Path) -> None:
    bad = SessionSpec(run_id="r", task="triton2triton/nope", agent="scripted", model="solution", repeat=1)
    record = run_session(bad, RunConfig(), SCRIPTED, run_dir=tmp_path, backend="cpu", sandbox=lambda ws, home: [])
    assert record.session.state == "infra_error" and "nope" in record.session.end_message


def test_a_session_past_its_time_limit_ends_as_time_limit_and_is_still_scored(tmp_path: Path) -> None:
    plan = tmp_path / "slow.json"
    plan.write_text(json.dumps([{"call": {"tool": "run_tests"}}] * 50))
    config = RunConfig(model=f"replay:{plan}", time_limit_s=2)
    record = run_session(spec(config.model or ""), config, SCRIPTED, run_dir=tmp_path, backend="cpu",
                         sandbox=lambda ws, home: [])
    assert record.session.end_reason == "time_limit" and record.session.state == "done"
    assert record.usage.turns < 50 and record.usage.wall_s < 30
    assert record.score is not None and record.score.score.verdict == "no_submission"
    assert all(c.tool == "run_tests" for c in record.tool_calls)


def test_an_interrupted_run_leaves_the_session_for_resume(tmp_path: Path) -> None:
    from crucible.harness.session import SessionInterrupted

    stop = threading.Event()
    stop.set()
    with pytest.raises(SessionInterrupted):
        run_session(spec("solution"), RunConfig(), SCRIPTED, run_dir=tmp_path, backend="cpu",
                    sandbox=lambda ws, home: [], stop=stop)


def test_an_infra_error_the_agents_stream_claims_is_the_agents_crash_once_the_ledger_saw_the_server_work() -> None:
    # The agent's shell can write "the MCP server failed" into its CLI's stream; an infra_error would leave
    # a failing session unscored and run it again.
    from crucible.harness.session import _checked_against_the_ledger
    from crucible.harness.store import ToolCallRow

    claimed = SessionEnd(reason="infra_error", message="Codex could not use the crucible MCP server: mcp crucible")
    call = ToolCallRow(session_id="s", call_id=1, tool="run_tests", arguments={}, started_at="t", outcome="ok")
    failed = call.model_copy(update={"outcome": "error"})
    end = _checked_against_the_ledger(claimed, [call, failed], Usage())
    assert end.reason == "crash" and "answered 1 of its tool calls" in end.message
    end = _checked_against_the_ledger(claimed, [failed], Usage(foreign_events=2))
    assert end.reason == "crash" and "2 event(s) the CLI cannot have written" in end.message
    assert _checked_against_the_ledger(claimed, [failed], Usage()) == claimed  # no call answered: ours
    finished = SessionEnd(reason="finished")
    assert _checked_against_the_ledger(finished, [call], Usage(foreign_events=1)) == finished


def test_the_sessions_mcp_server_closes_connections_past_its_bound_and_idle_ones(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent holding thousands of idle connections took the harness's file descriptors.
    import contextlib
    import socket
    import time

    from crucible.harness import session as session_module
    from crucible.server import SessionConfig
    from crucible.toolkit.task import find_task
    from crucible.toolkit.workspace import materialize

    monkeypatch.setattr(session_module, "IDLE_CONNECTION_S", 1.0)
    task = find_task("triton2triton/vadd")  # the fixture suite (conftest points CRUCIBLE_TASKS at it)
    materialize(task, tmp_path / "ws")
    config = SessionConfig(task_id=task.id, workspace=tmp_path / "ws", ledger=tmp_path / "ledger.db", backend="cpu")
    with session_module.serve_session(config, "token") as url:
        port = int(url.split(":")[2].split("/")[0])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(session_module.MAX_CONNECTIONS + 20)]
        time.sleep(0.3)
        closed = 0
        for s in held:
            s.settimeout(0.05)
            with contextlib.suppress(TimeoutError):
                closed += s.recv(1) == b""
        assert closed >= 20
        # full of connections that never sent a request (another session's agent can open them: the network
        # is shared), the server still answers its own client: the oldest idle one makes room
        req = urllib.request.Request(url, data=b"{}", headers={"Authorization": "Bearer token"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as answered:
            urllib.request.urlopen(req, timeout=10)
        assert answered.value.code in (400, 406, 415)
        time.sleep(1.5)  # past the idle bound: none is left open
        for s in held:
            s.settimeout(1.0)
            assert s.recv(1) == b""
            s.close()
        req = urllib.request.Request(url, data=b"{}", headers={"Authorization": "Bearer token"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as answered:  # still serving: a malformed request, answered
            urllib.request.urlopen(req, timeout=10)
        assert answered.value.code in (400, 406, 415)
