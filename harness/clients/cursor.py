"""Cursor's agent CLI (`agent`, formerly `cursor-agent`; installed from cursor.com, not from npm).

It talks only to Cursor's servers, so it cannot run offline: this module is built from the documented
formats and tested on recorded streams (tests/e2e/recorded/cursor-*.jsonl).
Config: `.cursor/mcp.json` in the workspace, the `{"mcpServers": {...}}` shape; `${env:NAME}` is expanded.
Events: `--output-format stream-json` prints `system` (init, names the model), `user`, `assistant`,
`tool_call` (`started` / `completed`; the call is keyed by its kind, e.g. `mcpToolCall`, `shellToolCall`)
and a final `result`; newer builds put `usage` (camelCase token counts) on it. No cost: price table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, NonNegativeInt

from .base import (
    MALFORMED,
    HeadlessSpec,
    McpServer,
    SessionUsage,
    StdioServer,
    ToolCall,
    apply_final,
    check_server_name,
    json_events,
)

NAME = "cursor"
BINARY = "agent"
INSTALL_HINT = "install Cursor's agent CLI (`curl https://cursor.com/install -fsS | bash`); it is not on npm"
CONFIG_FORMAT = "json"


def config_path(home: Path, workspace: Path) -> Path:
    """Cursor reads MCP servers from the workspace's `.cursor/mcp.json` (and the user's ~/.cursor)."""
    return workspace / ".cursor" / "mcp.json"


def mcp_config(server: McpServer, name: str = "crucible") -> str:
    entry: dict[str, Any]
    if isinstance(server, StdioServer):
        entry = {"type": "stdio", "command": server.command, "args": server.args, "env": server.env}
    else:
        entry = {"url": server.url}
        if server.token_env:
            entry["headers"] = {"Authorization": f"Bearer ${{env:{server.token_env}}}"}
    return json.dumps({"mcpServers": {check_server_name(name): entry}}, indent=2) + "\n"


def session_env(home: Path) -> dict[str, str]:
    return {}


def headless_command(spec: HeadlessSpec) -> list[str]:
    """Cursor has no allow-list flag for MCP tools: `--approve-mcps` trusts the configured servers and
    `--force` runs every tool without asking; nor a budget flag: the harness's wall-clock limit bounds it."""
    cmd = [spec.binary, "-p", "--output-format", "stream-json", "--force", "--approve-mcps",
           "--workspace", str(spec.workspace)]
    if spec.model:
        cmd += ["--model", spec.model]
    return [*cmd, spec.prompt]


class _Usage(BaseModel):
    input_tokens: NonNegativeInt = Field(0, alias="inputTokens")
    output_tokens: NonNegativeInt = Field(0, alias="outputTokens")
    cache_read_tokens: NonNegativeInt = Field(0, alias="cacheReadTokens")
    cache_write_tokens: NonNegativeInt = Field(0, alias="cacheWriteTokens")


def _tool_call(call: dict[str, Any]) -> ToolCall:
    """`{"mcpToolCall": {"args": {"providerIdentifier", "toolName", ...}, "result": ...}}` and the like."""
    kind, body = next(iter(call.items()), ("unknown", {}))
    body = body if isinstance(body, dict) else {}
    args: dict[str, Any] = body["args"] if isinstance(body.get("args"), dict) else {}
    result = body.get("result")
    ok = None if result is None else isinstance(result, dict) and "success" in result
    if kind == "mcpToolCall":
        server = args.get("providerIdentifier")
        name = args.get("toolName") or args.get("name") or "?"
        # Some builds name the tool `<server>-<tool>`.
        if server and name.startswith(f"{server}-"):
            name = name[len(server) + 1:]
        if isinstance(result, dict) and isinstance(result.get("success"), dict):
            ok = not result["success"].get("isError", False)
        return ToolCall(name=name, server=server, ok=ok)
    return ToolCall(name=kind.removesuffix("ToolCall"), ok=ok)


def parse_events(lines: Iterable[str], model: str | None = None) -> SessionUsage:
    """`model` prices the run when the stream names none (the init event does, unless it says `Auto`)."""
    usage = SessionUsage(client=NAME, model=model)
    model_calls: set[str] = set()
    for event in json_events(lines, usage):
        try:
            kind = event.get("type")
            if event.get("model_call_id"):
                model_calls.add(event["model_call_id"])  # one per model call that led to tool calls
            if kind == "system" and event.get("subtype") == "init":
                stream_model = event.get("model")
                if stream_model and stream_model.lower() != "auto":
                    usage.model = stream_model
            elif kind == "tool_call" and event.get("subtype") == "completed":
                usage.tool_calls.append(_tool_call(event.get("tool_call") or {}))
            elif kind == "result":
                u = _Usage.model_validate(event.get("usage") or {})
                apply_final(usage, turns=len(model_calls) + 1,  # the final answer has no model_call_id
                            input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                            cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens, cost_usd=None)
                usage.duration_ms = event.get("duration_ms")
                usage.status = "error" if event.get("is_error") or event.get("subtype") != "success" else "success"
                usage.detail = None if usage.status == "success" else event.get("subtype") or event.get("result")
        except MALFORMED:  # a field of the wrong type: not the client's writing (SessionUsage.foreign_events)
            usage.foreign_events += 1
    return usage.priced()
