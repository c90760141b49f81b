"""Running the real agent CLIs against the fake model APIs and a crucible MCP server.

    find_cli(name)              the CLI installed by scripts/install-agent-clients.sh, or None
    mcp_config_text(...)        `crucible mcp-config` output, used as it is
    http_server(...)            a server over streamable HTTP with a bearer token, for one test
    run_claude / run_codex      one headless session, isolated: scratch HOME, config dir, TMPDIR
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from crucible.harness.clients import HeadlessSpec, HttpServer, claude, codex
from crucible.harness.clients.base import npm_clients_bin

ROOT = Path(__file__).resolve().parents[2]
CRUCIBLE = [sys.executable, "-m", "crucible.harness.cli"]
TASK = "triton2triton/vadd"
TOKEN_ENV = "CRUCIBLE_MCP_TOKEN"
PROMPT = "Call each crucible tool once: get_task, compile, run_tests, profile, submit."
RUN_TIMEOUT_S = 90


def find_cli(name: str) -> str | None:
    path = npm_clients_bin() / name
    return str(path) if path.is_file() else None


def mcp_config_text(client: str, workspace: Path, *extra: str) -> str:
    """The config `crucible mcp-config` prints, used as it is."""
    return subprocess.run([*CRUCIBLE, "mcp-config", "--client", client, "--task", TASK,
                           "--workspace", str(workspace), *extra],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(workspace: Path, env: dict[str, str]) -> Iterator[tuple[HttpServer, str]]:
    """A server on a free loopback port with a fresh token; yields it and the token."""
    token = secrets.token_urlsafe(24)
    port = _free_port()
    proc = subprocess.Popen([*CRUCIBLE, "serve", "--task", TASK, "--workspace", str(workspace),
                             "--transport", "http", "--host", "127.0.0.1", "--port", str(port)],
                            env=env | {TOKEN_ENV: token}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the HTTP server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the HTTP server did not listen on port {port} within 30 s") from None
                time.sleep(0.1)
        yield HttpServer(url=f"http://127.0.0.1:{port}/mcp", token_env=TOKEN_ENV), token
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _base_env(home: Path) -> dict[str, str]:
    """A scratch HOME and TMPDIR, and only what the CLIs need from this environment."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG") or k.startswith("CRUCIBLE_")}
    keep.pop(TOKEN_ENV, None)
    return keep | {"HOME": str(home), "TMPDIR": str(home / "tmp")}


def run_claude(binary: str, config: str, workspace: Path, home: Path, api_url: str,
               extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    config_file = claude.config_path(home, workspace)
    home.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config)
    env = _base_env(home) | claude.session_env(home) | {
        "CLAUDE_CODE_TMPDIR": str(home / "tmp"), "ANTHROPIC_BASE_URL": api_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake"} | (extra_env or {})
    cmd = claude.headless_command(HeadlessSpec(binary=binary, prompt=PROMPT, workspace=workspace,
                                               mcp_config=config_file, model="claude-sonnet-4-5",
                                               builtin_tools=(), max_budget_usd=5, max_turns=12))
    return subprocess.run(cmd, cwd=workspace, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)


CODEX_MODEL = "gpt-5"


def run_codex(binary: str, config: str, workspace: Path, home: Path, api_url: str,
              extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    # Top-level keys first: in TOML they must precede the tables that `crucible mcp-config` prints.
    provider = (f'model = "{CODEX_MODEL}"\nmodel_provider = "fake"\n\n[model_providers.fake]\nname = "fake"\n'
                f'base_url = "{api_url}/v1"\nenv_key = "FAKE_OPENAI_API_KEY"\nwire_api = "responses"\n\n')
    codex.config_path(codex_home, workspace).write_text(provider + config)
    env = _base_env(home) | codex.session_env(codex_home) | {"FAKE_OPENAI_API_KEY": "sk-openai-fake"} \
        | (extra_env or {})
    cmd = codex.headless_command(HeadlessSpec(binary=binary, prompt=PROMPT, workspace=workspace,
                                              model=CODEX_MODEL))
    return subprocess.run(cmd, cwd=workspace, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S)
