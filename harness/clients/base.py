"""What every agent client module shares: where the MCP server is, how a headless run is asked for, and
what a finished run cost (`SessionUsage`), plus the price table used when a CLI reports no cost."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tomllib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

TOOL_NAMES = ("get_task", "compile", "run_tests", "profile", "submit")
"""The crucible MCP server's tools, in the order an agent usually needs them."""

DEFAULT_TOKEN_ENV = "CRUCIBLE_MCP_TOKEN"

# What a stdio server needs from the caller's environment. Codex starts MCP servers with a filtered
# environment (HOME, PATH, LANG, ... only), so these are written into the config explicitly.
PASS_ENV = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
            "CUDA_HOME", "ROCM_PATH", "TRITON_CACHE_DIR")
PASS_ENV_PREFIX = "CRUCIBLE_"

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ClientError(Exception):
    """A client cannot be used as asked (missing binary, bad argument); the message says what to do."""


class StdioServer(BaseModel):
    """An MCP server the client starts itself and talks to over stdin/stdout."""

    transport: Literal["stdio"] = "stdio"
    command: str
    """Absolute path of the executable."""
    args: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    """Variables the server needs; never a secret (the config files are readable by the agent)."""


class HttpServer(BaseModel):
    """An MCP server already listening (streamable HTTP), guarded by a bearer token."""

    transport: Literal["http"] = "http"
    url: str
    token_env: str | None = DEFAULT_TOKEN_ENV
    """Name of the environment variable that holds the token; configs refer to it, never to its value."""


McpServer = StdioServer | HttpServer


def check_server_name(name: str) -> str:
    # Clients build tool names like mcp__<name>__<tool>: anything else breaks them or the allow-lists.
    if not _SERVER_NAME.match(name):
        raise ClientError(f"server name {name!r}: use letters, digits, '_' or '-' only")
    return name


def crucible_command() -> list[str]:
    """How to start this crucible: the `crucible` script of this environment, else `python -m`."""
    # Not resolved: a venv's python is a symlink, and resolving it would leave the venv.
    script = Path(sys.executable).absolute().parent / "crucible"
    if script.is_file():
        return [str(script)]
    return [str(Path(sys.executable).absolute()), "-m", "crucible.harness.cli"]


def server_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `environ` that a stdio server needs, never the MCP token."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items()
           if (k in PASS_ENV or k.startswith(PASS_ENV_PREFIX)) and k != DEFAULT_TOKEN_ENV}
    for key in ("CRUCIBLE_TASKS", "CRUCIBLE_CACHE"):  # the server may run in another folder
        if key in env:
            env[key] = str(Path(env[key]).absolute())
    return dict(sorted(env.items()))


def crucible_server(task: str, workspace: Path, *, transport: Literal["stdio", "http"] = "stdio",
                    url: str | None = None, token_env: str | None = DEFAULT_TOKEN_ENV,
                    environ: Mapping[str, str] | None = None) -> McpServer:
    """The crucible server for one task and workspace, as a client should reach it."""
    if transport == "http":
        if not url:
            raise ClientError("--transport http needs --url, e.g. http://127.0.0.1:PORT/mcp "
                              "(the address `crucible serve --transport http` listens on)")
        return HttpServer(url=url, token_env=token_env)
    if url:
        raise ClientError("--url is for --transport http; a stdio server is started by the client")
    args = ["serve", "--task", task, "--workspace", str(workspace.absolute())]
    cmd = crucible_command()
    return StdioServer(command=cmd[0], args=[*cmd[1:], *args], env=server_env(environ))


class HeadlessSpec(BaseModel):
    """One headless agent run, in terms every client understands."""

    binary: str
    """The CLI to run: a name on PATH or an absolute path (see `find_binary`)."""
    prompt: str
    workspace: Path
    """The folder the agent works in."""
    mcp_config: Path | None = None
    """The config file written from `mcp_config()`; only clients that take it as a flag use it."""
    model: str | None = None
    server_name: str = "crucible"
    tools: tuple[str, ...] = TOOL_NAMES
    """The MCP tools the agent may call without asking."""
    builtin_tools: tuple[str, ...] | None = None
    """The client's own tools to allow (file edits, shell); None: the client module's default."""
    max_budget_usd: float | None = None
    max_turns: int | None = None


class ToolCall(BaseModel):
    """One tool call the agent made, as its client reported it."""

    name: str
    """The tool's own name (`compile`), or the client's name for a built-in tool (`Bash`)."""
    server: str | None = None
    """The MCP server, or None for a built-in tool."""
    ok: bool | None = None
    """False when the tool returned an error; None when the stream never said."""


class SessionUsage(BaseModel):
    """What one headless run used and how it ended, parsed from the client's event stream."""

    client: str
    model: str | None = None
    turns: int = 0
    """Model turns as the client counts them (Codex: one per prompt; see its module)."""
    input_tokens: int = 0
    """Input tokens not read from the cache."""
    output_tokens: int = 0
    """Output tokens, reasoning included."""
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int | None = None
    """Part of output_tokens, where the client reports it."""
    cost_usd: float | None = None
    cost_source: Literal["cli", "price_table", "unknown"] = "unknown"
    """`cli`: the CLI's own figure; `price_table`: tokens x harness/clients/prices.toml; `unknown`: neither."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    mcp_servers: dict[str, str] = Field(default_factory=dict)
    """Server -> the client's word for its state (Claude: `connected`, `failed`, ...), where the stream
    says it. A failed server does not fail the run: the agent just goes on without its tools."""
    status: Literal["success", "error", "budget_exceeded", "max_turns", "incomplete"] = "incomplete"
    """`incomplete`: the stream ended without a final event (killed, crashed)."""
    detail: str | None = None
    """The client's own word for the ending (e.g. Claude's `subtype`) or its error message."""
    duration_ms: int | None = None
    unparsed_lines: int = 0
    """Lines that were not JSON events (warnings a CLI printed on stdout)."""
    final_events: int = 0
    """Final events (Claude's and Cursor's `result`) in the stream; the client writes one."""
    foreign_events: int = 0
    """Events the client cannot have written: a final event after the first, a negative count. An agent's
    shell can write into the CLI's stdout (/proc/<pid>/fd/1) to claim a cheaper session; every total is
    then the largest any event claimed, so a forged event never lowers one, and a person should look."""

    @property
    def calls_by_tool(self) -> dict[str, int]:
        return dict(Counter(c.name for c in self.tool_calls))

    def priced(self) -> SessionUsage:
        """This usage with a cost from the price table when the CLI gave none."""
        if self.cost_usd is not None or self.model is None:
            return self
        price = model_price(self.model)
        if price is None:
            return self
        return self.model_copy(update={"cost_usd": price.cost(self), "cost_source": "price_table"})


class ModelPrice(BaseModel):
    """List prices in USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float | None = None
    """None: writing the cache costs what input does (OpenAI charges no surcharge)."""
    aliases: list[str] = Field(default_factory=list)

    def cost(self, u: SessionUsage) -> float:
        return (u.input_tokens * self.input + u.output_tokens * self.output
                + u.cache_read_tokens * self.cache_read
                + u.cache_write_tokens * (self.input if self.cache_write is None else self.cache_write)) / 1e6


class PriceTable(BaseModel):
    as_of: str
    models: dict[str, ModelPrice]


@cache
def price_table() -> PriceTable:
    text = files("crucible.harness.clients").joinpath("prices.toml").read_text()
    return PriceTable.model_validate(tomllib.loads(text))


def model_price(model: str) -> ModelPrice | None:
    """The price of a model by name or alias; a dated id (`claude-sonnet-4-5-20250929`) matches its prefix."""
    want = model.lower()
    names: dict[str, ModelPrice] = {}
    for name, price in price_table().models.items():
        for n in (name, *price.aliases):
            names[n.lower()] = price
    if want in names:
        return names[want]
    prefixes = [n for n in names if want.startswith(n + "-")]
    return names[max(prefixes, key=len)] if prefixes else None


def npm_clients_bin() -> Path:
    """Where scripts/install-agent-clients.sh puts the CLIs: `$CRUCIBLE_NPM_CLIENTS` (CI keeps it outside
    the clone, so it survives between runs), else `.cache/npm-clients` of the source checkout."""
    root = os.environ.get("CRUCIBLE_NPM_CLIENTS") or Path(__file__).resolve().parents[2] / ".cache" / "npm-clients"
    return Path(root) / "node_modules" / ".bin"


def find_binary(binary: str, install_hint: str) -> str:
    """The CLI's absolute path: on PATH, else in the install script's cache folder."""
    found = shutil.which(binary) or shutil.which(binary, path=str(npm_clients_bin()))
    if found is None:
        raise ClientError(f"`{binary}` is not installed: {install_hint}")
    return str(Path(found).absolute())


MALFORMED = (AttributeError, TypeError, ValueError, KeyError, ValidationError)
"""What reading an event whose fields have the wrong types raises (a string where the client writes an
object, a list where it writes a name): an event someone else wrote, never a reason to fail the session."""


def apply_final(usage: SessionUsage, *, turns: int, input_tokens: int, output_tokens: int,
                cache_read_tokens: int, cache_write_tokens: int, cost_usd: float | None) -> None:
    """A final event's totals: the first sets them, a further one (foreign) can only raise them."""
    usage.final_events += 1
    usage.foreign_events += usage.final_events > 1
    usage.turns = max(usage.turns, turns)
    usage.input_tokens = max(usage.input_tokens, input_tokens)
    usage.output_tokens = max(usage.output_tokens, output_tokens)
    usage.cache_read_tokens = max(usage.cache_read_tokens, cache_read_tokens)
    usage.cache_write_tokens = max(usage.cache_write_tokens, cache_write_tokens)
    if cost_usd is not None:
        usage.cost_usd = max(usage.cost_usd or 0.0, cost_usd)
        usage.cost_source = "cli"


def json_events(lines: Iterable[str], usage: SessionUsage) -> Iterator[dict]:
    """The JSON objects of a client's event stream; other lines (warnings printed on stdout) are counted in
    `usage.unparsed_lines` and skipped."""
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            usage.unparsed_lines += bool(line.strip())
            continue
        if not isinstance(event, dict):
            usage.unparsed_lines += 1
            continue
        yield event
