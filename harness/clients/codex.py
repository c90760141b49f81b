"""Codex (`codex`, npm `@openai/codex`).

Config: TOML in `$CODEX_HOME/config.toml`, one `[mcp_servers.NAME]` table. Codex starts stdio servers with
a filtered environment, so the table carries what the server needs in `env`; in `exec` mode a tool call
fails unless the server's tools are pre-approved (`default_tools_approval_mode = "approve"`), and the
session starts without a slow server unless it is `required` (which also makes a dead server fatal).
Events: `codex exec --json` prints JSONL: `thread.started`, `turn.started`, `item.started` /
`item.completed` (`mcp_tool_call`, `command_execution`, `file_change`, `agent_message`, ...),
`turn.completed` with `usage`, or `turn.failed` / `error`. No cost: it comes from the price table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, NonNegativeInt

from .base import (
    MALFORMED,
    HeadlessSpec,
    McpServer,
    SessionUsage,
    StdioServer,
    ToolCall,
    check_server_name,
    json_events,
)

NAME = "codex"
BINARY = "codex"
INSTALL_HINT = "run scripts/install-agent-clients.sh, or `npm install -g @openai/codex`"
CONFIG_FORMAT = "toml"
TOOL_TIMEOUT_S = 900
"""Codex gives up on a tool call after 60 s by default; a careful `profile` can take longer."""


def config_path(home: Path, workspace: Path) -> Path:
    """`home` is the session's CODEX_HOME."""
    return home / "config.toml"


def toml_value(value: str | int | float | bool | Sequence[str]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a TOML basic string, except that TOML also wants DEL escaped.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_table(header: str, items: Mapping[str, Any]) -> str:
    lines = [f"[{header}]"]
    lines += [f"{k if _BARE_KEY.match(k) else toml_value(k)} = {toml_value(v)}" for k, v in items.items()]
    return "\n".join(lines) + "\n"


def mcp_config(server: McpServer, name: str = "crucible") -> str:
    table = f"mcp_servers.{check_server_name(name)}"
    items: dict[str, Any]
    if isinstance(server, StdioServer):
        items = {"command": server.command, "args": server.args}
    else:
        items = {"url": server.url}
        if server.token_env:
            items["bearer_token_env_var"] = server.token_env
    # `required`: without it `codex exec` does not wait for a server that takes more than ~0.5 s to start
    # (crucible serve takes ~1 s) and runs the whole session without its tools.
    items |= {"required": True, "default_tools_approval_mode": "approve", "tool_timeout_sec": TOOL_TIMEOUT_S}
    text = toml_table(table, items)
    if isinstance(server, StdioServer) and server.env:
        text += "\n" + toml_table(f"{table}.env", server.env)
    return text


def session_env(home: Path) -> dict[str, str]:
    return {"CODEX_HOME": str(home)}


def headless_command(spec: HeadlessSpec) -> list[str]:
    """Run it with stdin from /dev/null: `codex exec` otherwise waits to read more prompt from stdin.

    Codex has no turn or dollar limit of its own; the harness's wall-clock limit bounds it. Its built-in
    tools are its shell and patch tools, confined by `--sandbox workspace-write`."""
    cmd = [spec.binary, "exec", "--json", "--skip-git-repo-check", "--ephemeral",
           "--sandbox", "workspace-write", "-C", str(spec.workspace)]
    if spec.model:
        cmd += ["-m", spec.model]
    return [*cmd, "--", spec.prompt]


class _Usage(BaseModel):
    input_tokens: NonNegativeInt = 0
    """Includes cached_input_tokens (and, we assume, cache_write_input_tokens; OpenAI reports none)."""
    cached_input_tokens: NonNegativeInt = 0
    cache_write_input_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    reasoning_output_tokens: NonNegativeInt = 0


_BUILTIN_ITEMS = {"command_execution": "shell", "file_change": "apply_patch", "web_search": "web_search"}


def parse_events(lines: Iterable[str], model: str | None = None) -> SessionUsage:
    """`model`: the one the run asked for; Codex's events do not name it, and the price depends on it."""
    usage = SessionUsage(client=NAME, model=model, reasoning_tokens=0)
    for event in json_events(lines, usage):
        try:
            kind = event.get("type")
            item = event.get("item") or {}
            if kind == "item.completed" and item.get("type") == "mcp_tool_call":
                usage.tool_calls.append(ToolCall(name=item.get("tool", "?"), server=item.get("server"),
                                                 ok=item.get("status") == "completed" and not item.get("error")))
            elif kind == "item.completed" and item.get("type") in _BUILTIN_ITEMS:
                usage.tool_calls.append(ToolCall(name=_BUILTIN_ITEMS[item["type"]],
                                                 ok=item.get("status") in (None, "completed")))
            elif kind == "turn.completed":
                u = _Usage.model_validate(event.get("usage") or {})
                usage.turns += 1
                usage.input_tokens += max(0, u.input_tokens - u.cached_input_tokens - u.cache_write_input_tokens)
                usage.cache_read_tokens += u.cached_input_tokens
                usage.cache_write_tokens += u.cache_write_input_tokens
                usage.output_tokens += u.output_tokens
                usage.reasoning_tokens = (usage.reasoning_tokens or 0) + u.reasoning_output_tokens
                usage.status, usage.detail = "success", None  # an earlier `error` event was retried
            elif kind in ("turn.failed", "error"):
                usage.status = "error"
                err = event.get("error") or {}
                usage.detail = err.get("message") if isinstance(err, dict) else None
                usage.detail = usage.detail or event.get("message")
        except MALFORMED:  # a field of the wrong type: not the client's writing (SessionUsage.foreign_events)
            usage.foreign_events += 1
    return usage.priced()
