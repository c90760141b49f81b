"""Agent clients: one module per CLI, each a set of pure functions the harness calls.

    base.py     shared models: McpServer (stdio | http), HeadlessSpec, SessionUsage, ToolCall, prices
    claude.py   Claude Code   JSON --mcp-config file     stream-json events, cost from the CLI
    codex.py    Codex         TOML in $CODEX_HOME        JSONL events, cost from prices.toml
    cursor.py   Cursor agent  .cursor/mcp.json           stream-json events, cost from prices.toml
    prices.toml list prices per million tokens

A module fits `AgentClient`; adding a client is one module and one line in `CLIENTS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from . import claude, codex, cursor
from .base import (
    DEFAULT_TOKEN_ENV,
    TOOL_NAMES,
    ClientError,
    HeadlessSpec,
    HttpServer,
    McpServer,
    SessionUsage,
    StdioServer,
    ToolCall,
    crucible_server,
    find_binary,
    model_price,
)


class AgentClient(Protocol):
    NAME: str
    BINARY: str
    INSTALL_HINT: str
    CONFIG_FORMAT: str

    def config_path(self, home: Path, workspace: Path) -> Path:
        """Where the session's MCP config goes (`home`: the session's scratch home for the client)."""
        ...

    def mcp_config(self, server: McpServer, name: str = ...) -> str:
        """The config file's text, in the client's own format."""
        ...

    def session_env(self, home: Path) -> dict[str, str]:
        """Environment variables the client needs for an isolated, headless session."""
        ...

    def headless_command(self, spec: HeadlessSpec) -> list[str]: ...

    def parse_events(self, lines: Iterable[str], model: str | None = None) -> SessionUsage:
        """`model`: the one the run asked for, to price it when the stream names none."""
        ...


CLIENTS: dict[str, AgentClient] = {"claude": claude, "codex": codex, "cursor": cursor}


def get_client(name: str) -> AgentClient:
    try:
        return CLIENTS[name]
    except KeyError:
        raise ClientError(f"unknown client {name!r}; known: {', '.join(CLIENTS)}") from None


__all__ = ["CLIENTS", "DEFAULT_TOKEN_ENV", "TOOL_NAMES", "AgentClient", "ClientError", "HeadlessSpec",
           "HttpServer", "McpServer", "SessionUsage", "StdioServer", "ToolCall", "crucible_server",
           "find_binary", "get_client", "model_price"]
