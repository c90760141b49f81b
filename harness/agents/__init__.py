"""Agents: what drives a session. One module per agent, registered by name in `AGENTS`.

    scripted.py     no model: replays a plan through a real MCP client (solution, baseline, replay:FILE)
    claude_code.py  Claude Code, headless           (config, command, events: harness/clients/claude.py)
    codex.py        Codex exec                      (harness/clients/codex.py)
    cursor.py       Cursor's agent CLI              (harness/clients/cursor.py)
    api.py          a tool-calling loop over the MCP tools against an OpenAI-compatible chat endpoint

The harness (harness/session.py) owns the session: it materializes the workspace, serves the session's
MCP endpoint over HTTP on loopback with a per-session token, makes a fresh HOME, and then calls
`agent.run(ctx, cancel)`; the agent writes its config into that HOME in its own format, runs headless
inside `ctx.sandbox_prefix`, streams its raw events to `ctx.events_path`, and stops its whole process
group when the time limit passes or `cancel` is set.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from ..models import RunConfig, SessionEnd, SessionSpec, Usage


class AgentUnavailable(Exception):
    """The agent cannot run here (CLI missing, API key not set); the message says what to install or set.
    Raised by `preflight`, before any session starts, so nothing is half-run."""


class SessionContext(BaseModel):
    """What the harness hands an agent for one session."""

    model_config = ConfigDict(frozen=True)

    spec: SessionSpec
    config: RunConfig
    workspace: Path
    """The agent's working folder (read-write for it)."""
    home: Path
    """A fresh, empty HOME for the agent's client: its config goes here, nothing of the user's."""
    session_dir: Path
    """The harness's folder for this session (not visible to the agent)."""
    events_path: Path
    """Where the agent's raw event stream goes, one JSON object per line."""
    mcp_url: str
    """The session's MCP endpoint, e.g. http://127.0.0.1:PORT/mcp."""
    token_env: str
    """The environment variable that carries the bearer token (configs refer to it by name)."""
    token: str
    """The per-session bearer token: put it in the agent's environment only, never in a file."""
    prompt: str
    """The opening instruction for the agent."""
    sandbox_prefix: list[str]
    """Command prefix that runs a process in the agent's sandbox (empty with --no-sandbox)."""
    time_limit_s: float
    budget_usd: float | None = None


class AgentResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    end: SessionEnd
    usage: Usage
    """Tokens and cost as the client reported them (tool_calls are filled from the ledger by the harness)."""


class Agent(Protocol):
    name: str

    def preflight(self, config: RunConfig) -> None:
        """Raise AgentUnavailable when this agent cannot run here with this config."""
        ...

    def run(self, ctx: SessionContext, cancel: threading.Event) -> AgentResult: ...

    def sandbox_tools(self) -> list[Path]:
        """Folders the agent's client needs inside its sandbox, read-only (its CLI's install folder)."""
        ...


def get_agent(name: str) -> Agent:
    """The agent registered under `name`; imported lazily so a missing optional dependency of one agent
    does not break the others."""
    import importlib

    modules = {"scripted": "scripted", "claude-code": "claude_code", "codex": "codex", "cursor": "cursor",
               "api": "api"}
    if name not in modules:
        raise AgentUnavailable(f"unknown agent {name!r}; known: {', '.join(modules)}")
    return importlib.import_module(f"{__name__}.{modules[name]}").AGENT
