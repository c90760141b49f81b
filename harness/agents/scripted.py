"""The scripted agent: no model; it replays a plan through a real MCP client over the session's HTTP
endpoint, so a run without a GPU or an API key still goes through the whole path an agent takes.

Plans (`--model`):
    solution       get_task; write the task's expert solution into the candidate; compile; run_tests; submit
    baseline       get_task; submit the workspace as materialized (the baseline, or the torch2X stub)
    replay:FILE    a JSON list of steps, each {"write": {"file": F, "content": C}} (F relative to the
                   workspace) or {"call": {"tool": T, "arguments": {...}}}

The expert solution is read here, on the harness's side (this module runs in the trusted harness process):
it reaches the workspace only as the `write` step of the plan, like any agent's edit.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from crucible.toolkit.task import find_task

from ..models import RunConfig, SessionEnd, Usage
from . import AgentResult, AgentUnavailable, SessionContext

PLANS = ("solution", "baseline", "replay:FILE")


class Write(BaseModel):
    model_config = ConfigDict(extra="forbid")

    file: str
    content: str


class Call(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = {}


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    write: Write | None = None
    call: Call | None = None

    @model_validator(mode="after")
    def _one(self) -> Step:
        if (self.write is None) == (self.call is None):
            raise ValueError('a step is {"write": {...}} or {"call": {...}}, exactly one')
        return self


def _call(tool: str, **arguments: Any) -> Step:
    return Step(call=Call(tool=tool, arguments=arguments))


def load_replay(path: Path) -> list[Step]:
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, list):
            raise ValueError("the file must hold a JSON list of steps")
        return [Step.model_validate(s) for s in raw]
    except (OSError, ValueError, ValidationError) as exc:
        raise AgentUnavailable(f"replay plan {path}: {exc}") from None


def plan_steps(plan: str, task_id: str) -> list[Step]:
    """The steps of a plan for one task (the harness's side: it may read the task folder)."""
    if plan == "solution":
        task = find_task(task_id)
        if task.spec.solution is None:
            raise AgentUnavailable(f"{task_id} has no expert solution yet (an imported task?): the scripted "
                                   "`solution` plan cannot run on it")
        content = task.file(task.spec.solution).read_text()
        return [_call("get_task"), Step(write=Write(file=task.spec.candidate, content=content)),
                _call("compile"), _call("run_tests"), _call("submit", note="the expert solution")]
    if plan == "baseline":
        return [_call("get_task"), _call("submit", note="the workspace as materialized")]
    if plan.startswith("replay:"):
        return load_replay(Path(plan.removeprefix("replay:")))
    raise AgentUnavailable(f"unknown plan {plan!r} for the scripted agent; plans: {', '.join(PLANS)}")


def _inside(workspace: Path, name: str) -> Path:
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"write step: {name!r} is not a path inside the workspace")
    return workspace / rel


class ScriptedAgent:
    name = "scripted"

    def preflight(self, config: RunConfig) -> None:
        plan = config.model or "solution"
        if plan.startswith("replay:"):
            load_replay(Path(plan.removeprefix("replay:")))
        elif plan not in ("solution", "baseline"):
            raise AgentUnavailable(f"unknown plan {plan!r} for the scripted agent (--model); "
                                   f"plans: {', '.join(PLANS)}")

    def run(self, ctx: SessionContext, cancel: threading.Event) -> AgentResult:
        started = time.perf_counter()
        steps = plan_steps(ctx.spec.model or "solution", ctx.spec.task)
        with ctx.events_path.open("a") as events:
            def emit(event: dict[str, Any]) -> None:
                events.write(json.dumps({"t": round(time.perf_counter() - started, 3), **event}) + "\n")
                events.flush()

            done, end = anyio.run(self._replay, ctx, steps, cancel, emit)
        usage = Usage(turns=done, cost_usd=0.0, cost_source="none", wall_s=time.perf_counter() - started)
        return AgentResult(end=end, usage=usage)

    async def _replay(self, ctx: SessionContext, steps: list[Step], cancel: threading.Event,
                      emit: Any) -> tuple[int, SessionEnd]:
        done = 0
        # No read timeout: a tool call may take minutes; the time limit (below) bounds it.
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ctx.token}"},
                                  timeout=httpx2.Timeout(30, read=None))
        stopped_early = anyio.Event()
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                # Like a CLI agent, stop at the time limit (or when the harness cancels), the call in flight too.
                deadline = time.monotonic() + ctx.time_limit_s
                while not cancel.is_set() and time.monotonic() < deadline:
                    await anyio.sleep(0.05)
                stopped_early.set()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            async with http, Client(streamable_http_client(ctx.mcp_url, http_client=http)) as client:
                for n, step in enumerate(steps, 1):
                    emit({"type": "step", "n": n, **step.model_dump(exclude_none=True)})
                    if step.write is not None:
                        target = _inside(ctx.workspace, step.write.file)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_text(step.write.content)
                    else:
                        assert step.call is not None
                        try:
                            result = await client.call_tool(step.call.tool, step.call.arguments)
                        except MCPError as exc:  # a protocol error is the plan's mistake, answered like one
                            emit({"type": "tool_error", "n": n, "tool": step.call.tool, "error": str(exc)})
                        else:
                            emit({"type": "tool_result", "n": n, "tool": step.call.tool,
                                  "is_error": bool(result.is_error),
                                  "structured_content": result.structured_content,
                                  "text": [c.text for c in result.content if hasattr(c, "text")]})
                    done = n
            tg.cancel_scope.cancel()
        if stopped_early.is_set() and done < len(steps):
            emit({"type": "cancelled", "after": done})
            return done, SessionEnd(reason="time_limit",
                                    message=f"stopped at the time limit after {done} of {len(steps)} steps")
        emit({"type": "finished", "steps": done})
        return done, SessionEnd(reason="finished", message=f"replayed {done} steps")


AGENT = ScriptedAgent()
