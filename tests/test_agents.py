"""The agents drive real sessions: the real `claude` and `codex` CLIs (against the fake model APIs of
tests/e2e), a fake Cursor `agent` that prints a recorded stream, and the `api` loop against a fake chat
endpoint, each with a real `crucible serve --transport http` whose ledger is the witness of the calls.
The CLIs run inside the agent sandbox when this machine has one (tests/e2e/agent_session.py).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from e2e.agent_session import free_port, leftover_processes, served_session
from e2e.clients import find_cli
from e2e.fake_anthropic import FakeAnthropic
from e2e.fake_chat import SOLUTION, FakeChat
from e2e.fake_edit import NOTE, TEXT, ShellOpenAI, WritingAnthropic
from e2e.fake_openai import FakeOpenAI
from e2e.fake_stall import StallingAnthropic, StallingOpenAI

from crucible.harness.agents import AgentUnavailable, get_agent
from crucible.harness.agents.api import ApiAgent, confined
from crucible.harness.agents.process import KILL_GRACE_S
from crucible.harness.clients import TOOL_NAMES, cursor, model_price
from crucible.harness.models import RunConfig
from crucible.harness.sandbox import probe_agent_sandbox

pytestmark = pytest.mark.timeout(180)

CLAUDE = find_cli("claude")
CODEX = find_cli("codex")
needs_claude = pytest.mark.skipif(CLAUDE is None, reason="claude is not installed: run scripts/install-agent-clients.sh")
needs_codex = pytest.mark.skipif(CODEX is None, reason="codex is not installed: run scripts/install-agent-clients.sh")
RECORDED = Path(__file__).parent / "e2e" / "recorded"
KEYS = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "CRUCIBLE_OPENAI_BASE_URL", "CURSOR_API_KEY",
        "CRUCIBLE_API_BASE_URL", "CRUCIBLE_API_KEY")


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(Path(__file__).parent / "fixtures" / "tasks"))
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)


def assert_sandboxed_when_possible(prefix: list[str]) -> None:
    assert bool(prefix) == probe_agent_sandbox().available


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/mcp"


def config_files(home: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in home.rglob("*") if p.is_file() and p.stat().st_size < 1e6)


# ------------------------------------------------------------------------------------------- Claude Code

@pytest.mark.slow
@needs_claude
def test_claude_code_calls_every_tool_and_reports_its_own_tokens_and_cost(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent("claude-code")
    with FakeAnthropic(TOOL_NAMES) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        with served_session(tmp_path, "claude-code", "claude-sonnet-4-5", binary=CLAUDE, budget_usd=5) as s:
            agent.preflight(s.ctx.config)
            result = agent.run(s.ctx, threading.Event())
            called = s.tools_called()
    assert_sandboxed_when_possible(s.ctx.sandbox_prefix)
    assert result.end.reason == "finished", result.end
    assert called == list(TOOL_NAMES)
    totals = fake.totals()
    u = result.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        totals.input_tokens, totals.output_tokens, totals.cache_read_input_tokens, totals.cache_creation_input_tokens)
    final = [json.loads(line) for line in s.ctx.events_path.read_text().splitlines() if '"result"' in line][-1]
    assert u.cost_source == "cli" and u.cost_usd == final["total_cost_usd"] > 0
    assert u.turns == len(fake.reported) == 6
    # No key in the harness's environment: the dummy one went to the fake; the token never hit a file.
    assert {r.authorization for r in fake.requests} == {"crucible-dummy-key"}
    assert s.ctx.token not in config_files(s.ctx.home)


@pytest.mark.slow  # a real agent CLI against a fake model API
@needs_claude
def test_claude_code_without_its_mcp_server_ends_as_infra_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent("claude-code")
    with FakeAnthropic(TOOL_NAMES) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        with served_session(tmp_path, "claude-code", "claude-sonnet-4-5", binary=CLAUDE) as s:
            result = agent.run(s.ctx.model_copy(update={"mcp_url": dead_url()}), threading.Event())
    assert result.end.reason == "infra_error", result.end
    assert "MCP server" in result.end.message and "failed" in result.end.message


# ------------------------------------------------------------------------------------------------ Codex

@pytest.mark.slow
@needs_codex
def test_codex_calls_every_tool_and_is_priced_from_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent("codex")
    with FakeOpenAI(TOOL_NAMES) as fake:
        monkeypatch.setenv("CRUCIBLE_OPENAI_BASE_URL", f"{fake.url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-fake")
        with served_session(tmp_path, "codex", "gpt-5", binary=CODEX, budget_usd=5) as s:
            agent.preflight(s.ctx.config)
            result = agent.run(s.ctx, threading.Event())
            called = s.tools_called()
    assert_sandboxed_when_possible(s.ctx.sandbox_prefix)
    assert result.end.reason == "finished", result.end
    assert called == list(TOOL_NAMES)
    totals, u = fake.totals(), result.usage
    assert (u.input_tokens + u.cache_read_tokens, u.cache_read_tokens, u.output_tokens) == (
        totals.input_tokens, totals.cached_tokens, totals.output_tokens)
    price = model_price("gpt-5")
    assert price is not None and u.cost_source == "price_table"
    expected = ((totals.input_tokens - totals.cached_tokens) * price.input + totals.output_tokens * price.output
                + totals.cached_tokens * price.cache_read) / 1e6
    assert u.cost_usd == pytest.approx(expected, rel=1e-9)
    assert {r.authorization for r in fake.requests} == {"Bearer sk-openai-fake"}
    assert s.ctx.token not in config_files(s.ctx.home)


@pytest.mark.slow  # a real agent CLI against a fake model API
@needs_codex
def test_codex_without_its_mcp_server_ends_as_infra_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent("codex")
    with FakeOpenAI(TOOL_NAMES) as fake:
        monkeypatch.setenv("CRUCIBLE_OPENAI_BASE_URL", f"{fake.url}/v1")
        with served_session(tmp_path, "codex", "gpt-5", binary=CODEX) as s:
            result = agent.run(s.ctx.model_copy(update={"mcp_url": dead_url()}), threading.Event())
    assert result.end.reason == "infra_error", result.end
    assert "MCP server" in result.end.message


# --------------------------------------------------------------------------------- limits, for both CLIs

@pytest.mark.slow  # a real agent CLI against a fake model API
@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_a_stalled_model_is_stopped_at_the_time_limit_with_no_process_left(name: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    binary = CLAUDE if name == "claude-code" else CODEX
    if binary is None:
        pytest.skip(f"{name} is not installed: run scripts/install-agent-clients.sh")
    agent = get_agent(name)
    fake = StallingAnthropic() if name == "claude-code" else StallingOpenAI()
    with fake:
        url_env = "ANTHROPIC_BASE_URL" if name == "claude-code" else "CRUCIBLE_OPENAI_BASE_URL"
        monkeypatch.setenv(url_env, fake.url + ("/v1" if name == "codex" else ""))
        with served_session(tmp_path, name, None, binary=binary, time_limit_s=3) as s:
            started = time.monotonic()
            result = agent.run(s.ctx, threading.Event())
            took = time.monotonic() - started
            left = leftover_processes(s.ctx.home)
    assert result.end.reason == "time_limit", result.end
    assert 3 <= took < 3 + KILL_GRACE_S + 3
    assert fake.requests, "the CLI reached the stalling model before it was stopped"
    assert left == []


@pytest.mark.slow  # a real agent CLI against a fake model API
@needs_claude
def test_cancel_stops_the_agent_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with StallingAnthropic() as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        with served_session(tmp_path, "claude-code", None, binary=CLAUDE, time_limit_s=60) as s:
            cancel = threading.Event()
            threading.Timer(1.0, cancel.set).start()
            started = time.monotonic()
            result = get_agent("claude-code").run(s.ctx, cancel)
            took = time.monotonic() - started
            left = leftover_processes(s.ctx.home)
    assert result.end.reason == "infra_error" and "cancelled" in result.end.message
    assert took < 1 + KILL_GRACE_S + 3 and left == []


# ------------------------------------------------------------------------------------------- preflight

def test_preflight_without_the_cli_names_the_install_script(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CRUCIBLE_NPM_CLIENTS", str(tmp_path / "none"))
    for name, package in (("claude-code", "@anthropic-ai/claude-code"), ("codex", "@openai/codex")):
        with pytest.raises(AgentUnavailable, match="install-agent-clients.sh") as info:
            get_agent(name).preflight(RunConfig(agent=name))  # type: ignore[arg-type]
        assert package in str(info.value)


@pytest.mark.parametrize(("name", "key", "url_env"), [("claude-code", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
                                                      ("codex", "OPENAI_API_KEY", "CRUCIBLE_OPENAI_BASE_URL")])
def test_preflight_without_an_api_key_says_which_to_set(name: str, key: str, url_env: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent(name)
    try:
        agent.find_binary()  # type: ignore[attr-defined]
    except AgentUnavailable:
        pytest.skip(f"{name} is not installed: run scripts/install-agent-clients.sh")
    with pytest.raises(AgentUnavailable, match=f"set {key}"):
        agent.preflight(RunConfig(agent=name))  # type: ignore[arg-type]
    monkeypatch.setenv(url_env, "http://127.0.0.1:9/v1")  # a test endpoint: any key will do
    agent.preflight(RunConfig(agent=name))  # type: ignore[arg-type]
    monkeypatch.delenv(url_env)
    monkeypatch.setenv(key, "sk-real")
    agent.preflight(RunConfig(agent=name))  # type: ignore[arg-type]


def test_preflight_refuses_a_budget_it_cannot_price(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_cli(tmp_path, monkeypatch, "session")
    monkeypatch.setenv("CURSOR_API_KEY", "key")
    agent = get_agent("cursor")
    with pytest.raises(AgentUnavailable, match="prices.toml"):
        agent.preflight(RunConfig(agent="cursor", model="mystery-model", budget_usd=1))
    agent.preflight(RunConfig(agent="cursor", model="sonnet-4.5", budget_usd=1))


# --------------------------------------------------------------------------------------------- Cursor

def test_cursor_preflight_says_its_cli_is_not_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CURSOR_API_KEY", "key")
    with pytest.raises(AgentUnavailable, match="cursor.com/install"):
        get_agent("cursor").preflight(RunConfig(agent="cursor"))


def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: str, after: str = "") -> Path:
    """A fake Cursor `agent` on PATH: it records its argv and environment in its HOME, prints a recorded
    stream, then runs `after`."""
    tools = tmp_path / "cursor-cli"
    tools.mkdir(exist_ok=True)
    (tools / "stream.jsonl").write_text((RECORDED / f"cursor-{stream}.jsonl").read_text())
    script = tools / "agent"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "$HOME/argv.txt"\nenv > "$HOME/env.txt"\n'
                      f'cat "{tools}/stream.jsonl"\n{after}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    return tools


def test_cursor_runs_headless_and_accounts_for_its_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = fake_cli(tmp_path, monkeypatch, "session")
    monkeypatch.setenv("CURSOR_API_KEY", "cursor-key")
    monkeypatch.setenv("CRUCIBLE_TEST_CANARY", "must-not-leak")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "must-not-leak-either")
    agent = get_agent("cursor")
    with served_session(tmp_path, "cursor", "sonnet-4.5", tools=[tools]) as s:
        agent.preflight(s.ctx.config)
        result = agent.run(s.ctx, threading.Event())
    assert_sandboxed_when_possible(s.ctx.sandbox_prefix)
    assert result.end.reason == "finished", result.end
    expected = cursor.parse_events((RECORDED / "cursor-session.jsonl").read_text().splitlines(), "sonnet-4.5")
    u = result.usage
    assert (u.turns, u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.cost_usd) == (
        expected.turns, expected.input_tokens, expected.output_tokens, expected.cache_read_tokens,
        expected.cache_write_tokens, expected.cost_usd)
    assert u.cost_source == "price_table" and u.cost_usd and u.input_tokens > 0
    argv = (s.ctx.home / "argv.txt").read_text().splitlines()
    assert argv[:3] == ["-p", "--output-format", "stream-json"] and argv[-1] == s.ctx.prompt
    env = dict(line.split("=", 1) for line in (s.ctx.home / "env.txt").read_text().splitlines() if "=" in line)
    assert env["CURSOR_API_KEY"] == "cursor-key" and env["CRUCIBLE_MCP_TOKEN"] == s.ctx.token
    assert env["HOME"] == str(s.ctx.home) and env["CUDA_VISIBLE_DEVICES"] == ""
    assert "CRUCIBLE_TEST_CANARY" not in env and "ANTHROPIC_API_KEY" not in env
    config = json.loads((s.ctx.workspace / ".cursor" / "mcp.json").read_text())
    assert config["mcpServers"]["crucible"] == {
        "url": s.ctx.mcp_url, "headers": {"Authorization": "Bearer ${env:CRUCIBLE_MCP_TOKEN}"}}
    assert s.ctx.events_path.read_text() == (RECORDED / "cursor-session.jsonl").read_text()


def test_cursor_over_its_budget_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = fake_cli(tmp_path, monkeypatch, "session", after="sleep 60")
    monkeypatch.setenv("CURSOR_API_KEY", "cursor-key")
    with served_session(tmp_path, "cursor", "sonnet-4.5", tools=[tools], budget_usd=0.0001) as s:
        started = time.monotonic()
        result = get_agent("cursor").run(s.ctx, threading.Event())
        took = time.monotonic() - started
        left = leftover_processes(s.ctx.home)
    assert result.end.reason == "budget", result.end
    assert took < 10 and left == []
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0.0001


def test_cursor_killed_mid_stream_is_a_crash_with_what_it_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = fake_cli(tmp_path, monkeypatch, "killed", after="exit 137")
    monkeypatch.setenv("CURSOR_API_KEY", "cursor-key")
    with served_session(tmp_path, "cursor", None, tools=[tools]) as s:
        result = get_agent("cursor").run(s.ctx, threading.Event())
    assert result.end.reason == "crash" and result.end.exit_code == 137
    assert "without a final event" in result.end.message


# ------------------------------------------------------------------------------------------------- api

def api_env(monkeypatch: pytest.MonkeyPatch, base_url: str) -> None:
    monkeypatch.setenv("CRUCIBLE_API_BASE_URL", base_url)
    monkeypatch.setenv("CRUCIBLE_API_KEY", "sk-chat-fake")


def test_api_agent_edits_the_kernel_tests_and_submits_through_mcp(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent("api")
    with FakeChat() as fake:
        api_env(monkeypatch, fake.base_url)
        with served_session(tmp_path, "api", "gpt-5", budget_usd=5) as s:
            agent.preflight(s.ctx.config)
            result = agent.run(s.ctx, threading.Event())
            called = s.tools_called()
    assert result.end.reason == "finished", result.end
    assert called == ["get_task", "run_tests", "submit"]
    assert (s.ctx.workspace / "kernel.py").read_text() == SOLUTION.read_text()
    results = fake.tool_results()
    assert json.loads(results["run_tests"])["correct"] is True
    assert json.loads(results["submit"])["accepted"] is True
    totals, u = fake.totals(), result.usage
    assert (u.turns, u.input_tokens, u.cache_read_tokens, u.output_tokens) == (
        5, totals.prompt_tokens - totals.cached_tokens, totals.cached_tokens, totals.completion_tokens)
    price = model_price("gpt-5")
    assert price is not None and u.cost_source == "price_table"
    assert u.cost_usd == pytest.approx(((totals.prompt_tokens - totals.cached_tokens) * price.input
                                        + totals.cached_tokens * price.cache_read
                                        + totals.completion_tokens * price.output) / 1e6, rel=1e-9)
    assert {r.authorization for r in fake.requests} == {"Bearer sk-chat-fake"}
    offered = {t["function"]["name"] for t in fake.requests[0].body["tools"]}
    assert offered == {*TOOL_NAMES, "read_file", "write_file"}
    events = [json.loads(line) for line in s.ctx.events_path.read_text().splitlines()]
    assert [e["type"] for e in events].count("response") == 5 and events[-1]["reason"] == "finished"


def test_api_agent_stops_at_its_budget_turn_limit_and_time_limit(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeChat() as fake:
        api_env(monkeypatch, fake.base_url)
        with served_session(tmp_path / "budget", "api", "gpt-5", budget_usd=0.001) as s:
            assert get_agent("api").run(s.ctx, threading.Event()).end.reason == "budget"
        with served_session(tmp_path / "turns", "api", "gpt-5") as s:
            result = ApiAgent(max_turns=2).run(s.ctx, threading.Event())
            assert result.end.reason == "turn_limit" and result.usage.turns == 2
    with StallingOpenAI() as stall:
        api_env(monkeypatch, f"{stall.url}/v1")
        with served_session(tmp_path / "time", "api", "gpt-5", time_limit_s=2) as s:
            started = time.monotonic()
            assert get_agent("api").run(s.ctx, threading.Event()).end.reason == "time_limit"
            assert time.monotonic() - started < 5


def test_api_agent_refused_by_its_endpoint_ends_as_a_crash_with_the_answer(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeChat() as fake:
        api_env(monkeypatch, fake.url)  # no /v1: the fake answers 404
        with served_session(tmp_path, "api", "gpt-5") as s:
            result = get_agent("api").run(s.ctx, threading.Event())
    assert result.end.reason == "crash" and "404" in result.end.message and "fake: no POST" in result.end.message


def test_api_agent_without_its_mcp_server_ends_as_infra_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeChat() as fake:
        api_env(monkeypatch, fake.base_url)
        with served_session(tmp_path, "api", "gpt-5") as s:
            result = get_agent("api").run(s.ctx.model_copy(update={"mcp_url": dead_url()}), threading.Event())
    assert result.end.reason == "infra_error" and "MCP server" in result.end.message
    assert not fake.requests


def test_api_preflight_needs_the_endpoint_the_key_and_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = get_agent("api")
    with pytest.raises(AgentUnavailable, match="CRUCIBLE_API_BASE_URL and CRUCIBLE_API_KEY"):
        agent.preflight(RunConfig(agent="api", model="gpt-5"))
    api_env(monkeypatch, "http://127.0.0.1:9/v1")
    with pytest.raises(AgentUnavailable, match="--model"):
        agent.preflight(RunConfig(agent="api"))
    agent.preflight(RunConfig(agent="api", model="gpt-5"))


def test_api_file_tools_cannot_leave_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "secret").write_text("hidden")
    (ws / "link").symlink_to(tmp_path / "secret")
    assert confined(ws, "kernel.py") == (ws / "kernel.py").resolve()
    for escape in ("../secret", "/etc/passwd", "link", "sub/../../secret"):
        with pytest.raises(ValueError, match="outside the workspace"):
            confined(ws, escape)


# ------------------------------------------------------------------ the CLIs' own file tools, sandboxed

@pytest.mark.slow  # a real agent CLI against a fake model API
@needs_claude
def test_claude_codes_write_tool_works_in_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with served_session(tmp_path, "claude-code", "claude-sonnet-4-5", binary=CLAUDE) as s, \
            WritingAnthropic(str(s.ctx.workspace)) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        result = get_agent("claude-code").run(s.ctx, threading.Event())
    assert result.end.reason == "finished", result.end
    assert (s.ctx.workspace / NOTE).read_text() == TEXT


@pytest.mark.slow  # a real agent CLI against a fake model API
@needs_codex
def test_codexs_shell_works_in_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with served_session(tmp_path, "codex", "gpt-5", binary=CODEX) as s, ShellOpenAI() as fake:
        monkeypatch.setenv("CRUCIBLE_OPENAI_BASE_URL", f"{fake.url}/v1")
        result = get_agent("codex").run(s.ctx, threading.Event())
    assert result.end.reason == "finished", result.end
    assert (s.ctx.workspace / NOTE).read_text() == TEXT + "\n", fake.outputs
