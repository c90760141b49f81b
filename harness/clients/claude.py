"""Claude Code (`claude`, npm `@anthropic-ai/claude-code`).

Config: a JSON file passed with `--mcp-config FILE --strict-mcp-config` (the user's own servers stay out).
Events: `--output-format stream-json --verbose` prints one JSON object a line: `system` (init), `assistant`
(with `tool_use` blocks), `user` (with `tool_result` blocks), and a final `result` that holds the totals
and Claude Code's own cost estimate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, NonNegativeFloat, NonNegativeInt

from .base import (
    MALFORMED,
    ClientError,
    HeadlessSpec,
    McpServer,
    SessionUsage,
    StdioServer,
    ToolCall,
    apply_final,
    check_server_name,
    json_events,
)

NAME = "claude"
BINARY = "claude"
INSTALL_HINT = "run scripts/install-agent-clients.sh, or `npm install -g @anthropic-ai/claude-code`"
CONFIG_FORMAT = "json"
DEFAULT_BUILTINS = ("Read", "Edit", "Write", "Glob", "Grep")
"""Built-in tools a session gets by default: enough to read and edit the kernel; GPU work goes through MCP."""


def config_path(home: Path, workspace: Path) -> Path:
    """Where the harness writes the config: outside the workspace, passed by flag."""
    return home / "mcp.json"


def session_env(home: Path) -> dict[str, str]:
    """Claude Code's own settings for a session whose scratch HOME is `home` (the harness makes it)."""
    return {"CLAUDE_CONFIG_DIR": str(home / ".claude"),
            # Otherwise MCP tools hide behind a tool-search tool and the agent must find them first.
            "ENABLE_TOOL_SEARCH": "false",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def mcp_config(server: McpServer, name: str = "crucible") -> str:
    entry: dict[str, Any]
    if isinstance(server, StdioServer):
        entry = {"type": "stdio", "command": server.command, "args": server.args, "env": server.env}
    else:
        entry = {"type": "http", "url": server.url}
        if server.token_env:
            # Claude Code expands ${VAR} in the config it reads, so the token never lands in the file.
            entry["headers"] = {"Authorization": f"Bearer ${{{server.token_env}}}"}
    return json.dumps({"mcpServers": {check_server_name(name): entry}}, indent=2) + "\n"


def tool_name(server: str, tool: str) -> str:
    return f"mcp__{server}__{tool}"


def headless_command(spec: HeadlessSpec) -> list[str]:
    if spec.mcp_config is None:
        raise ClientError("Claude Code takes its MCP config as a file: set HeadlessSpec.mcp_config")
    builtins = DEFAULT_BUILTINS if spec.builtin_tools is None else spec.builtin_tools
    allowed = [*builtins, *(tool_name(spec.server_name, t) for t in spec.tools)]
    # The prompt goes right after -p: --allowedTools takes every word up to the next flag.
    cmd = [spec.binary, "-p", spec.prompt, "--output-format", "stream-json", "--verbose",
           "--mcp-config", str(spec.mcp_config), "--strict-mcp-config",
           "--tools", ",".join(builtins), "--allowedTools", *allowed,
           "--permission-mode", "dontAsk", "--setting-sources", "", "--no-session-persistence"]
    if spec.model:
        cmd += ["--model", spec.model]
    if spec.max_budget_usd is not None:
        cmd += ["--max-budget-usd", str(spec.max_budget_usd)]
    if spec.max_turns is not None:
        cmd += ["--max-turns", str(spec.max_turns)]
    return cmd


class _Usage(BaseModel):
    input_tokens: NonNegativeInt = 0
    output_tokens: NonNegativeInt = 0
    cache_read_input_tokens: NonNegativeInt = 0
    cache_creation_input_tokens: NonNegativeInt = 0


class _Result(BaseModel):
    subtype: str
    is_error: bool = False
    num_turns: NonNegativeInt = 0
    duration_ms: int | None = None
    total_cost_usd: NonNegativeFloat | None = None
    usage: _Usage = _Usage()
    result: str | None = None


_STATUS = {"success": "success", "error_max_turns": "max_turns", "error_max_budget_usd": "budget_exceeded"}


def _split(name: str) -> ToolCall:
    parts = name.split("__", 2)
    if len(parts) == 3 and parts[0] == "mcp":
        return ToolCall(name=parts[2], server=parts[1])
    return ToolCall(name=name)


def parse_events(lines: Iterable[str], model: str | None = None) -> SessionUsage:
    """Totals come from the final `result` event; tool calls from the `tool_use` and `tool_result` blocks.
    `model` is a fallback: the init event names the model."""
    usage = SessionUsage(client=NAME, model=model)
    calls: dict[str, ToolCall] = {}
    for event in json_events(lines, usage):
        try:
            kind = event.get("type")
            content = (event.get("message") or {}).get("content")
            if kind == "system" and event.get("subtype") == "init":
                named = event.get("model")
                if not isinstance(named, str | None):
                    raise TypeError(f"the init event's model is {type(named).__name__}")
                usage.model = named or usage.model
                usage.mcp_servers = {s["name"]: s.get("status", "?") for s in event.get("mcp_servers") or []
                                     if isinstance(s, dict) and "name" in s}
            elif kind == "assistant" and isinstance(content, list):
                for block in content:
                    if block.get("type") == "tool_use":
                        call = calls[block.get("id", str(len(calls)))] = _split(block.get("name", "?"))
                        usage.tool_calls.append(call)
            elif kind == "user" and isinstance(content, list):
                for block in content:
                    if block.get("type") == "tool_result" and block.get("tool_use_id") in calls:
                        calls[block["tool_use_id"]].ok = not block.get("is_error", False)
            elif kind == "result":
                res = _Result.model_validate(event)
                apply_final(usage, turns=res.num_turns, input_tokens=res.usage.input_tokens,
                            output_tokens=res.usage.output_tokens, cache_read_tokens=res.usage.cache_read_input_tokens,
                            cache_write_tokens=res.usage.cache_creation_input_tokens, cost_usd=res.total_cost_usd)
                usage.duration_ms = res.duration_ms
                usage.status = _STATUS.get(res.subtype, "error")  # type: ignore[assignment]
                if res.is_error and usage.status == "success":
                    usage.status = "error"
                usage.detail = res.subtype if usage.status != "success" else None
        except MALFORMED:  # a field of the wrong type: not the client's writing (SessionUsage.foreign_events)
            usage.foreign_events += 1
    return usage.priced()
