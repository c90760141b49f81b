"""A stand-in for `crucible serve`: the five tools with the real ones' names, arguments and output fields,
answering instantly. The client tests use it where `crucible serve` is not available, so they test the
clients and not the engine.

    python tests/e2e/standin_server.py serve --task ID --workspace DIR [--transport stdio|http] [--port P]

Over HTTP it wants `Authorization: Bearer $CRUCIBLE_MCP_TOKEN`, as the real server does.
"""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

# One output field of each real tool's model that a result must carry: the tests look for it.
FIELDS = {"get_task": "calling_convention", "compile": "source_hash", "run_tests": "timing_comparable",
          "profile": "kernel_total_us", "submit": "stored_at"}


class TaskInfo(BaseModel):
    id: str
    title: str
    calling_convention: str
    candidate_file: str


class CompileReport(BaseModel):
    ok: bool
    source_hash: str
    diagnostics: list[str]


class RunTestsReport(BaseModel):
    status: str
    correct: bool | None
    timing_comparable: bool


class Profile(BaseModel):
    config: str
    status: str
    kernel_total_us: float | None


class SubmitReport(BaseModel):
    accepted: bool
    submission: int
    stored_at: str


def build_server(task: str) -> MCPServer:
    server = MCPServer("crucible")

    @server.tool()
    def get_task() -> TaskInfo:
        """The task."""
        return TaskInfo(id=task, title="stand-in", calling_convention="vadd(x, y, out, N)",
                        candidate_file="kernel.py")

    @server.tool()
    def compile() -> CompileReport:
        """Compile the workspace's kernel."""
        return CompileReport(ok=True, source_hash="0" * 16, diagnostics=[])

    @server.tool()
    def run_tests(configs: list[str] | None = None, seeds: int | None = None) -> RunTestsReport:
        """Test the kernel on the visible configs."""
        return RunTestsReport(status="ok", correct=True, timing_comparable=False)

    @server.tool()
    def profile(config: str | None = None, ncu: bool = False) -> Profile:
        """Profile one config."""
        return Profile(config=config or "small", status="ok", kernel_total_us=1.5)

    @server.tool()
    def submit(note: str | None = None) -> SubmitReport:
        """Submit the kernel."""
        return SubmitReport(accepted=True, submission=1, stored_at="submissions/1")

    return server


ASGIApp = Callable[[MutableMapping[str, Any], Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]],
                   Awaitable[None]]


def require_token(app: ASGIApp, token: str) -> ASGIApp:
    async def guarded(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            sent = dict(scope["headers"]).get(b"authorization", b"").decode()
            if not secrets.compare_digest(sent, f"Bearer {token}"):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"bad or missing bearer token"})
                return
        await app(scope, receive, send)
    return guarded


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["serve"])
    p.add_argument("--task", required=True)
    p.add_argument("--workspace", required=True)
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args()
    server = build_server(args.task)
    if args.transport == "stdio":
        server.run()
        return
    import uvicorn

    token = os.environ["CRUCIBLE_MCP_TOKEN"]
    app = require_token(server.streamable_http_app(host=args.host), token)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
