"""The `api` agent: a small tool-calling loop against any OpenAI-compatible Chat Completions endpoint.

    CRUCIBLE_API_BASE_URL   e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1 (vLLM), ...
    CRUCIBLE_API_KEY        sent as `Authorization: Bearer ...`

    list the MCP tools (a real MCP client on ctx.mcp_url, bearer token) + read_file / write_file
      └─ loop: POST {base}/chat/completions (messages, tools) ──▶ usage, cost (price table)
               no tool calls ──▶ finished;  each tool call ──▶ MCP server or a workspace file ──▶ `tool` message
         until: a message without tool calls, the turn limit, the budget, the time limit, or cancel

It runs inside the harness's process (there is no CLI to sandbox): its only reach into the machine is the
two file tools, confined to the workspace, and the MCP tools. Every response and tool call is written to
ctx.events_path, one JSON object a line.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field, ValidationError

from ..clients import SessionUsage, model_price
from ..models import RunConfig, SessionEnd
from . import AgentResult, AgentUnavailable, SessionContext
from .process import to_usage

BASE_URL_ENV = "CRUCIBLE_API_BASE_URL"
KEY_ENV = "CRUCIBLE_API_KEY"
MAX_TURNS = 100
"""Model calls per session: a loop that never stops calling tools ends as turn_limit."""
MAX_FILE_CHARS = 200_000
RETRY_STATUS = {429, 500, 502, 503, 504}
RETRIES = 3
SYSTEM_PROMPT = ("You are optimizing a GPU kernel. Your workspace is {workspace}; read and write its files with "
                 "read_file and write_file (paths relative to it). Compile, test, profile and submit with the "
                 "crucible tools. Submit your best kernel before you stop.")

LOCAL_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file of the workspace.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string",
                       "description": "Relative to the workspace, e.g. kernel.py"}}, "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file", "description": "Write (create or replace) a text file of the workspace.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Relative to the workspace, e.g. kernel.py"},
            "content": {"type": "string", "description": "The file's whole new content"}},
            "required": ["path", "content"]}}},
]


class FunctionCall(BaseModel):
    name: str
    arguments: str = "{}"


class ChatToolCall(BaseModel):
    id: str
    type: str = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    role: str = "assistant"
    content: str | None = None
    tool_calls: list[ChatToolCall] | None = None


class Choice(BaseModel):
    message: ChatMessage
    finish_reason: str | None = None


class PromptDetails(BaseModel):
    cached_tokens: int = 0


class ChatUsage(BaseModel):
    prompt_tokens: int = 0
    """Includes cached_tokens."""
    completion_tokens: int = 0
    prompt_tokens_details: PromptDetails | None = None


class ChatResponse(BaseModel):
    choices: list[Choice] = Field(min_length=1)
    usage: ChatUsage | None = None


class _End(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """Ends the loop with this SessionEnd."""

    def __init__(self, end: SessionEnd) -> None:
        super().__init__(end.message)
        self.end = end


def confined(workspace: Path, path: str) -> Path:
    """`path` inside the workspace (symlinks resolved), or ValueError: the agent may not leave it."""
    root = workspace.resolve()
    target = (root / path).resolve()
    if target != root and not target.is_relative_to(root):
        raise ValueError(f"{path!r} is outside the workspace; use a path relative to it, e.g. kernel.py")
    return target


def read_file(workspace: Path, path: str) -> str:
    target = confined(workspace, path)
    text = target.read_text(errors="replace")
    return text if len(text) <= MAX_FILE_CHARS else text[:MAX_FILE_CHARS] + "\n[... truncated]"


def write_file(workspace: Path, path: str, content: str) -> str:
    target = confined(workspace, path)
    if target == workspace.resolve():
        raise ValueError("give a file name, not the workspace itself")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return f"wrote {len(content)} characters to {target.relative_to(workspace.resolve())}"


def _mcp_tool_text(result: Any) -> str:
    if result.structured_content is not None:
        text = json.dumps(result.structured_content, separators=(",", ":"))
    else:
        text = "\n".join(getattr(c, "text", "") for c in result.content)
    return f"ERROR: {text}" if result.is_error else text


class ApiAgent:
    name = "api"

    def __init__(self, max_turns: int = MAX_TURNS) -> None:
        self.max_turns = max_turns

    def sandbox_tools(self) -> list[Path]:
        """Nothing: the loop runs in the harness's process, not in the sandbox prefix."""
        return []

    def preflight(self, config: RunConfig) -> None:
        missing = [k for k in (BASE_URL_ENV, KEY_ENV) if not os.environ.get(k)]
        if missing:
            raise AgentUnavailable(f"api: set {' and '.join(missing)} (an OpenAI-compatible endpoint, e.g. "
                                   f"{BASE_URL_ENV}=https://api.openai.com/v1, and its API key)")
        if not config.model:
            raise AgentUnavailable("api: pass --model, the model name the endpoint serves")
        if config.budget_usd is not None and model_price(config.model) is None:
            raise AgentUnavailable(f"api: a dollar budget needs the price of {config.model}: add it to "
                                   "harness/clients/prices.toml, or drop --budget-usd")

    def run(self, ctx: SessionContext, cancel: threading.Event) -> AgentResult:
        started = time.monotonic()
        usage = SessionUsage(client=self.name, model=ctx.config.model)
        ctx.events_path.parent.mkdir(parents=True, exist_ok=True)
        with open(ctx.events_path, "w", encoding="utf-8") as log:
            end = anyio.run(self._session, ctx, cancel, usage, log)
            _log(log, {"type": "end", **end.model_dump()})
        return AgentResult(end=end, usage=to_usage(usage.priced(), time.monotonic() - started))

    async def _session(self, ctx: SessionContext, cancel: threading.Event, usage: SessionUsage,
                       log: TextIO) -> SessionEnd:
        ends: list[SessionEnd] = []
        async with anyio.create_task_group() as tg:
            async def watch_cancel() -> None:
                while not cancel.is_set():
                    await anyio.sleep(0.1)
                ends.append(SessionEnd(reason="infra_error", message="cancelled by the harness"))
                tg.cancel_scope.cancel()

            async def main() -> None:
                with anyio.move_on_after(ctx.time_limit_s) as scope:
                    ends.append(await self._loop(ctx, usage, log))
                if scope.cancelled_caught:
                    ends.append(SessionEnd(reason="time_limit",
                                           message=f"stopped at the time limit of {ctx.time_limit_s:.0f} s"))
                tg.cancel_scope.cancel()

            tg.start_soon(watch_cancel)
            tg.start_soon(main)
        return ends[0]

    async def _loop(self, ctx: SessionContext, usage: SessionUsage, log: TextIO) -> SessionEnd:
        mcp_http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ctx.token}"},
                                      timeout=httpx2.Timeout(30, read=None))
        chat = httpx2.AsyncClient(base_url=os.environ[BASE_URL_ENV].rstrip("/") + "/",
                                  headers={"Authorization": f"Bearer {os.environ[KEY_ENV]}"},
                                  timeout=httpx2.Timeout(30, read=600))
        async with mcp_http, chat:
            try:
                async with Client(streamable_http_client(ctx.mcp_url, http_client=mcp_http)) as mcp:
                    listed = (await mcp.list_tools()).tools
                    return await self._converse(ctx, usage, log, mcp, chat, listed)
            except (httpx2.TransportError, MCPError, ExceptionGroup) as exc:
                # The MCP client's task groups wrap a connection failure in an ExceptionGroup.
                cause = _find(exc, (httpx2.TransportError, MCPError))
                if cause is None:
                    raise
                return SessionEnd(reason="infra_error", message=f"the crucible MCP server at {ctx.mcp_url} "
                                  f"failed: {type(cause).__name__}: {cause}")

    async def _converse(self, ctx: SessionContext, usage: SessionUsage, log: TextIO, mcp: Client,
                        chat: httpx2.AsyncClient, listed: list[Any]) -> SessionEnd:
        mcp_names = {t.name for t in listed}
        tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                   "parameters": t.input_schema}} for t in listed] + LOCAL_TOOLS
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT.format(workspace=ctx.workspace)},
            {"role": "user", "content": ctx.prompt}]
        while True:
            if usage.turns >= self.max_turns:
                return SessionEnd(reason="turn_limit", message=f"{self.max_turns} model calls without finishing")
            try:
                reply = await self._complete(chat, ctx.config.model or "", messages, tools)
            except _End as stop:  # returned, not raised: it must not cross the MCP client's task groups
                return stop.end
            _log(log, {"type": "response", "turn": usage.turns + 1, "body": reply.model_dump(exclude_none=True)})
            _add_usage(usage, reply.usage)
            message = reply.choices[0].message
            turn: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                turn["tool_calls"] = [c.model_dump() for c in message.tool_calls]
            messages.append(turn)
            cost = usage.priced().cost_usd
            if ctx.budget_usd is not None and cost is not None and cost > ctx.budget_usd:
                return SessionEnd(reason="budget", message=f"cost {cost:.4f} USD passed the budget {ctx.budget_usd}")
            if not message.tool_calls:
                return SessionEnd(reason="finished")
            for call in message.tool_calls:
                text, ok = await self._call_tool(ctx.workspace, mcp, mcp_names, call)
                _log(log, {"type": "tool_call", "id": call.id, "name": call.function.name,
                           "arguments": call.function.arguments[:2000], "ok": ok, "result": text[:2000]})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})

    async def _complete(self, chat: httpx2.AsyncClient, model: str, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]]) -> ChatResponse:
        body = {"model": model, "messages": messages, "tools": tools}
        for attempt in range(RETRIES + 1):
            try:
                response = await chat.post("chat/completions", json=body)
            except httpx2.TransportError as exc:
                if attempt == RETRIES:
                    raise _End(SessionEnd(reason="infra_error", message=f"the model endpoint is unreachable: "
                                          f"{type(exc).__name__}: {exc}")) from None
                await anyio.sleep(2**attempt)
                continue
            if response.status_code in RETRY_STATUS and attempt < RETRIES:
                await anyio.sleep(2**attempt)
                continue
            if response.status_code != 200:
                reason = "infra_error" if response.status_code >= 500 else "crash"
                raise _End(SessionEnd(reason=reason, message=f"the model endpoint answered "
                                      f"{response.status_code}: {response.text[:500]}"))
            try:
                return ChatResponse.model_validate_json(response.content)
            except ValidationError as exc:
                raise _End(SessionEnd(reason="crash", message=f"the model endpoint's answer is not a chat "
                                      f"completion: {exc.errors()[0]['msg']}: {response.text[:300]}")) from None
        raise AssertionError("unreachable")

    async def _call_tool(self, workspace: Path, mcp: Client, mcp_names: set[str],
                         call: ChatToolCall) -> tuple[str, bool]:
        """The tool's answer as the model will read it, and whether it succeeded. Anything the model got
        wrong (unknown tool, bad JSON, a path outside the workspace) comes back as an error it can fix."""
        name = call.function.name
        try:
            args = json.loads(call.function.arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"ERROR: the arguments are not valid JSON ({exc}); send a JSON object", False
        if not isinstance(args, dict):
            return "ERROR: the arguments must be a JSON object", False
        if name in mcp_names:
            result = await mcp.call_tool(name, args)
            return _mcp_tool_text(result), not result.is_error
        try:
            if name == "read_file":
                return read_file(workspace, str(args["path"])), True
            if name == "write_file":
                return write_file(workspace, str(args["path"]), str(args["content"])), True
        except KeyError as exc:
            return f"ERROR: missing argument {exc}", False
        except (ValueError, OSError) as exc:
            return f"ERROR: {exc}", False
        return f"ERROR: no tool {name!r}; the tools are {', '.join(sorted(mcp_names | {'read_file', 'write_file'}))}", False


def _find(exc: BaseException, kinds: tuple[type[BaseException], ...]) -> BaseException | None:
    """The first exception of `kinds` in `exc`, looking inside exception groups."""
    if isinstance(exc, kinds):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kinds)
            if found is not None:
                return found
    return None


def _add_usage(usage: SessionUsage, u: ChatUsage | None) -> None:
    usage.turns += 1
    if u is None:
        return
    cached = u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0
    usage.input_tokens += max(0, u.prompt_tokens - cached)
    usage.cache_read_tokens += cached
    usage.output_tokens += u.completion_tokens
    usage.status = "success"


def _log(log: TextIO, event: dict[str, Any]) -> None:
    log.write(json.dumps(event, default=str) + "\n")
    log.flush()


AGENT = ApiAgent()
