"""The real Claude Code and Codex CLIs call every crucible tool through MCP, offline.

Each test runs one headless session against a fake model API on 127.0.0.1 (tests/e2e/fake_*.py) that
asks for the five tools in turn, then checks three witnesses: the CLI's own event stream, the tool
results the CLI sent back to the model, and the token totals the CLI reports against what the fake
reported. The MCP server is the real `crucible serve`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from e2e.clients import (
    CODEX_MODEL,
    CRUCIBLE,
    TASK,
    find_cli,
    http_server,
    mcp_config_text,
    run_claude,
    run_codex,
)
from e2e.fake_anthropic import FakeAnthropic
from e2e.fake_openai import FakeOpenAI

from crucible.harness.clients import TOOL_NAMES, SessionUsage, claude, codex, model_price

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]

CLAUDE = find_cli("claude")
CODEX = find_cli("codex")
needs_claude = pytest.mark.skipif(CLAUDE is None, reason="claude is not installed: run scripts/install-agent-clients.sh")
needs_codex = pytest.mark.skipif(CODEX is None, reason="codex is not installed: run scripts/install-agent-clients.sh")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    subprocess.run([*CRUCIBLE, "workspace", TASK, str(ws)], check=True, capture_output=True, timeout=60)
    return ws


@pytest.fixture(autouse=True)
def _fixture_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(Path(__file__).parent / "fixtures" / "tasks"))


FIELDS = {"get_task": "calling_convention", "compile": "source_hash", "run_tests": "timing_comparable",
          "profile": "kernel_total_us", "submit": "stored_at"}
"""A field of each tool's output model: its presence in what the client sent back proves structured content."""
SERVER = "crucible serve"


def assert_every_tool_answered(usage: SessionUsage, results: dict[str, str]) -> None:
    assert usage.status == "success", (SERVER, usage)
    assert usage.calls_by_tool == {t: 1 for t in TOOL_NAMES}
    assert all(c.ok and c.server == "crucible" for c in usage.tool_calls), usage.tool_calls
    # What the model got back: each tool's result, with a field of that tool's output model in it.
    assert set(results) == set(TOOL_NAMES)
    for tool, text in results.items():
        assert f'"{FIELDS[tool]}"' in text, (SERVER, tool, text[:500])


def check_claude(done: subprocess.CompletedProcess[str], fake: FakeAnthropic) -> SessionUsage:
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    usage = claude.parse_events(lines)
    assert usage.mcp_servers == {"crucible": "connected"}
    assert_every_tool_answered(usage, fake.tool_results())
    # Claude Code keeps each MCP result's structured content in its stream too.
    structured = [e["tool_use_result"]["structuredContent"] for e in map(json.loads, lines)
                  if e.get("type") == "user" and isinstance(e.get("tool_use_result"), dict)]
    assert [FIELDS[t] in s for t, s in zip(TOOL_NAMES, structured, strict=True)] == [True] * 5
    totals = fake.totals()
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        totals.input_tokens, totals.output_tokens, totals.cache_read_input_tokens,
        totals.cache_creation_input_tokens)
    assert usage.turns == len(fake.reported) == 6
    # Claude Code's own cost estimate agrees with our price table for this model.
    price = model_price("claude-sonnet-4-5")
    assert price is not None and usage.cost_source == "cli"
    assert usage.cost_usd == pytest.approx(price.cost(usage), rel=1e-9)
    assert {r.authorization for r in fake.requests} == {"sk-ant-fake"}
    return usage


def check_codex(done: subprocess.CompletedProcess[str], fake: FakeOpenAI) -> SessionUsage:
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    usage = codex.parse_events(lines, model=CODEX_MODEL)
    assert_every_tool_answered(usage, fake.tool_results())
    items = [e["item"] for e in map(json.loads, lines)
             if e.get("type") == "item.completed" and e["item"].get("type") == "mcp_tool_call"]
    assert [FIELDS[i["tool"]] in i["result"]["structured_content"] for i in items] == [True] * 5
    totals = fake.totals()
    assert usage.input_tokens + usage.cache_read_tokens == totals.input_tokens
    assert (usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
        totals.cached_tokens, totals.output_tokens, totals.reasoning_tokens)
    assert len(fake.reported) == 6
    assert usage.cost_source == "price_table" and usage.cost_usd is not None and usage.cost_usd > 0
    assert {r.authorization for r in fake.requests} == {"Bearer sk-openai-fake"}
    return usage


@needs_claude
def test_claude_code_calls_every_tool_over_stdio(workspace: Path, tmp_path: Path) -> None:
    config = mcp_config_text("claude", workspace)
    with FakeAnthropic(TOOL_NAMES) as fake:
        done = run_claude(str(CLAUDE), config, workspace, tmp_path / "home", fake.url)
    check_claude(done, fake)


@needs_codex
def test_codex_calls_every_tool_over_stdio(workspace: Path, tmp_path: Path) -> None:
    config = mcp_config_text("codex", workspace)
    with FakeOpenAI(TOOL_NAMES) as fake:
        done = run_codex(str(CODEX), config, workspace, tmp_path / "home", fake.url)
    check_codex(done, fake)


def _http_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "HOME") or k.startswith("CRUCIBLE_")}


@needs_claude
def test_claude_code_calls_every_tool_over_http_with_a_bearer_token(workspace: Path, tmp_path: Path) -> None:
    with http_server(workspace, _http_env()) as (server, token):
        config = mcp_config_text("claude", workspace, "--transport", "http", "--url", server.url)
        assert token not in config and "${CRUCIBLE_MCP_TOKEN}" in config
        with FakeAnthropic(TOOL_NAMES) as fake:
            done = run_claude(str(CLAUDE), config, workspace, tmp_path / "home", fake.url,
                              extra_env={"CRUCIBLE_MCP_TOKEN": token})
        check_claude(done, fake)


@needs_codex
def test_codex_calls_every_tool_over_http_with_a_bearer_token(workspace: Path, tmp_path: Path) -> None:
    with http_server(workspace, _http_env()) as (server, token):
        config = mcp_config_text("codex", workspace, "--transport", "http", "--url", server.url)
        assert token not in config and 'bearer_token_env_var = "CRUCIBLE_MCP_TOKEN"' in config
        with FakeOpenAI(TOOL_NAMES) as fake:
            done = run_codex(str(CODEX), config, workspace, tmp_path / "home", fake.url,
                             extra_env={"CRUCIBLE_MCP_TOKEN": token})
        check_codex(done, fake)


@needs_claude
def test_claude_code_gets_no_tools_when_the_http_token_is_wrong(workspace: Path, tmp_path: Path) -> None:
    with http_server(workspace, _http_env()) as (server, _token):
        config = mcp_config_text("claude", workspace, "--transport", "http", "--url", server.url)
        with FakeAnthropic(TOOL_NAMES) as fake:
            done = run_claude(str(CLAUDE), config, workspace, tmp_path / "home", fake.url,
                              extra_env={"CRUCIBLE_MCP_TOKEN": "not-the-token"})
    usage = claude.parse_events(done.stdout.splitlines())
    # The run itself goes on without the tools: the harness must read this, not the exit code.
    assert done.returncode == 0 and usage.status == "success"
    assert usage.mcp_servers == {"crucible": "failed"} and usage.tool_calls == []
    offered = {t["name"] for r in fake.requests if isinstance(r.body, dict) for t in r.body.get("tools") or []}
    assert not any(name.startswith("mcp__crucible__") for name in offered)



@needs_codex
def test_codex_refuses_to_start_when_the_http_token_is_wrong(workspace: Path, tmp_path: Path) -> None:
    with http_server(workspace, _http_env()) as (server, _token):
        config = mcp_config_text("codex", workspace, "--transport", "http", "--url", server.url)
        with FakeOpenAI(TOOL_NAMES) as fake:
            done = run_codex(str(CODEX), config, workspace, tmp_path / "home", fake.url,
                             extra_env={"CRUCIBLE_MCP_TOKEN": "not-the-token"})
    # The server is `required`: Codex stops before asking the model anything, and says why on stderr.
    assert done.returncode != 0 and fake.requests == []
    assert "required MCP servers failed to initialize" in done.stderr
    assert codex.parse_events(done.stdout.splitlines()).status == "incomplete"
