"""Running a blocking engine call (evaluate, compile_snapshot, profile) from an async tool.

    tool (event loop) ── anyio.to_thread ──▶ engine call (thread) ──▶ worker process group
         ▲                                        │ on_progress(dict)
         └──── memory object stream ◀─────────────┘          (never blocks the engine's thread)

The engine gets a `threading.Event` as `cancel`. When the tool call is cancelled (the client sent
notifications/cancelled, the connection closed) or runs past its time limit, the event is set, the engine
kills its worker's process group, and the tool waits (shielded) for the thread to return, so no worker
outlives the call and the next evaluation never overlaps this one.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread

T = TypeVar("T")

ProgressFn = Callable[[float, float | None, str], Awaitable[None]]
"""(done, total, message) -> reports MCP progress."""

STOP_GRACE_S = 60.0
"""How long a stopped engine call may take to kill its worker and return before it is abandoned."""
HEARTBEAT_S = 5.0
"""A long call with no news from the engine still reports progress this often."""


class TimeLimitExceeded(Exception):
    def __init__(self, limit_s: float) -> None:
        super().__init__(f"exceeded its {limit_s:g} s limit")
        self.limit_s = limit_s


def progress_text(p: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """The engine's progress dicts ({"stage", "config", "done", "total", ...}) as (done, total, message)."""
    done, total = p.get("done"), p.get("total")
    stage = str(p.get("stage", "working"))
    message = stage + (f" {p['config']}" if p.get("config") else "")
    if isinstance(done, int | float) and isinstance(total, int | float):
        message += f" ({done:g}/{total:g})"
        return float(done), float(total), message
    return None, None, message


async def run_engine(fn: Callable[[Callable[[dict], None], threading.Event], T], *, limit_s: float,
                     progress: ProgressFn, start_message: str) -> T:
    """Run `fn(on_progress, cancel)` in a thread under a time limit, forwarding its progress.

    Raises TimeLimitExceeded after the limit (the engine stopped), and re-raises cancellation after
    stopping the engine."""
    cancel = threading.Event()
    finished = threading.Event()
    send, receive = anyio.create_memory_object_stream[dict[str, Any]](max_buffer_size=math.inf)
    started = time.monotonic()

    def on_progress(p: dict) -> None:
        # Called in the engine's thread; hand the dict to the event loop without waiting for it.
        # When the call is over (or the loop is gone) nobody listens any more: drop it.
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, RuntimeError):
            anyio.from_thread.run_sync(send.send_nowait, dict(p))

    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        # The engine's own exceptions are kept apart so they leave this function as themselves, not
        # wrapped in the task group's ExceptionGroup.
        try:
            outcome.append(fn(on_progress, cancel))
        except Exception as exc:  # re-raised below, in the caller's task
            failure.append(exc)
        finally:
            finished.set()

    async def forward() -> None:
        last = (0.0, None, start_message)
        await progress(*last)
        while True:
            with anyio.move_on_after(HEARTBEAT_S):
                async for p in receive:
                    done, total, message = progress_text(p)
                    last = (done, total, message) if done is not None else (last[0], last[1], message)
                    await progress(*last)
                return
            await progress(last[0], last[1], f"{last[2]} ({time.monotonic() - started:.0f} s)")

    with anyio.move_on_after(limit_s) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(forward)
            try:
                await anyio.to_thread.run_sync(target, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                cancel.set()
                with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_GRACE_S):
                    while not finished.is_set():
                        await anyio.sleep(0.02)
                raise
            finally:
                send.close()
    if scope.cancelled_caught:
        raise TimeLimitExceeded(limit_s)
    if failure:
        raise failure[0]
    return outcome[0]
