"""`crucible export RUN --format csv|jsonl|parquet|atif [--out PATH]`: a run's sessions for other tools.

    store.db ──session_rows──▶ [SessionExport] ──▶ sessions.csv | sessions.jsonl | sessions.parquet
    store.db + sessions/<id>/events.jsonl ──trajectory──▶ atif/<session id>.json   (one per session, ATIF-v1.7)

Default output: `RUN/export/sessions.<format>`, or the folder `RUN/export/atif/`; `--out -` prints csv or
jsonl. Everything comes from the run folder (the store's typed readers, harness/store.py, and the session
folders); nothing is re-run.

Tables: one row per session, pending and failed ones included (their figures empty). The columns follow the
public KernelBench-v3 agent-run dataset (huggingface.co/datasets/Infatoshi/kernelbench-v3-runs, the
`results.csv` schema in its README, 2026-02 sweep) where one of ours means the same, then ours:

    KernelBench-v3        here                  how ours differs
    model                 model                 the model the agent ran; for `scripted`, its plan
    gpu                   gpu                   runs.device: the GPU's name, or `cpu: <model>` on the cpu backend
    level (int 1-4)       category              no difficulty levels here: the task id's prefix (triton2triton, ...)
    problem               problem               the task id
    compiled              compiled
    correct               correct               on the visible configs; `generalizes` is the hidden ones
    speedup               speedup               geometric mean over all configs, empty unless the verdict is pass
    ref_ms, sol_ms        (none)                per-config times are in the session's scoring.json only
    turns                 turns                 model turns as the agent's client counts them
    total_tokens          total_tokens          input + cache read + cache write + output: every token read or written
    estimated_cost_usd    estimated_cost_usd    Usage.cost_usd; `cost_source` says where it came from
    op_type, precision_used, baseline_link   (none)
    baseline_type         baseline_type         what the speedup is against: eager (torch2X tasks) or baseline
    run_dir               run_dir               this run folder
    solution_link         solution_link         the frozen copy of the session's last submission

Ours after those: run_id, session_id, agent, repeat, state, end_reason, verdict, generalizes, speedup_visible,
speedup_hidden, peak_fraction, sol_fraction, flags, the four token counts, cost_source, wall_s, tool_calls, backend,
hip_on_cuda, evaluator_version, submission_hash, started_at, finished_at (SessionExport documents each). CSV cells: empty
for null, JSON for flags and tool_calls; JSONL and Parquet keep the types (Parquet: list<string>,
map<string, int64>). Parquet needs pyarrow: `pip install 'kernel-crucible[parquet]'`.

ATIF: the Agent Trajectory Interchange Format of Harbor's RFC 0001 (harbor-framework/harbor,
rfcs/0001-trajectory-format.md), version ATIF-v1.7 (April 2026). Its required fields: schema_version;
agent.name, agent.version; steps[].step_id (1, 2, ...), .source (system | user | agent), .message;
tool_calls[].tool_call_id, .function_name, .arguments; observation.results. Built per agent from the raw
events its client wrote (harness/clients/*.py parse the same streams for usage):

    scripted      each plan step an agent step with llm_call_count 0 (no model: deterministic dispatch)
    claude-code   one step per model message, its tool calls and their results; per-step input tokens (the
                  stream's output counts are placeholders: the session's total is in final_metrics)
    codex         one step per item (message, reasoning, tool call); tokens only per session
    cursor        one step per model call (model_call_id), its tool calls; tokens only per session
    api           the system prompt, then one step per chat completion, per-step tokens and priced cost

The first user step is the harness's prompt, rebuilt from the task folder only when its digest still matches
the session's digests.json (otherwise the message is empty and `extra` says why). Calls to the crucible MCP
server carry the server's own record of the call (the store's tool_calls, from the ledger) under
`extra.ledger`, matched in order per tool; final_metrics come from the store's usage row (prompt tokens
include cached ones, as ATIF counts them), and root `extra.crucible` holds the session's score.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import types
import typing
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .models import Usage
from .report import category_of
from .store import STORE_FILE, RunRow, SessionRow, Store, StoreError, ToolCallRow

Format = Literal["csv", "jsonl", "parquet", "atif"]
ATIF_VERSION = "ATIF-v1.7"
PARQUET_HINT = "pip install 'kernel-crucible[parquet]'"
API_RESULT_CHARS = 2000
"""The api agent's events keep this much of each tool result (harness/agents/api.py)."""


class ExportError(Exception):
    """The run cannot be exported as asked (no store, an optional package missing); the message says what
    to do."""


# ---------------------------------------------------------------- the table


class SessionExport(BaseModel):
    """One session as a row of the exported table. The first fields carry the KernelBench-v3 agent-run
    dataset's column names (see the module docstring for how each maps)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None
    """The model the agent ran; for the scripted agent its plan (solution, baseline, replay:FILE)."""
    gpu: str
    """The run's device: the GPU's name, or `cpu: <model>` on the cpu backend."""
    problem: str
    """The task id, `<category>/<slug>`."""
    compiled: bool | None
    """The last submission built. Empty until the session is scored."""
    correct: bool | None
    """Correct on the visible configs."""
    speedup: float | None
    """Geometric mean over all configs; empty unless the verdict is pass (a failure earns nothing)."""
    turns: int | None
    """Model turns as the agent's client counts them; empty until the session finished."""
    total_tokens: int | None
    """input + cache read + cache write + output tokens."""
    estimated_cost_usd: float | None
    """Per session; empty when unknown (see cost_source)."""
    baseline_type: str | None
    """What the speedup is measured against: `eager` (torch2X tasks) or `baseline` (the task's baseline)."""
    run_dir: str
    """The run folder."""
    solution_link: str | None
    """The frozen copy of the last submission (in the session folder); empty without a submission."""

    run_id: str
    session_id: str
    agent: str
    category: str
    """The task id's prefix (triton2triton, cuda2cuda, torch2triton, ...): KernelBench's `level` has no
    counterpart here."""
    repeat: int
    state: str
    """pending, running, done, infra_error."""
    end_reason: str | None
    """How the agent's part ended: finished, budget, time_limit, turn_limit, resource_limit, crash, infra_error."""
    verdict: str | None
    """pass, incorrect, compile_error, no_submission, timeout, flagged, infra_error; empty until scored."""
    generalizes: bool | None
    """Correct on the hidden configs; empty when none could run on this backend."""
    speedup_visible: float | None
    speedup_hidden: float | None
    peak_fraction: float | None
    """The fraction of the device's measured roofline reached (geometric mean over configs), where known."""
    sol_fraction: float | None
    """The speed-of-light fraction: the datasheet limit's time over the kernel's (geometric mean over configs)."""
    flags: list[str]
    """Integrity flags with their evidence, and audit notes (`speedup>...`)."""
    input_tokens: int | None
    """Input tokens not read from the cache."""
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    cost_source: str | None
    """cli (the agent CLI's own figure), price_table, unknown, none (no model: the scripted agent)."""
    wall_s: float | None
    """The agent's wall time, measured by the harness."""
    tool_calls: dict[str, int]
    """Calls by tool, from the MCP server's ledger."""
    backend: str
    """cpu, cuda, rocm: where it was scored."""
    hip_on_cuda: bool | None
    """A HIP task's kernel ran as HIP on CUDA (an NVIDIA GPU) rather than on an AMD GPU: by default, or by its
    `[hardware] fallback` (the store's placement_note says which). Empty: not a HIP task, not scored, or
    scored before this was recorded (the store's scores.hip_on_cuda)."""
    evaluator_version: str
    """The evaluator that scored it; the run's when it is not scored yet."""
    submission_hash: str | None
    """Content hash of the scored submission."""
    started_at: str | None
    finished_at: str | None


def _row(run_dir: Path, run: RunRow, session: SessionRow, store: Store) -> SessionExport:
    scored = store.score(session.id)
    score = scored.score if scored else None
    usage = store.usage(session.id)
    submissions = store.submissions(session.id)

    def scored_field(name: str) -> Any:
        return getattr(score, name) if score else None

    return SessionExport(
        model=session.model, gpu=run.device, problem=session.task,
        compiled=scored_field("compiled"), correct=scored_field("correct"), speedup=scored_field("speedup"),
        turns=usage.turns if usage else None,
        total_tokens=(usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
                      + usage.output_tokens) if usage else None,
        estimated_cost_usd=usage.cost_usd if usage else None, baseline_type=scored_field("speedup_against"),
        run_dir=str(run_dir.resolve()), solution_link=submissions[-1].path if submissions else None,
        run_id=run.id, session_id=session.id, agent=session.agent, category=category_of(session.task),
        repeat=session.repeat, state=session.state, end_reason=session.end_reason,
        verdict=scored_field("verdict"), generalizes=scored_field("generalizes"),
        speedup_visible=scored_field("speedup_visible"), speedup_hidden=scored_field("speedup_hidden"),
        peak_fraction=scored_field("peak_fraction"), sol_fraction=scored_field("sol_fraction"), flags=score.flags if score else [],
        input_tokens=usage.input_tokens if usage else None, output_tokens=usage.output_tokens if usage else None,
        cache_read_tokens=usage.cache_read_tokens if usage else None,
        cache_write_tokens=usage.cache_write_tokens if usage else None,
        cost_source=usage.cost_source if usage else None, wall_s=usage.wall_s if usage else None,
        tool_calls=usage.tool_calls if usage else {}, backend=scored.backend if scored else run.backend,
        hip_on_cuda=scored.placement.hip_on_cuda if scored and scored.placement else None,
        evaluator_version=scored_field("evaluator_version") or run.evaluator_version,
        submission_hash=scored_field("submission_hash"),
        started_at=session.started_at, finished_at=session.finished_at)


def open_store(run_dir: Path) -> tuple[Store, RunRow]:
    """The run folder's store and its run row, or ExportError saying what is wrong."""
    path = run_dir / STORE_FILE
    if not path.is_file():  # Store() would create an empty one
        raise ExportError(f"no {STORE_FILE} in {run_dir}: give a `crucible run` folder (the one its --out "
                          "named, or crucible-runs/<run id>)")
    store = Store(path, read_only=True)  # an export never migrates or writes the store
    try:
        run = store.run()
    except StoreError as exc:
        store.close()
        raise ExportError(str(exc)) from None
    if run is None:
        store.close()
        raise ExportError(f"{path} holds no run: the run never started; run it again with `crucible run`")
    return store, run


def session_rows(run_dir: Path) -> list[SessionExport]:
    """One row per session of the run in `run_dir`, in the store's order."""
    store, run = open_store(run_dir)
    try:
        return [_row(run_dir, run, s, store) for s in store.sessions()]
    finally:
        store.close()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def write_csv(rows: list[SessionExport], out: typing.TextIO) -> None:
    writer = csv.DictWriter(out, fieldnames=list(SessionExport.model_fields), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(v) for k, v in row.model_dump().items()})


def write_jsonl(rows: list[SessionExport], out: typing.TextIO) -> None:
    for row in rows:
        out.write(row.model_dump_json() + "\n")


def parquet_schema(pa: Any) -> Any:
    """The Parquet columns, typed from SessionExport's fields (an all-empty column keeps its type)."""
    scalars = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}

    def arrow(annotation: Any) -> Any:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        origin = typing.get_origin(annotation)
        if origin in (typing.Union, types.UnionType):
            return arrow(args[0])
        if origin is list:
            return pa.list_(arrow(args[0]))
        if origin is dict:
            return pa.map_(arrow(args[0]), arrow(args[1]))
        return scalars[annotation]

    return pa.schema([(name, arrow(f.annotation)) for name, f in SessionExport.model_fields.items()])


def write_parquet(rows: list[SessionExport], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError(f"--format parquet needs pyarrow, which is not installed: {PARQUET_HINT}") from None
    schema = parquet_schema(pa)
    data = [r.model_dump() for r in rows]
    for d in data:  # a map column takes (key, value) pairs
        d["tool_calls"] = list(d["tool_calls"].items())
    pq.write_table(pa.Table.from_pylist(data, schema=schema), str(path))


# ---------------------------------------------------------------- ATIF (Harbor RFC 0001, v1.7)


class Atif(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifAgent(Atif):
    name: str
    """The agent system: scripted, claude-code, codex, cursor, api."""
    version: str
    """The client's version where its events say it (Claude Code), crucible's for its own agents, else
    `unknown`."""
    model_name: str | None = None
    extra: dict[str, Any] | None = None


class AtifToolCall(Atif):
    tool_call_id: str
    function_name: str
    """The name the model called (Claude Code: `mcp__crucible__compile`), or the client's name for a
    built-in tool."""
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None
    """`ledger`: the crucible server's record of this call; `server`: the MCP server, where the name lacks it."""


class AtifResult(Atif):
    source_call_id: str | None = None
    content: str | None = None
    extra: dict[str, Any] | None = None
    """`is_error`: the tool answered with an error."""


class AtifObservation(Atif):
    results: list[AtifResult]


class AtifMetrics(Atif):
    prompt_tokens: int | None = None
    """Every input token of the call, cached ones included (ATIF's accounting, unlike Usage.input_tokens)."""
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    """The part of prompt_tokens read from the cache."""
    cost_usd: float | None = None
    extra: dict[str, Any] | None = None


class AtifStep(Atif):
    step_id: int
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    message: str
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    llm_call_count: int | None = None
    """0: a step without a model (the scripted agent); None: the client does not say."""
    extra: dict[str, Any] | None = None


class AtifFinalMetrics(Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class Trajectory(Atif):
    """One session's ATIF document."""

    schema_version: Literal["ATIF-v1.7"] = ATIF_VERSION
    session_id: str
    agent: AtifAgent
    steps: list[AtifStep]
    notes: str | None = None
    final_metrics: AtifFinalMetrics | None = None
    extra: dict[str, Any] | None = None


@dataclass
class Turn:
    """A step being assembled from a client's events, numbered once all are read."""

    source: Literal["system", "user", "agent"] = "agent"
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[AtifToolCall] = field(default_factory=list)
    results: list[AtifResult] = field(default_factory=list)
    mcp: dict[str, str] = field(default_factory=dict)
    """tool_call_id -> the crucible tool it called, for matching the ledger."""
    metrics: AtifMetrics | None = None
    model_name: str | None = None
    timestamp: str | None = None
    llm_call_count: int | None = None
    extra: dict[str, Any] | None = None

    def call(self, call_id: str, name: str, arguments: Any, crucible_tool: str | None = None,
             extra: dict[str, Any] | None = None) -> None:
        args = arguments if isinstance(arguments, dict) else {"value": arguments}
        self.calls.append(AtifToolCall(tool_call_id=call_id, function_name=name, arguments=args, extra=extra))
        if crucible_tool:
            self.mcp[call_id] = crucible_tool

    def result(self, call_id: str | None, content: str, is_error: bool = False, **extra: Any) -> None:
        extra = {"is_error": True, **extra} if is_error else extra
        self.results.append(AtifResult(source_call_id=call_id, content=content, extra=extra or None))

    def step(self, step_id: int) -> AtifStep:
        agent = self.source == "agent"
        return AtifStep(
            step_id=step_id, source=self.source, timestamp=self.timestamp, message="\n".join(self.text),
            model_name=self.model_name if agent else None,
            reasoning_content="\n".join(self.reasoning) if agent and self.reasoning else None,
            tool_calls=self.calls or None, metrics=self.metrics if agent else None,
            observation=AtifObservation(results=self.results) if self.results else None,
            llm_call_count=self.llm_call_count, extra=self.extra)


@dataclass
class Parsed:
    """What a client's events say: the steps, and the agent's version and model where they name them."""

    turns: list[Turn] = field(default_factory=list)
    version: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class EventsContext:
    session: SessionRow
    crucible_version: str


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of an events file, and how many lines were not one (a CLI's warnings)."""
    events, stray = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            stray += bool(line.strip())
            continue
        if isinstance(event, dict):
            events.append(event)
        else:
            stray += 1
    return events, stray


def _text(content: Any) -> str:
    """A tool result's content as text: a string, or the text of its blocks (Claude, Codex, MCP shapes)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(c) for c in content)
    if isinstance(content, dict):
        for key in ("text", "content"):
            if key in content:
                return _text(content[key])
    return json.dumps(content)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds")


def parse_scripted(events: list[dict[str, Any]], ctx: EventsContext) -> Parsed:
    """Plan steps (`step`), each answered by `tool_result` or `tool_error` (harness/agents/scripted.py)."""
    started = datetime.fromisoformat(ctx.session.started_at) if ctx.session.started_at else None
    turns: dict[int, Turn] = {}
    for e in events:
        n, kind = e.get("n"), e.get("type")
        if kind == "step" and isinstance(n, int):
            turn = turns[n] = Turn(llm_call_count=0)
            if started is not None and isinstance(e.get("t"), int | float):
                turn.timestamp = _iso(started + timedelta(seconds=e["t"]))
            if "write" in e:
                turn.text.append(f"plan step {n}: write {e['write'].get('file')}")
                turn.call(f"step-{n}", "write", e["write"])
            elif "call" in e:
                tool = e["call"].get("tool", "?")
                turn.text.append(f"plan step {n}: call {tool}")
                turn.call(f"step-{n}", tool, e["call"].get("arguments") or {}, crucible_tool=tool)
        elif kind == "tool_result" and n in turns:
            text = "\n".join(e.get("text") or []) or json.dumps(e.get("structured_content"))
            turns[n].result(f"step-{n}", text, bool(e.get("is_error")))
        elif kind == "tool_error" and n in turns:
            turns[n].result(f"step-{n}", str(e.get("error", "")), True)
    return Parsed(turns=list(turns.values()), version=ctx.crucible_version)


def _mcp_name(name: str) -> str | None:
    """Claude Code's `mcp__<server>__<tool>` -> the tool, when the server is crucible's."""
    parts = name.split("__", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "mcp" and parts[1] == "crucible" else None


def parse_claude(events: list[dict[str, Any]], ctx: EventsContext) -> Parsed:
    """stream-json: one `assistant` event per content block, the blocks of one model message sharing its id
    and usage; `user` events carry the tool results (harness/clients/claude.py)."""
    parsed = Parsed()
    owner: dict[str, Turn] = {}
    turn, message_id = None, None
    for e in events:
        kind, message = e.get("type"), e.get("message") or {}
        if kind == "system" and e.get("subtype") == "init":
            parsed.version, parsed.model = e.get("claude_code_version"), e.get("model")
        elif kind == "assistant":
            if turn is None or message.get("id") is None or message.get("id") != message_id:
                turn = Turn(model_name=message.get("model"), llm_call_count=1)
                parsed.turns.append(turn)
                message_id = message.get("id")
            for block in message.get("content") or []:
                if block.get("type") == "text":
                    turn.text.append(block.get("text", ""))
                elif block.get("type") == "thinking":
                    turn.reasoning.append(block.get("thinking", ""))
                elif block.get("type") == "tool_use":
                    call_id = str(block.get("id", f"call-{len(owner)}"))
                    name = block.get("name", "?")
                    turn.call(call_id, name, block.get("input") or {}, crucible_tool=_mcp_name(name))
                    owner[call_id] = turn
            u = message.get("usage")
            if isinstance(u, dict):  # repeated on every block of the message: the last one stands
                # No completion_tokens: the stream carries the usage as of message_start, where output_tokens
                # is a placeholder (1); the input side is final. The session's total is in final_metrics.
                read, write = u.get("cache_read_input_tokens", 0), u.get("cache_creation_input_tokens", 0)
                turn.metrics = AtifMetrics(
                    prompt_tokens=u.get("input_tokens", 0) + read + write, cached_tokens=read,
                    extra={"cache_creation_input_tokens": write} if write else None)
        elif kind == "user" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if block.get("type") == "tool_result" and block.get("tool_use_id") in owner:
                    owner[block["tool_use_id"]].result(block["tool_use_id"], _text(block.get("content")),
                                                       bool(block.get("is_error")))
    return parsed


_CODEX_BUILTINS = {"command_execution": "shell", "file_change": "apply_patch", "web_search": "web_search"}


def parse_codex(events: list[dict[str, Any]], ctx: EventsContext) -> Parsed:
    """`codex exec --json`: completed items, one step each; usage only per prompt (harness/clients/codex.py)."""
    parsed = Parsed(model=ctx.session.model)
    for e in events:
        item = e.get("item") or {}
        kind, item_id = item.get("type"), str(item.get("id", len(parsed.turns)))
        if e.get("type") != "item.completed":
            continue
        turn = Turn(model_name=ctx.session.model)
        if kind == "agent_message":
            turn.text.append(item.get("text", ""))
        elif kind == "reasoning":
            turn.reasoning.append(item.get("text", ""))
        elif kind == "mcp_tool_call":
            tool, server = item.get("tool", "?"), item.get("server")
            turn.call(item_id, tool, item.get("arguments") or {}, extra={"server": server},
                      crucible_tool=tool if server == "crucible" else None)
            error = item.get("error")
            if error:
                turn.result(item_id, _text(error.get("message") if isinstance(error, dict) else error), True)
            else:
                turn.result(item_id, _text((item.get("result") or {}).get("content")),
                            item.get("status") != "completed")
        elif kind in _CODEX_BUILTINS:
            args = {"command": item.get("command")} if kind == "command_execution" else \
                {k: v for k, v in item.items() if k not in ("id", "type", "status")}
            turn.call(item_id, _CODEX_BUILTINS[kind], args)
            if kind == "command_execution":
                turn.result(item_id, item.get("aggregated_output") or "", item.get("exit_code") not in (0, None))
        else:
            continue  # codex's own notices (`error` items are warnings it goes on after)
        parsed.turns.append(turn)
    return parsed


def parse_cursor(events: list[dict[str, Any]], ctx: EventsContext) -> Parsed:
    """stream-json: `user` (the prompt), `assistant` and `tool_call` events grouped by their model_call_id
    (harness/clients/cursor.py); tokens only in the final `result`."""
    from .clients.cursor import _tool_call

    parsed = Parsed(model=ctx.session.model)
    by_call: dict[str, Turn] = {}
    owner: dict[str, Turn] = {}
    thinking: list[str] = []

    def turn_for(e: dict[str, Any]) -> Turn:
        key = e.get("model_call_id")
        if key and key in by_call:
            return by_call[key]
        turn = Turn(model_name=parsed.model, llm_call_count=1, reasoning=thinking.copy())
        thinking.clear()
        if isinstance(e.get("timestamp_ms"), int | float):
            turn.timestamp = _iso(datetime.fromtimestamp(e["timestamp_ms"] / 1000, UTC))
        parsed.turns.append(turn)
        if key:
            by_call[key] = turn
        return turn

    for e in events:
        kind = e.get("type")
        if kind == "system" and e.get("subtype") == "init" and str(e.get("model", "")).lower() not in ("", "auto"):
            parsed.model = e["model"]
        elif kind == "user":
            parsed.turns.append(Turn(source="user", text=[_text((e.get("message") or {}).get("content"))]))
        elif kind == "thinking" and e.get("text"):
            thinking.append(e["text"])
        elif kind == "assistant":
            turn_for(e).text.append(_text((e.get("message") or {}).get("content")))
        elif kind == "tool_call":
            call = e.get("tool_call") or {}
            call_id = str(e.get("call_id", len(owner)))
            body = next(iter(call.values()), {}) if call else {}
            args = body.get("args") if isinstance(body, dict) and isinstance(body.get("args"), dict) else {}
            if call_id not in owner:
                named = _tool_call(call)
                turn = owner[call_id] = turn_for(e)
                arguments = args.get("args", {}) if named.server else {k: v for k, v in args.items()
                                                                          if k != "toolCallId"}
                turn.call(call_id, named.name, arguments, extra={"server": named.server} if named.server else None,
                          crucible_tool=named.name if named.server == "crucible" else None)
            result = body.get("result") if isinstance(body, dict) else None
            if e.get("subtype") == "completed" and isinstance(result, dict):
                ok = result.get("success")
                failed = "success" not in result or (isinstance(ok, dict) and ok.get("isError"))
                owner[call_id].result(call_id, _text(ok if ok is not None else result), bool(failed))
    return parsed


def parse_api(events: list[dict[str, Any]], ctx: EventsContext) -> Parsed:
    """`response` (a chat completion and its usage) and `tool_call` events (harness/agents/api.py)."""
    from .agents.api import SYSTEM_PROMPT, read_file, write_file
    from .clients import SessionUsage, model_price

    local = {read_file.__name__, write_file.__name__}
    model = ctx.session.model
    price = model_price(model) if model else None
    workspace = Path(ctx.session.session_dir) / "workspace"  # the session's workspace, as the agent was told
    parsed = Parsed(model=model, version=ctx.crucible_version,
                    turns=[Turn(source="system", text=[SYSTEM_PROMPT.format(workspace=workspace)])])
    owner: dict[str, Turn] = {}
    for e in events:
        if e.get("type") == "response":
            body = e.get("body") or {}
            message = ((body.get("choices") or [{}])[0]).get("message") or {}
            turn = Turn(model_name=model, llm_call_count=1, text=[message.get("content") or ""])
            for c in message.get("tool_calls") or []:
                fn = c.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {"unparsed": fn.get("arguments")}
                name = fn.get("name", "?")
                turn.call(str(c.get("id")), name, args, crucible_tool=None if name in local else name)
                owner[str(c.get("id"))] = turn
            u = body.get("usage") or {}
            cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            prompt, completion = u.get("prompt_tokens", 0), u.get("completion_tokens", 0)
            cost = price.cost(SessionUsage(client="api", input_tokens=max(0, prompt - cached),
                                           cache_read_tokens=cached, output_tokens=completion)) if price else None
            turn.metrics = AtifMetrics(prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached,
                                       cost_usd=cost)
            parsed.turns.append(turn)
        elif e.get("type") == "tool_call" and str(e.get("id")) in owner:
            call_id, text = str(e["id"]), str(e.get("result", ""))
            # The events keep the first API_RESULT_CHARS of each result; the model read it all.
            cut = {"truncated_to_chars": API_RESULT_CHARS} if len(text) >= API_RESULT_CHARS else {}
            owner[call_id].result(call_id, text, not e.get("ok", True), **cut)
    return parsed


PARSERS: dict[str, Callable[[list[dict[str, Any]], EventsContext], Parsed]] = {
    "scripted": parse_scripted, "claude-code": parse_claude, "codex": parse_codex, "cursor": parse_cursor,
    "api": parse_api,
}
"""Agent name -> how its events become steps: one entry per agent (harness/agents/)."""


def harness_prompt(session: SessionRow) -> tuple[str, str | None]:
    """The prompt the harness gave the agent, and None; or "" and why it cannot be rebuilt. It is not kept in
    the session folder, so it is rebuilt from the task, and only when the task folder is the one that ran."""
    from crucible.toolkit.task import TaskError, find_task

    from .session import prompt_for, task_digest

    try:
        digests = json.loads((Path(session.session_dir) / "digests.json").read_text())
        recorded = digests["task"]["sha256"]
        task = find_task(session.task)
    except (OSError, ValueError, KeyError, TypeError, TaskError) as exc:
        return "", f"the prompt cannot be rebuilt: {type(exc).__name__}: {exc}"
    if task_digest(task) != recorded:
        return "", f"the prompt cannot be rebuilt: the task folder {task.root} changed since the session ran"
    return prompt_for(task), None


def _ledger(call: ToolCallRow) -> dict[str, Any]:
    return call.model_dump(include={"call_id", "started_at", "duration_s", "outcome", "status", "summary",
                                    "source_hash", "error"}, exclude_none=True)


def attach_ledger(turns: list[Turn], calls: list[ToolCallRow]) -> list[dict[str, Any]]:
    """Each crucible tool call of the steps gets the server's record of it (the n-th call of a tool, the n-th
    ledger row of that tool); returns the ledger rows no step claimed (e.g. the events were cut short)."""
    queue: dict[str, deque[ToolCallRow]] = defaultdict(deque)
    for c in calls:
        queue[c.tool].append(c)
    for turn in turns:
        for call in turn.calls:
            tool = turn.mcp.get(call.tool_call_id)
            if tool and queue[tool]:
                call.extra = {**(call.extra or {}), "ledger": _ledger(queue[tool].popleft())}
    return [_ledger(c) for rest in queue.values() for c in rest]


def trajectory(run: RunRow, session: SessionRow, store: Store) -> Trajectory:
    """The session's ATIF document, from its events file and its rows in the store."""
    events, stray = read_events(Path(session.session_dir) / "events.jsonl")
    ctx = EventsContext(session=session, crucible_version=run.crucible_version)
    parsed = PARSERS[session.agent](events, ctx)
    turns = parsed.turns
    if not any(t.source == "user" for t in turns):
        prompt, why = harness_prompt(session)
        user = Turn(source="user", text=[prompt], extra={"prompt": why} if why else None)
        at = next((i for i, t in enumerate(turns) if t.source != "system"), len(turns))
        turns.insert(at, user)
    unmatched = attach_ledger(turns, store.tool_calls(session.id))
    steps = [t.step(i) for i, t in enumerate(turns, 1)]

    usage = store.usage(session.id)
    scored = store.score(session.id)
    final = AtifFinalMetrics(total_steps=len(steps))
    if usage is not None:
        final = _final_metrics(usage, len(steps))
    crucible: dict[str, Any] = {
        "run_id": run.id, "task": session.task, "repeat": session.repeat, "state": session.state,
        "end_reason": session.end_reason, "end_message": session.end_message,
        "score": scored.score.model_dump(mode="json") if scored else None,
        "device": run.device, "backend": run.backend, "evaluator_version": run.evaluator_version}
    if unmatched:
        crucible["ledger_calls_without_a_step"] = unmatched
    if stray:
        crucible["events_lines_not_json"] = stray
    return Trajectory(
        session_id=session.id,
        agent=AtifAgent(name=session.agent, version=parsed.version or "unknown",
                        model_name=parsed.model or session.model),
        steps=steps, final_metrics=final, extra={"crucible": crucible},
        notes="Exported by `crucible export --format atif` from the session's events.jsonl and the run store; "
              "calls to the crucible MCP server carry the server's own record under extra.ledger.")


def _final_metrics(usage: Usage, steps: int) -> AtifFinalMetrics:
    return AtifFinalMetrics(
        total_prompt_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
        total_completion_tokens=usage.output_tokens, total_cached_tokens=usage.cache_read_tokens,
        total_cost_usd=usage.cost_usd, total_steps=steps,
        extra={"cache_write_tokens": usage.cache_write_tokens, "cost_source": usage.cost_source,
               "turns": usage.turns, "wall_s": usage.wall_s, "tool_calls": usage.tool_calls})


def write_atif(run_dir: Path, out: Path) -> tuple[int, list[str]]:
    """One `<session id>.json` per session that ran; returns how many, and the sessions left out and why."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file; ATIF goes to a folder, one file per session")
    store, run = open_store(run_dir)
    written, skipped = 0, []
    try:
        for session in store.sessions():
            events = Path(session.session_dir) / "events.jsonl" if session.session_dir else None
            if events is None or not events.is_file():
                skipped.append(f"{session.id} ({session.state}: no events file)")
                continue
            if session.agent not in PARSERS:  # a store written by a newer crucible
                skipped.append(f"{session.id} (no ATIF reader for agent {session.agent!r})")
                continue
            out.mkdir(parents=True, exist_ok=True)
            doc = trajectory(run, session, store)
            (out / f"{session.id}.json").write_text(
                json.dumps(doc.model_dump(mode="json", exclude_none=True), indent=2) + "\n", encoding="utf-8")
            written += 1
    finally:
        store.close()
    return written, skipped


# ---------------------------------------------------------------- the command


class Exported(BaseModel):
    """What `export_run` wrote."""

    format: Format
    path: str
    """The file or folder; `-` for standard output."""
    sessions: int
    skipped: list[str] = []
    """Sessions left out, each with why (ATIF: sessions that never ran)."""

    def summary(self) -> str:
        what = "trajectories" if self.format == "atif" else "rows"
        text = f"wrote {self.sessions} {what} to {self.path}"
        return text + (f"; left out {len(self.skipped)}: {', '.join(self.skipped)}" if self.skipped else "")


def default_out(run_dir: Path, fmt: Format) -> Path:
    return run_dir / "export" / ("atif" if fmt == "atif" else f"sessions.{fmt}")


def export_run(run_dir: Path, fmt: Format, out: Path | str | None = None) -> Exported:
    """Export the run in `run_dir` as `fmt` to `out` (default: `default_out`; `-`: standard output)."""
    if str(out) == "-" and fmt not in ("csv", "jsonl"):
        raise ExportError(f"--out - (standard output) is for csv and jsonl; {fmt} needs a path")
    target = default_out(run_dir, fmt) if out is None else Path(out)
    if fmt == "atif":
        written, skipped = write_atif(run_dir, target)
        return Exported(format=fmt, path=str(target), sessions=written, skipped=skipped)
    rows = session_rows(run_dir)
    if fmt == "parquet":
        target.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(rows, target)
    else:
        writer = write_csv if fmt == "csv" else write_jsonl
        if str(out) == "-":
            writer(rows, sys.stdout)
            return Exported(format=fmt, path="-", sessions=len(rows))
        buffer = io.StringIO()
        writer(rows, buffer)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(buffer.getvalue(), encoding="utf-8")
    return Exported(format=fmt, path=str(target), sessions=len(rows))
