"""`crucible serve` as a client meets it: over stdio, over HTTP behind a bearer token, under MCP Inspector."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from crucible.toolkit.task import find_task
from crucible.toolkit.workspace import materialize

FIXTURES = Path(__file__).parent / "fixtures/tasks"
TASK = "triton2triton/vadd"
TOKEN = "test-token-0123456789abcdef"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    materialize(find_task(TASK, FIXTURES), tmp_path / "ws")
    return tmp_path / "ws"


def serve_args(ws: Path, *extra: str) -> list[str]:
    return ["-m", "crucible.harness.cli", "serve", "--task", TASK, "--workspace", str(ws),
            "--ledger", str(ws.parent / "session" / "ledger.db"), "--backend", "cpu", *extra]


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_MCP_TOKEN"}
    return {**env, "CRUCIBLE_TASKS": str(FIXTURES), **extra}


# ---------------------------------------------------------------- stdio


async def test_serve_over_stdio_answers_the_tools_with_progress(ws: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=serve_args(ws), env=server_env())
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(params, mode="legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        task = await client.call_tool("get_task", {})
        tested = await client.call_tool("run_tests", {"configs": ["small"], "seeds": 1},
                                        progress_callback=on_progress)
    assert tools == {"get_task", "compile", "run_tests", "profile", "submit"}
    assert task.structured_content["id"] == TASK
    assert tested.structured_content["correct"] is True
    assert progress and progress == sorted(progress)


# ---------------------------------------------------------------- HTTP


@pytest.fixture
def http_server(ws: Path) -> Iterator[str]:
    """`crucible serve --transport http --port 0`; yields its URL, read from its banner."""
    proc = subprocess.Popen([sys.executable, *serve_args(ws, "--transport", "http", "--port", "0")],
                            env=server_env(CRUCIBLE_MCP_TOKEN=TOKEN), stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            match = re.search(r"serving MCP on (http://\S+/mcp)", line)
            if match and not found:
                found.append(match.group(1))
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(60), "the HTTP server did not start"
        yield found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post_initialize(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_http_with_the_right_token_serves_the_tools(http_server: str) -> None:
    assert http_server.startswith("http://127.0.0.1:")
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(http_server, http_client=http)) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        task = await client.call_tool("get_task", {})
    assert "run_tests" in tools and task.structured_content["id"] == TASK


def test_http_without_a_token_or_with_a_wrong_one_is_refused_with_401(http_server: str) -> None:
    assert post_initialize(http_server, {}) == 401
    assert post_initialize(http_server, {"authorization": "Bearer wrong-token-0123456789abc"}) == 401
    assert post_initialize(http_server, {"authorization": TOKEN}) == 401, "the scheme is required"
    assert post_initialize(http_server, {"authorization": f"Basic {TOKEN}"}) == 401
    assert post_initialize(http_server, {"authorization": f"Bearer {TOKEN}"}) == 200


def test_http_refuses_to_start_without_a_token_and_says_how_to_set_one(ws: Path) -> None:
    proc = subprocess.run([sys.executable, *serve_args(ws, "--transport", "http", "--port", "0")],
                          env=server_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "CRUCIBLE_MCP_TOKEN is not set" in proc.stderr and "export CRUCIBLE_MCP_TOKEN=" in proc.stderr


def test_serve_refuses_a_missing_workspace_and_an_unknown_task(tmp_path: Path) -> None:
    missing = subprocess.run([sys.executable, *serve_args(tmp_path / "nope")], env=server_env(),
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "crucible workspace" in missing.stderr
    (tmp_path / "ws").mkdir()
    unknown = subprocess.run([sys.executable, "-m", "crucible.harness.cli", "serve", "--task", "nope/nothing",
                              "--workspace", str(tmp_path / "ws")], env=server_env(), capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 2 and "no task 'nope/nothing'" in unknown.stderr and TASK in unknown.stderr


# ---------------------------------------------------------------- MCP Inspector


@pytest.mark.skipif(shutil.which("npx") is None, reason="npm/npx is not installed: the Inspector runs on Node")
def test_the_tool_schemas_pass_mcp_inspectors_strict_check(ws: Path) -> None:
    # The Inspector starts the server with its own environment: pass what the server needs with -e.
    command = ["npx", "-y", INSPECTOR, "--cli", "-e", f"CRUCIBLE_TASKS={FIXTURES}",
               "-e", f"CRUCIBLE_CACHE={os.environ['CRUCIBLE_CACHE']}", sys.executable, *serve_args(ws),
               "--method", "tools/list", "--strict"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = json.loads(proc.stdout)
    assert {t["name"] for t in listed["tools"]} == {"get_task", "compile", "run_tests", "profile", "submit"}
    assert all("outputSchema" in t for t in listed["tools"])
    problems = [line for line in proc.stderr.splitlines() if "npm warn" not in line and "crucible:" not in line]
    assert not problems, "\n".join(problems)


async def test_the_inspector_sees_a_compile_error_as_is_error(ws: Path) -> None:
    if shutil.which("npx") is None:
        pytest.skip("npm/npx is not installed: the Inspector runs on Node")
    shutil.copyfile(Path(__file__).parent / "planted/vadd_syntax.py", ws / "kernel.py")
    command = ["npx", "-y", INSPECTOR, "--cli", "-e", f"CRUCIBLE_TASKS={FIXTURES}",
               "-e", f"CRUCIBLE_CACHE={os.environ['CRUCIBLE_CACHE']}", sys.executable, *serve_args(ws),
               "--method", "tools/call", "--tool-name", "compile"]
    proc = await anyio.run_process(command, check=False)
    assert proc.returncode == 5, proc.stderr.decode()[-2000:]  # 5: the tool returned isError
    assert "does not compile: kernel.py:1" in proc.stdout.decode()
