"""A harness-like session for one agent test: a real `crucible serve --transport http` with a ledger and a
token, a fresh workspace and HOME, and the SessionContext an agent gets from the harness.

    served_session(tmp_path, agent, model, ...)   yields a Served (ctx + the ledger to read afterwards)
    leftover_processes(home)                      processes still running with that HOME (should be none)
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from crucible.harness.agents import SessionContext
from crucible.harness.models import AgentName, RunConfig, SessionSpec
from crucible.harness.sandbox import agent_sandbox_prefix, cli_tools_ro, probe_agent_sandbox
from crucible.server.ledger import Ledger

from .clients import CRUCIBLE, TASK

TOKEN_ENV = "CRUCIBLE_MCP_TOKEN"
PROMPT = "Call each crucible tool once: get_task, compile, run_tests, profile, submit."


class Served(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    ctx: SessionContext
    ledger_path: Path

    def tools_called(self) -> list[str]:
        ledger = Ledger(self.ledger_path)
        try:
            return [c.tool for c in ledger.calls()]
        finally:
            ledger.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(proc: subprocess.Popen[bytes], port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"crucible serve exited: {err[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"crucible serve did not listen on port {port} within {timeout_s} s") from None
            time.sleep(0.1)


def sandbox_prefix(workspace: Path, home: Path, tools: list[Path], sandboxed: bool) -> list[str]:
    if not sandboxed or not probe_agent_sandbox().available:
        return []
    return agent_sandbox_prefix(workspace=workspace, home=home, tools_ro=tools, gpu=False)


@contextmanager
def served_session(tmp_path: Path, agent: AgentName, model: str | None, *, binary: str | None = None,
                   tools: list[Path] | None = None, time_limit_s: float = 120, budget_usd: float | None = None,
                   sandboxed: bool = True, prompt: str = PROMPT) -> Iterator[Served]:
    """Everything below `tmp_path`: run/<session>/{workspace,home,events.jsonl,ledger.db}."""
    session_dir = tmp_path / "run" / "session"
    workspace, home = session_dir / "workspace", session_dir / "home"
    home.mkdir(parents=True)
    subprocess.run([*CRUCIBLE, "workspace", TASK, str(workspace)], check=True, capture_output=True, timeout=60)
    ledger = session_dir / "ledger.db"
    token = secrets.token_urlsafe(24)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME") or k.startswith("CRUCIBLE_")}
    proc = subprocess.Popen([*CRUCIBLE, "serve", "--task", TASK, "--workspace", str(workspace), "--transport",
                             "http", "--host", "127.0.0.1", "--port", str(port), "--ledger", str(ledger)],
                            env=env | {TOKEN_ENV: token}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _wait_listening(proc, port)
        ro = list(tools or [])
        if binary is not None:
            ro += cli_tools_ro(binary)
        config = RunConfig(agent=agent, model=model, budget_usd=budget_usd, time_limit_s=time_limit_s)
        ctx = SessionContext(
            spec=SessionSpec(run_id="test", task=TASK, agent=agent, model=model, repeat=0), config=config,
            workspace=workspace, home=home, session_dir=session_dir, events_path=session_dir / "events.jsonl",
            mcp_url=f"http://127.0.0.1:{port}/mcp", token_env=TOKEN_ENV, token=token, prompt=prompt,
            sandbox_prefix=sandbox_prefix(workspace, home, ro, sandboxed), time_limit_s=time_limit_s,
            budget_usd=budget_usd)
        yield Served(ctx=ctx, ledger_path=ledger)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def leftover_processes(home: Path) -> list[int]:
    """Pids of live processes whose environment has HOME=<home>: an agent's, or its children's."""
    marker = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in env and state != "Z":
            found.append(int(entry.name))
    return found
