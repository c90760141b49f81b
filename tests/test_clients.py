"""Agent client modules: their MCP configs, headless commands, and event parsing on recorded streams."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from e2e import fake_anthropic, fake_openai

from crucible.harness import cli
from crucible.harness.clients import (
    CLIENTS,
    TOOL_NAMES,
    ClientError,
    HeadlessSpec,
    HttpServer,
    StdioServer,
    claude,
    codex,
    crucible_server,
    cursor,
    find_binary,
    model_price,
)
from crucible.harness.clients.base import price_table

RECORDED = Path(__file__).parent / "e2e" / "recorded"
FIXTURE_TASKS = Path(__file__).parent / "fixtures" / "tasks"
SECRET = "s3cret-token-value-never-printed"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURE_TASKS))
    monkeypatch.setenv("CRUCIBLE_MCP_TOKEN", SECRET)


def mcp_config(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert cli.main(["mcp-config", "--task", "triton2triton/vadd", *args]) == 0
    return capsys.readouterr().out


def lines(name: str) -> list[str]:
    return (RECORDED / name).read_text().splitlines()


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize("client", ["claude", "cursor"])
def test_json_stdio_config_starts_crucible_serve_with_absolute_paths(
        client: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = mcp_config(capsys, "--client", client, "--workspace", "ws")
    entry = json.loads(out)["mcpServers"]["crucible"]
    assert entry["type"] == "stdio"
    assert Path(entry["command"]).is_absolute() and Path(entry["command"]).exists()
    serve = entry["args"][entry["args"].index("serve"):]
    assert serve == ["serve", "--task", "triton2triton/vadd", "--workspace", str(tmp_path / "ws")]
    assert entry["env"]["CRUCIBLE_TASKS"] == str(FIXTURE_TASKS)
    assert "PATH" in entry["env"]
    assert SECRET not in out


def test_codex_stdio_config_is_toml_with_the_environment_and_approval_codex_needs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = mcp_config(capsys, "--client", "codex", "--workspace", str(tmp_path))
    entry = tomllib.loads(out)["mcp_servers"]["crucible"]
    assert Path(entry["command"]).is_absolute()
    assert entry["args"][-4:] == ["--task", "triton2triton/vadd", "--workspace", str(tmp_path)]
    # Codex filters the environment of the servers it starts, and refuses tool calls in exec mode
    # unless they are approved up front.
    assert entry["env"]["CRUCIBLE_TASKS"] == str(FIXTURE_TASKS) and "PATH" in entry["env"]
    assert entry["default_tools_approval_mode"] == "approve"
    assert entry["required"] is True  # or Codex starts the session without a server slower than ~0.5 s
    assert entry["tool_timeout_sec"] >= 600
    assert SECRET not in out


@pytest.mark.parametrize(("client", "reference"), [
    ("claude", "Bearer ${CRUCIBLE_MCP_TOKEN}"), ("cursor", "Bearer ${env:CRUCIBLE_MCP_TOKEN}")])
def test_json_http_config_names_the_token_variable_never_the_token(
        client: str, reference: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = mcp_config(capsys, "--client", client, "--workspace", "/w", "--transport", "http",
                     "--url", "http://127.0.0.1:8123/mcp")
    entry = json.loads(out)["mcpServers"]["crucible"]
    assert entry["url"] == "http://127.0.0.1:8123/mcp"
    assert entry["headers"] == {"Authorization": reference}
    assert SECRET not in out


def test_codex_http_config_uses_bearer_token_env_var(capsys: pytest.CaptureFixture[str]) -> None:
    out = mcp_config(capsys, "--client", "codex", "--workspace", "/w", "--transport", "http",
                     "--url", "http://127.0.0.1:8123/mcp", "--token-env", "MY_TOKEN", "--name", "arena")
    entry = tomllib.loads(out)["mcp_servers"]["arena"]
    assert entry == {"url": "http://127.0.0.1:8123/mcp", "bearer_token_env_var": "MY_TOKEN", "required": True,
                     "default_tools_approval_mode": "approve", "tool_timeout_sec": codex.TOOL_TIMEOUT_S}
    assert SECRET not in out


def test_stdio_env_never_carries_the_mcp_token() -> None:
    server = crucible_server("t", Path("/w"), environ={"CRUCIBLE_MCP_TOKEN": SECRET, "CRUCIBLE_BACKEND": "cpu",
                                                      "PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x"})
    assert isinstance(server, StdioServer)
    assert server.env == {"CRUCIBLE_BACKEND": "cpu", "PATH": "/bin"}


def test_toml_strings_survive_quotes_backslashes_and_unicode() -> None:
    odd = 'C:\\dir "quoted"\ttab\x7f é 🚀'
    env = {"WEIRD-NAME.X": odd, "é": odd}
    text = codex.mcp_config(StdioServer(command="/bin/x", args=[odd], env=env))
    entry = tomllib.loads(text)["mcp_servers"]["crucible"]
    assert entry["args"] == [odd] and entry["env"] == env


def test_http_without_a_url_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mcp-config", "--client", "claude", "--task", "triton2triton/vadd", "--workspace", "/w",
                     "--transport", "http"]) == 2
    assert "--url" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["cru cible", "a.b", "x/y", ""])
def test_a_server_name_that_breaks_tool_names_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mcp-config", "--client", "codex", "--task", "triton2triton/vadd", "--workspace", "/w",
                     "--name", bad]) == 2
    assert "server name" in capsys.readouterr().err


def test_an_unknown_task_is_refused_before_any_config_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mcp-config", "--client", "claude", "--task", "no/such", "--workspace", "/w"]) == 2
    assert capsys.readouterr().out == ""


def test_every_client_config_goes_where_the_client_reads_it(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    assert claude.config_path(home, ws).parent == home
    assert codex.config_path(home, ws) == home / "config.toml"
    assert cursor.config_path(home, ws) == ws / ".cursor" / "mcp.json"
    assert set(CLIENTS) == {"claude", "codex", "cursor"}
    for module in CLIENTS.values():
        server = HttpServer(url="http://127.0.0.1:1/mcp")
        assert "crucible" in module.mcp_config(server)


# ---------------------------------------------------------------- headless commands


def spec(**kw: object) -> HeadlessSpec:
    return HeadlessSpec.model_validate({"binary": "/bin/cli", "prompt": "do it", "workspace": Path("/w"),
                                        "mcp_config": Path("/h/mcp.json"), "model": "m"} | kw)


def test_claude_headless_command_allows_only_the_crucible_tools_and_the_configured_server() -> None:
    cmd = claude.headless_command(spec(builtin_tools=(), max_budget_usd=2.5, max_turns=40))
    assert cmd[:3] == ["/bin/cli", "-p", "do it"]
    assert "--strict-mcp-config" in cmd and cmd[cmd.index("--mcp-config") + 1] == "/h/mcp.json"
    allowed = cmd[cmd.index("--allowedTools") + 1:cmd.index("--permission-mode")]
    assert allowed == [f"mcp__crucible__{t}" for t in TOOL_NAMES]
    assert cmd[cmd.index("--tools") + 1] == ""
    assert cmd[cmd.index("--setting-sources") + 1] == ""
    assert cmd[cmd.index("--max-budget-usd") + 1] == "2.5" and cmd[cmd.index("--max-turns") + 1] == "40"
    default = claude.headless_command(spec())
    assert default[default.index("--tools") + 1] == ",".join(claude.DEFAULT_BUILTINS)
    with pytest.raises(ClientError):
        claude.headless_command(spec(mcp_config=None))


def test_codex_headless_command_ends_the_options_before_the_prompt() -> None:
    cmd = codex.headless_command(spec(prompt="--not-a-flag"))
    assert cmd[:4] == ["/bin/cli", "exec", "--json", "--skip-git-repo-check"]
    assert cmd[cmd.index("-C") + 1] == "/w" and cmd[-2:] == ["--", "--not-a-flag"]


def test_cursor_headless_command_approves_mcp_servers() -> None:
    cmd = cursor.headless_command(spec())
    assert {"-p", "--force", "--approve-mcps"} <= set(cmd) and cmd[-1] == "do it"
    assert cmd[cmd.index("--output-format") + 1] == "stream-json"


def test_a_missing_cli_says_what_to_install() -> None:
    with pytest.raises(ClientError, match="@openai/codex"):
        find_binary("codex-not-installed-here", codex.INSTALL_HINT)


# ---------------------------------------------------------------- event parsing


def test_claude_events_give_the_result_totals_and_every_tool_call() -> None:
    usage = claude.parse_events(lines("claude-stdio.jsonl"))
    n = 6  # the fake answered six requests: five tool calls and the final text
    reported = [fake_anthropic.usage_for(i) for i in range(n)]
    assert usage.model == "claude-sonnet-4-5" and usage.turns == n and usage.status == "success"
    assert usage.mcp_servers == {"crucible": "connected"}
    assert usage.input_tokens == sum(u.input_tokens for u in reported)
    assert usage.output_tokens == sum(u.output_tokens for u in reported)
    assert usage.cache_read_tokens == sum(u.cache_read_input_tokens for u in reported)
    assert usage.cache_write_tokens == sum(u.cache_creation_input_tokens for u in reported)
    assert usage.cost_source == "cli" and usage.cost_usd == pytest.approx(0.02512125)
    assert usage.calls_by_tool == {t: 1 for t in TOOL_NAMES}
    assert all(c.ok and c.server == "crucible" for c in usage.tool_calls)


def test_claude_budget_stop_is_its_own_status() -> None:
    result = json.dumps({"type": "result", "subtype": "error_max_budget_usd", "is_error": True, "num_turns": 3,
                         "total_cost_usd": 1.01, "usage": {"input_tokens": 5, "output_tokens": 1}})
    usage = claude.parse_events(["not json", result])
    assert (usage.status, usage.detail, usage.unparsed_lines) == ("budget_exceeded", "error_max_budget_usd", 1)


def test_codex_events_split_cached_input_and_price_the_run() -> None:
    usage = codex.parse_events(lines("codex-stdio.jsonl"), model="gpt-5")
    reported = [fake_openai.usage_for(i) for i in range(6)]
    cached = sum(u.cached_tokens for u in reported)
    assert usage.cache_read_tokens == cached
    assert usage.input_tokens == sum(u.input_tokens for u in reported) - cached
    assert usage.output_tokens == sum(u.output_tokens for u in reported)
    assert usage.reasoning_tokens == sum(u.reasoning_tokens for u in reported)
    # The stream's `error` item (unknown model metadata) is a warning, not a failed run.
    assert usage.status == "success" and usage.turns == 1
    assert usage.calls_by_tool == {t: 1 for t in TOOL_NAMES}
    price = model_price("gpt-5")
    assert price is not None and usage.cost_source == "price_table"
    assert usage.cost_usd == pytest.approx((usage.input_tokens * 1.25 + cached * 0.125
                                            + usage.output_tokens * 10) / 1e6)


def test_codex_without_a_known_model_has_no_cost() -> None:
    usage = codex.parse_events(lines("codex-stdio.jsonl"))
    assert usage.cost_usd is None and usage.cost_source == "unknown"


def test_codex_failed_turn_is_an_error_with_its_message() -> None:
    events = [json.dumps({"type": "turn.started"}),
              json.dumps({"type": "turn.failed", "error": {"message": "stream disconnected"}})]
    usage = codex.parse_events(events)
    assert (usage.status, usage.detail) == ("error", "stream disconnected")


def test_cursor_events_count_tools_tokens_and_price_from_the_table() -> None:
    usage = cursor.parse_events(lines("cursor-session.jsonl"))
    assert usage.model == "sonnet-4.5" and usage.status == "success" and usage.turns == 6
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        41250, 2310, 180400, 12800)
    assert usage.calls_by_tool == {"read": 1, "shell": 1} | {t: 1 for t in TOOL_NAMES}
    mcp = [c for c in usage.tool_calls if c.server == "crucible"]
    assert [c.name for c in mcp] == list(TOOL_NAMES) and all(c.ok for c in mcp)
    assert [c.ok for c in usage.tool_calls if c.name == "shell"] == [False]
    assert usage.cost_source == "price_table"
    assert usage.cost_usd == pytest.approx((41250 * 3 + 2310 * 15 + 180400 * 0.3 + 12800 * 3.75) / 1e6)


def test_cursor_stream_cut_short_is_incomplete_and_auto_is_not_a_price() -> None:
    usage = cursor.parse_events(lines("cursor-killed.jsonl"))
    assert usage.status == "incomplete" and usage.model is None
    assert usage.cost_usd is None and usage.cost_source == "unknown"
    assert usage.unparsed_lines == 1
    assert usage.calls_by_tool == {"read": 1, "get_task": 1}


def test_price_table_matches_dated_ids_and_aliases_but_not_strangers() -> None:
    assert price_table().models
    assert model_price("claude-sonnet-4-5-20250929") == model_price("sonnet-4.5") is not None
    assert model_price("gpt-5-mini-2025-08-07") == model_price("gpt-5-mini") != model_price("gpt-5")
    assert model_price("gpt-5.2-unknown") is None
    assert model_price("claude-sonnet-4") is None


def _claude_result(cost: float, tokens: int) -> str:
    return json.dumps({"type": "result", "subtype": "success", "num_turns": 1, "total_cost_usd": cost,
                       "usage": {"input_tokens": tokens, "output_tokens": tokens}})


@pytest.mark.parametrize("forged_first", [False, True])
def test_a_final_event_written_into_the_clis_stream_by_someone_else_never_lowers_the_accounting(
        forged_first: bool) -> None:
    # An agent's shell shares the CLI's pid namespace and user: it can write a cheap `result` line into the
    # pipe the harness reads (/proc/$PPID/fd/1), before or after the real one.
    real, forged = _claude_result(3.21, 2_000_000), _claude_result(0.0001, 10)
    stream = [*lines("claude-stdio.jsonl")[:-1], *([forged, real] if forged_first else [real, forged])]
    usage = claude.parse_events(stream)
    assert usage.cost_usd == pytest.approx(3.21) and usage.input_tokens == 2_000_000
    assert (usage.final_events, usage.foreign_events) == (2, 1)
    honest = claude.parse_events([real])
    assert (honest.final_events, honest.foreign_events) == (1, 0)


def test_negative_counts_are_foreign_events_and_cannot_subtract_from_a_session() -> None:
    negative = {"input_tokens": -10**9, "output_tokens": -10**9}
    codex_usage = codex.parse_events([*lines("codex-stdio.jsonl"),
                                      json.dumps({"type": "turn.completed", "usage": negative})], model="gpt-5")
    assert codex_usage.foreign_events == 1 and codex_usage.output_tokens > 0
    claude_usage = claude.parse_events([_claude_result(1.0, 5),
                                        json.dumps({"type": "result", "subtype": "success", "total_cost_usd": -5})])
    assert claude_usage.foreign_events == 1 and claude_usage.cost_usd == pytest.approx(1.0)


@pytest.mark.parametrize(("parse", "forged"), [
    (claude.parse_events, {"type": "assistant", "message": "x"}),
    (claude.parse_events, {"type": "assistant", "message": {"content": ["x"]}}),
    (claude.parse_events, {"type": "system", "subtype": "init", "mcp_servers": [{"name": ["a"]}]}),
    (claude.parse_events, {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": [1]}]}}),
    (claude.parse_events, {"type": "system", "subtype": "init", "model": 5}),
    (codex.parse_events, {"type": "item.completed", "item": "x"}),
    (codex.parse_events, {"type": "turn.completed", "usage": "x"}),
    (cursor.parse_events, {"type": "system", "subtype": "init", "model": 5}),
    (cursor.parse_events, {"model_call_id": [1]}),
    (cursor.parse_events, {"type": "tool_call", "subtype": "completed", "tool_call": ["x"]}),
])
def test_an_event_with_fields_of_the_wrong_type_is_foreign_and_never_breaks_the_parse(parse, forged) -> None:
    # Written into the CLI's stdout by the agent's shell, such a line made the parser raise: the session
    # became infra_error (never scored, run again on --resume).
    usage = parse([json.dumps(forged), _claude_result(1.0, 5)], "claude-sonnet-4-5")
    assert usage.foreign_events >= 1
    assert usage.model is None or isinstance(usage.model, str)
