"""The MCP server: `build_server(session)` and its five tools.

    get_task   the visible task                                   (reads nothing but task.toml, PROMPT.md)
    compile    compile_snapshot(workspace snapshot)                ─┐
    run_tests  evaluate(snapshot, visible configs, quick timing)    │ one at a time (a lock), in a thread,
    profile    toolkit.profiling.profile(snapshot, config)          │ with progress, cancellation and a
    submit     freeze the snapshot under the session dir, re-check ─┘ time limit (server/engine_calls.py)

Every call is written to the session ledger (server/ledger.py) with the snapshot's content hash. What a
tool returns has passed through the session's AgentView (toolkit/agent_view.py): candidate code cannot
echo the hidden configs, the solution or the task folder's paths back to the agent. Failures the agent can
act on (its code does not compile, crashes, hangs; a wrong config name; a missing file) are
tool results with isError and the precise message; a wrong answer is a normal result (correct=false).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import stat
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

from crucible.toolkit.agent_view import AgentView
from crucible.toolkit.evaluation import (
    Backend,
    EvalRequest,
    compile_snapshot,
    evaluate,
    resolve_backend,
    worker_pool,
)
from crucible.toolkit.profiling import Profile
from crucible.toolkit.profiling import profile as run_profile
from crucible.toolkit.task import Task, find_task
from crucible.toolkit.worker import WorkerPool
from crucible.toolkit.workspace import Snapshot, WorkspaceError, take_snapshot

from .engine_calls import TimeLimitExceeded, run_engine
from .instructions import INSTRUCTIONS
from .ledger import Ledger, Outcome, SubmissionRow, now
from .models import (
    CompileReport,
    ConfigsArg,
    NcuArg,
    NoteArg,
    ProfileConfigArg,
    RunTestsReport,
    SeedsArg,
    SubmitReport,
    TaskInfo,
    compile_report,
    run_tests_report,
)
from .session import SessionConfig
from .task_view import task_info

RAN_STATUSES = {"ok", "incorrect", "not_run"}
"""Evaluation statuses that are answers, not failures: a wrong kernel is a normal result."""


class ToolFailure(Exception):
    """A failure the agent can act on: returned as an isError result with this message."""

    def __init__(self, message: str, *, status: str, outcome: Outcome = "error",
                 details: BaseModel | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.outcome, self.details = message, status, outcome, details


@dataclass
class CallRecord:
    """What a tool body tells the ledger about its call."""

    call_id: int
    source_hash: str | None = None
    status: str | None = None
    summary: str = ""


@dataclass
class ServerState:
    """Held for the server's lifetime (the lifespan): the ledger and the evaluation lock."""

    session: SessionConfig
    task: Task
    backend: Backend
    info: TaskInfo
    ledger: Ledger
    view: AgentView
    """What the agent may be shown; `with_snapshot` for each call's snapshot."""
    pool: WorkerPool | None = None
    """One preloaded worker kept ahead of need: an evaluation does not wait for imports and CUDA."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class Progress:
    """Reports MCP progress for one call; the value only ever increases, as the protocol requires."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.value = ctx, -1.0

    async def __call__(self, done: float, total: float | None, message: str) -> None:
        if done > self.value:
            value = done
        else:
            # News without a new step (a heartbeat, a new stage): creep a 64th of the way towards the next
            # whole step, never past the total (thousands of heartbeats before floats run out of room).
            # With no room left the news is dropped, not misreported.
            ceiling = math.floor(self.value) + 1.0
            if total is not None:
                ceiling = min(ceiling, total)
            value = self.value + (ceiling - self.value) / 64
            if not self.value < value < ceiling:
                return
        self.value = value
        # A client that went away cannot be told; the call's cancellation follows.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self.ctx.report_progress(self.value, total, message=message)


def _crucible_version() -> str:
    try:
        return version("kernel-crucible")
    except PackageNotFoundError:
        return "0+unknown"


def _text(report: BaseModel) -> str:
    return json.dumps(report.model_dump(mode="json"), separators=(",", ":"))  # compact: agents pay per token


def _result(report: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=_text(report))],
                          structured_content=report.model_dump(mode="json"))


def _error(message: str, details: BaseModel | None = None) -> CallToolResult:
    # The message comes first: some clients show only the text content of an error.
    text = message if details is None else f"{message}\n\n{_text(details)}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True,
                          structured_content=None if details is None else details.model_dump(mode="json"))


# ---------------------------------------------------------------- the call wrapper

Body = Callable[[ServerState, Progress, CallRecord], Awaitable[BaseModel]]


async def _call(ctx: Context, tool: str, arguments: dict[str, Any], body: Body) -> CallToolResult:
    """Run one tool body: ledger row, error mapping, and the top-level catch of internal errors."""
    state: ServerState = ctx.request_context.lifespan_context
    started = time.perf_counter()
    rec = CallRecord(call_id=state.ledger.begin_call(tool, arguments, now()))

    def finish(outcome: Outcome, status: str | None, summary: str, error: str | None = None) -> None:
        state.ledger.finish_call(rec.call_id, outcome=outcome, duration_s=time.perf_counter() - started,
                                 source_hash=rec.source_hash, status=status, summary=summary, error=error)

    try:
        report = await body(state, Progress(ctx), rec)
    except ToolFailure as failure:
        finish(failure.outcome, failure.status, failure.message.splitlines()[0], failure.message)
        return _error(failure.message, failure.details)
    except anyio.get_cancelled_exc_class():
        finish("cancelled", "cancelled", f"{tool} was cancelled by the client")
        raise
    except Exception as exc:  # the top of a tool: a bug of ours, never the agent's
        tb = traceback.format_exc()
        print(f"crucible: internal error in {tool}:\n{tb}", file=sys.stderr, flush=True)
        finish("error", "internal_error", f"internal error: {type(exc).__name__}: {exc}", tb)
        # The ledger and the log keep the whole text; the agent gets it through the view.
        shown = state.view.text(f"{type(exc).__name__}: {exc}", 1000)
        return _error(f"internal error in crucible's {tool} (not a problem with your kernel): {shown}. It was "
                      "logged; try the call again, and if it persists carry on without this tool.")
    finish("ok", rec.status or "ok", rec.summary)
    return _result(report)


def _snapshot(state: ServerState, rec: CallRecord) -> Snapshot:
    try:
        snap = take_snapshot(state.task, state.session.workspace, store=state.session.snapshots_dir)
    except WorkspaceError as exc:
        raise ToolFailure(str(exc), status="workspace_error") from None
    rec.source_hash = snap.digest
    return snap


def _visible_config(state: ServerState, name: str) -> str:
    # Only visible names: task.config() also knows the hidden ones, which an agent must not reach.
    visible = [c.name for c in state.task.spec.configs]
    if name not in visible:
        shown = name if len(name) <= 60 else name[:60] + "..."
        raise ToolFailure(f"no visible config named {shown!r}; the visible configs are: {', '.join(visible)}",
                          status="bad_request")
    return name


async def _run_locked(state: ServerState, tool: str, progress: Progress, start_message: str,
                      fn: Callable[[Callable[[dict], None], Any], Any]) -> Any:
    """One engine call at a time per server; past the tool's limit, the call is stopped."""
    limit = state.session.limits.for_tool(tool)
    if state.lock.locked():
        await progress(0, None, "waiting for the evaluation in progress to finish")
    async with state.lock:
        try:
            return await run_engine(fn, limit_s=limit, progress=progress, start_message=start_message)
        except TimeLimitExceeded:
            raise ToolFailure(f"{tool} exceeded its {limit:g} s limit; the evaluation was stopped. If your "
                              "kernel can hang (a loop that never ends, a wait on a flag), fix that; otherwise "
                              "test fewer configs or seeds at a time.", status="timeout", outcome="timeout") from None


def _failure_message(report: RunTestsReport) -> str:
    if report.status == "infra":
        return f"infrastructure error (not a problem with your kernel): {report.message}"
    if report.status == "timeout":
        return f"your kernel did not finish: {report.message}"
    return report.message


# ---------------------------------------------------------------- tool bodies


async def _get_task(state: ServerState, progress: Progress, rec: CallRecord) -> TaskInfo:
    rec.summary = f"{state.task.id} ({len(state.info.configs)} visible configs)"
    return state.info


async def _compile(state: ServerState, progress: Progress, rec: CallRecord) -> CompileReport:
    snap = _snapshot(state, rec)
    build = await _run_locked(state, "compile", progress, f"compiling {state.task.spec.candidate}",
                              lambda on_progress, cancel: compile_snapshot(state.task, snap, state.backend,
                                                                           cancel=cancel, pool=state.pool))
    report = compile_report(build, snap.digest, state.view.with_snapshot(snap.root))
    rec.status = "ok" if report.ok else "compile_error"
    rec.summary = report.message
    if not report.ok:
        raise ToolFailure(report.message, status="compile_error", details=report)
    return report


async def _evaluate_visible(state: ServerState, tool: str, progress: Progress, snap: Snapshot,
                            configs: list[str] | None, seeds: int | None) -> RunTestsReport:
    request = EvalRequest(configs=configs or "visible", seeds=seeds, timing="quick", backend=state.backend,
                          gpu=state.session.gpu)
    ev = await _run_locked(state, tool, progress, "building and checking",
                           lambda on_progress, cancel: evaluate(state.task, snap, request,
                                                                on_progress=on_progress, cancel=cancel,
                                                                pool=state.pool))
    return run_tests_report(ev, state.view.with_snapshot(snap.root))


def _summary(report: RunTestsReport) -> str:
    speed = f", speedup {report.speedup:.3g}x" if report.speedup else ""
    return f"{report.status}: {report.message.splitlines()[0] if report.message else ''}{speed}"


def _run_tests_body(configs: list[str] | None, seeds: int | None) -> Body:
    async def body(state: ServerState, progress: Progress, rec: CallRecord) -> RunTestsReport:
        names = list(dict.fromkeys(_visible_config(state, n) for n in configs)) if configs else None
        snap = _snapshot(state, rec)
        report = await _evaluate_visible(state, "run_tests", progress, snap, names, seeds)
        rec.status, rec.summary = report.status, _summary(report)
        if report.status not in RAN_STATUSES:
            raise ToolFailure(_failure_message(report), status=report.status, details=report)
        return report

    return body


def _profile_body(config: str | None, ncu: bool) -> Body:
    async def body(state: ServerState, progress: Progress, rec: CallRecord) -> Profile:
        name = _visible_config(state, config) if config is not None else None
        snap = _snapshot(state, rec)
        prof: Profile = await _run_locked(
            state, "profile", progress, f"profiling {name or 'the first config'}",
            lambda on_progress, cancel: run_profile(state.task, snap, name, ncu=ncu, backend=state.backend,
                                            on_progress=on_progress, cancel=cancel, pool=state.pool))
        prof = state.view.with_snapshot(snap.root).profile(prof)
        rec.status, rec.summary = prof.status, f"{prof.status}: {prof.message.splitlines()[0] if prof.message else ''}"
        if prof.status == "incorrect":
            raise ToolFailure(f"profile needs a correct kernel; run_tests shows where it is wrong: {prof.message}",
                              status=prof.status)
        if prof.status not in RAN_STATUSES:
            raise ToolFailure(prof.message, status=prof.status, details=prof)
        return prof

    return body


def _freeze(snap: Snapshot, dest: Path) -> None:
    """Copy a snapshot to its submission folder, read-only; the workspace may change right after."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for name in snap.files:
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(snap.root / name, target)
        target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    tmp.rename(dest)


def _submit_body(note: str | None) -> Body:
    async def body(state: ServerState, progress: Progress, rec: CallRecord) -> SubmitReport:
        session = state.session
        snap = _snapshot(state, rec)
        # Numbered and recorded before the re-check (no await in between, so concurrent submits get
        # distinct numbers), so the submission stands even if the re-check is stopped.
        n = state.ledger.next_submission()
        dest = session.submissions_dir / f"{n}-{snap.short}"
        state.ledger.add_submission(SubmissionRow(n=n, call_id=rec.call_id, source_hash=snap.digest,
                                                  path=str(dest), status="checking", verdict={}, note=note,
                                                  at=now()))
        dest.parent.mkdir(parents=True, exist_ok=True)
        _freeze(snap, dest)
        try:
            verdict = await _evaluate_visible(state, "submit", progress, snap, None, None)
        except ToolFailure as failure:  # the re-check ran out of time: the submission still stands
            if failure.status != "timeout":
                raise
            verdict = RunTestsReport(status="timeout", message=failure.message, correct=None, configs=[],
                                     speedup=None, speedup_against=None, timing_comparable=False,
                                     timing_note="", diagnostics=[], output_tail="", backend=state.backend,
                                     source_hash=snap.digest, seconds=session.limits.submit)
        except anyio.get_cancelled_exc_class():
            state.ledger.update_submission(n, status="cancelled")
            raise
        state.ledger.update_submission(n, status=verdict.status, correct=verdict.correct,
                                       speedup=verdict.speedup, verdict=verdict.model_dump(mode="json"))
        if verdict.status == "ok" and verdict.correct:
            speed = f", speedup {verdict.speedup:.3g}x against the {verdict.speedup_against}" if verdict.speedup else ""
            comparable = "" if verdict.timing_comparable else f" ({verdict.timing_note})"
            message = (f"submission {n} recorded: correct on the visible configs{speed}{comparable}. "
                       "It is your answer unless you submit again.")
        else:
            message = (f"submission {n} recorded, but on the visible configs it is {verdict.status}: "
                       f"{_failure_message(verdict)}. It is now your answer (the last submission counts): "
                       "fix it and submit again.")
        rec.status, rec.summary = verdict.status, f"submission {n}: {_summary(verdict)}"
        return SubmitReport(accepted=True, submission=n, source_hash=snap.digest, stored_at=str(dest),
                            message=message, verdict=verdict,
                            hidden="hidden configs are scored only after the session ends; no result "
                                   "on them is given during the session")

    return body


# ---------------------------------------------------------------- the server

MAX_RECORDED_ARGUMENTS = 4000
"""Characters of a rejected call's arguments kept in the ledger (an agent may send megabytes)."""


class CrucibleServer(MCPServer[ServerState]):
    """MCPServer that also records the calls the SDK rejects before a tool body runs (an unknown tool,
    arguments that fail the input schema), so the ledger holds every call."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[ServerState, Any] | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if context is not None:
                state: ServerState = context.request_context.lifespan_context
                raw = json.dumps(arguments, default=str)
                recorded = arguments if len(raw) <= MAX_RECORDED_ARGUMENTS else {
                    "truncated": raw[:MAX_RECORDED_ARGUMENTS]}
                status = "internal_error" if isinstance(exc, UnexpectedToolError) else "bad_request"
                call_id = state.ledger.begin_call(name[:100], recorded, now())
                state.ledger.finish_call(call_id, outcome="error", duration_s=0, source_hash=None, status=status,
                                         summary=str(exc).splitlines()[0], error=str(exc)[:MAX_RECORDED_ARGUMENTS])
            raise

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


def build_server(session: SessionConfig) -> MCPServer:
    """The MCP server for one task and workspace. Raises KeyError for an unknown task (the message names
    the known ones) and TaskError for a broken one."""
    task = find_task(session.task_id)
    backend = resolve_backend(session.backend)
    info = task_info(task, session.workspace, backend, session.limits)
    view = AgentView.for_task(task, session.workspace)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[ServerState]:
        ledger = Ledger(session.ledger_path)
        pool = worker_pool(task, backend, gpu=session.gpu)
        try:
            yield ServerState(session=session, task=task, backend=backend, info=info, ledger=ledger, view=view,
                              pool=pool)
        finally:
            pool.close()
            ledger.close()

    server = CrucibleServer("crucible", title="crucible: GPU kernel tools", version=_crucible_version(),
                       instructions=INSTRUCTIONS, lifespan=lifespan)

    @server.tool(name="get_task", title="Get the task", annotations=READ_ONLY, description=(
        "The task: statement (PROMPT.md), the entry point's exact signature and calling convention, the file "
        "to edit, the visible configs with their values, tolerances per dtype, FLOP/byte formulas, the device "
        "and the limits. Call it first; it does not change."))
    async def get_task(ctx: Context) -> Annotated[CallToolResult, TaskInfo]:
        return await _call(ctx, "get_task", {}, _get_task)

    @server.tool(name="compile", title="Compile the kernel", annotations=READ_ONLY, description=(
        "Build the workspace's candidate file for the target GPU architecture (works without a GPU). Returns "
        "the compiler's diagnostics with file and line, and registers, shared memory and spills per kernel. "
        "A build failure is an error result carrying the diagnostics."))
    async def compile(ctx: Context) -> Annotated[CallToolResult, CompileReport]:
        return await _call(ctx, "compile", {}, _compile)

    @server.tool(name="run_tests", title="Test correctness and speed", annotations=READ_ONLY, description=(
        "Check the workspace's kernel on the visible configs (several random seeds each) against the "
        "reference, then time it quickly against the baseline. Per config: pass/fail, max abs/rel error, the "
        "first mismatch, times and speedup. Wrong results are a normal result with correct=false; a kernel "
        "that does not compile, crashes or hangs is an error result with the message and the output tail."))
    async def run_tests(ctx: Context, configs: ConfigsArg = None,
                        seeds: SeedsArg = None) -> Annotated[CallToolResult, RunTestsReport]:
        return await _call(ctx, "run_tests", {"configs": configs, "seeds": seeds}, _run_tests_body(configs, seeds))

    @server.tool(name="profile", title="Profile the kernel", annotations=READ_ONLY, description=(
        "Careful timing of one visible config against the baseline, which kernels ran and for how long, "
        "registers/shared memory/spills, and the fraction of the device's roofline reached (with the bound "
        "to work against). ncu=true adds Nsight Compute counters where available (slow)."))
    async def profile(ctx: Context, config: ProfileConfigArg = None,
                      ncu: NcuArg = False) -> Annotated[CallToolResult, Profile]:
        return await _call(ctx, "profile", {"config": config, "ncu": ncu}, _profile_body(config, ncu))

    @server.tool(name="submit", title="Submit the kernel", description=(
        "Record the workspace's current source as your answer (a frozen copy; later edits do not change it) "
        "and re-check it on the visible configs. You may submit several times: the last submission counts. "
        "Hidden configs are scored only after the session."),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=False))
    async def submit(ctx: Context, note: NoteArg = None) -> Annotated[CallToolResult, SubmitReport]:
        return await _call(ctx, "submit", {"note": note}, _submit_body(note))

    return server
