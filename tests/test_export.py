"""`crucible export`: a run's sessions as CSV, JSONL and Parquet rows, and as ATIF trajectories.

Two run folders: a real scripted run over the fixture task (MCP calls, ledger, score: the whole path), and a
store written through Store's API whose sessions hold the recorded Claude Code, Codex and Cursor streams
(tests/e2e/recorded), an api agent's events, and one session that never ran. The ATIF files are checked
against `AtifDocument` below, written from the required fields and rules of Harbor's RFC 0001 at ATIF-v1.7,
apart from harness/export.py's own models.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from crucible.harness.agents.process import to_usage
from crucible.harness.cli import main
from crucible.harness.clients import claude, codex, cursor, model_price
from crucible.harness.export import PARQUET_HINT, SessionExport, export_run, session_rows
from crucible.harness.models import RunConfig, Score, SessionEnd, SessionSpec, Usage
from crucible.harness.run import execute
from crucible.harness.session import prompt_for
from crucible.harness.store import STORE_FILE, RunRow, ScoreRow, SessionRecord, SessionRow, Store, ToolCallRow
from crucible.toolkit.task import find_task

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "tasks"
RECORDED = HERE / "e2e" / "recorded"
TASK = "triton2triton/vadd"
RUN_ID = "20260101T000000Z-feed01"
AT = "2026-01-01T00:00:00+00:00"
TOOLS = ["get_task", "compile", "run_tests", "profile", "submit"]


# ------------------------------------------------------------------------------- ATIF-v1.7, from the RFC


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SpecToolCall(Spec):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]
    extra: dict[str, Any] | None = None


class SpecResult(Spec):
    source_call_id: str | None = None
    content: str | list[Any] | None = None
    subagent_trajectory_ref: list[Any] | None = None
    extra: dict[str, Any] | None = None


class SpecObservation(Spec):
    results: list[SpecResult]


class SpecMetrics(Spec):
    prompt_tokens: int | None = Field(None, ge=0)
    completion_tokens: int | None = Field(None, ge=0)
    cached_tokens: int | None = Field(None, ge=0)
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _cached_within_prompt(self) -> SpecMetrics:
        if self.cached_tokens is not None and self.prompt_tokens is not None:
            assert self.cached_tokens <= self.prompt_tokens, "cached_tokens are a subset of prompt_tokens"
        return self


class SpecStep(Spec):
    step_id: int
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[Any]
    reasoning_content: str | None = None
    tool_calls: list[SpecToolCall] | None = None
    observation: SpecObservation | None = None
    metrics: SpecMetrics | None = None
    extra: dict[str, Any] | None = None
    llm_call_count: int | None = Field(None, ge=0)
    is_copied_context: bool | None = None

    @model_validator(mode="after")
    def _rules(self) -> SpecStep:
        if self.timestamp is not None:
            datetime.fromisoformat(self.timestamp)  # ISO 8601
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"):
                assert getattr(self, name) is None, f"{name} is for agent steps only"
        if self.llm_call_count == 0:
            assert self.metrics is None and self.reasoning_content is None, "no LLM call: no metrics, no reasoning"
        ids = [c.tool_call_id for c in self.tool_calls or []]
        assert len(ids) == len(set(ids)), "tool_call_id is unique"
        for r in self.observation.results if self.observation else []:
            assert r.source_call_id is None or r.source_call_id in ids, f"{r.source_call_id} is not a call of the step"
        return self


class SpecAgent(Spec):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class SpecFinalMetrics(Spec):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


class AtifDocument(Spec):
    """A trajectory as Harbor's RFC 0001 (ATIF-v1.7) requires it: the required fields, the types, and its
    rules (step ids 1, 2, ... in order; agent-only fields; observation results that name the step's calls)."""

    schema_version: Literal["ATIF-v1.7"]
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: SpecAgent
    steps: list[SpecStep]
    notes: str | None = None
    final_metrics: SpecFinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None
    subagent_trajectories: list[Any] | None = None

    @model_validator(mode="after")
    def _sequential(self) -> AtifDocument:
        assert [s.step_id for s in self.steps] == list(range(1, len(self.steps) + 1)), "step ids 1, 2, ..."
        return self


def load_atif(path: Path) -> AtifDocument:
    return AtifDocument.model_validate(json.loads(path.read_text()))


def calls(doc: AtifDocument) -> list[SpecToolCall]:
    return [c for s in doc.steps for c in s.tool_calls or []]


# ------------------------------------------------------------------------------- the run folders


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real run: the scripted agent submits the fixture task's expert solution. The suite stays the
    fixtures' for the module, so the exporter can rebuild the prompt."""
    out = tmp_path_factory.mktemp("export") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRUCIBLE_TASKS", str(FIXTURES))
        assert execute(RunConfig(model="solution"), out=out, stream=io.StringIO()) == 0
        yield out


API_EVENTS = [
    {"type": "response", "turn": 1, "body": {
        "choices": [{"message": {"role": "assistant", "content": "Compiling, then writing.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "compile", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "write_file",
                                                          "arguments": '{"path": "kernel.py", "content": "x"}'}}]},
                     "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 1500, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 0}}}},
    {"type": "tool_call", "id": "c1", "name": "compile", "arguments": "{}", "ok": True, "result": "r" * 2000},
    {"type": "tool_call", "id": "c2", "name": "write_file", "arguments": "{}", "ok": False, "result": "ERROR: no"},
    {"type": "response", "turn": 2, "body": {
        "choices": [{"message": {"role": "assistant", "content": "Done."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1523, "completion_tokens": 41, "prompt_tokens_details": {"cached_tokens": 100}}}},
    {"type": "end", "reason": "finished", "message": "", "exit_code": None},
]


def recorded_usage(client: Any, name: str, model: str) -> Usage:
    return to_usage(client.parse_events((RECORDED / name).read_text().splitlines(), model), 12.5)


def passed() -> Score:
    return Score(verdict="pass", message="ok", compiled=True, correct=True, generalizes=True, speedup=1.5,
                 speedup_visible=1.4, speedup_hidden=1.6, speedup_against="baseline", evaluator_version="7",
                 flags=["speedup>10x: audit"])


@pytest.fixture(scope="module")
def clients_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store written through Store's API: sessions of four agents, their recorded events in their folders,
    the five crucible calls each in the store; and a scripted session that never ran."""
    run_dir = tmp_path_factory.mktemp("export") / "clients"
    store = Store(run_dir / STORE_FILE)
    store.put_run(RunRow(id=RUN_ID, config=RunConfig().model_dump(mode="json"), config_digest="d", argv=[],
                         crucible_version="0.1.0", evaluator_version="7", evaluator_digest="e", python="3.11",
                         torch="2.9", triton="3.6", device="NVIDIA H200", backend="cuda", sandbox="bwrap",
                         started_at=AT))
    sessions: list[tuple[str, str, str | list[dict[str, Any]], Usage]] = [
        ("claude-code", "claude-sonnet-4-5", "claude-stdio.jsonl",
         recorded_usage(claude, "claude-stdio.jsonl", "claude-sonnet-4-5")),
        ("codex", "gpt-5", "codex-stdio.jsonl", recorded_usage(codex, "codex-stdio.jsonl", "gpt-5")),
        ("cursor", "sonnet-4.5", "cursor-session.jsonl", recorded_usage(cursor, "cursor-session.jsonl", "sonnet-4.5")),
        ("api", "gpt-5", API_EVENTS, Usage(turns=2, input_tokens=2923, cache_read_tokens=100, output_tokens=71,
                                           cost_usd=0.001, cost_source="price_table")),
    ]
    specs = [SessionSpec(run_id=RUN_ID, task=TASK, agent=a, model=m, repeat=0)  # type: ignore[arg-type]
             for a, m, *_ in sessions]
    never = SessionSpec(run_id=RUN_ID, task=TASK, agent="scripted", model="solution", repeat=0)
    store.add_pending([*specs, never])
    for spec, (agent, _, events, usage) in zip(specs, sessions, strict=True):
        folder = run_dir / "sessions" / spec.id
        folder.mkdir(parents=True)
        if isinstance(events, str):
            shutil.copy(RECORDED / events, folder / "events.jsonl")
        else:
            (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        used = ["compile"] if agent == "api" else TOOLS
        row = SessionRow.pending(spec).model_copy(update={"session_dir": str(folder), "started_at": AT})
        store.finish_session(SessionRecord(
            session=row.ended(SessionEnd(reason="finished"), "done", AT),
            tool_calls=[ToolCallRow(session_id=spec.id, call_id=i, tool=t, arguments={}, started_at=AT,
                                    duration_s=0.5, outcome="ok", status="ok", summary=f"{t} answered")
                        for i, t in enumerate(used, 1)],
            submissions=[], usage=usage.model_copy(update={"tool_calls": {t: 1 for t in used}}),
            score=ScoreRow(session_id=spec.id, score=passed(), backend="cuda", scored_at=AT)))
    store.close()
    return run_dir


def session_id(agent: str, model: str) -> str:
    return SessionSpec(run_id=RUN_ID, task=TASK, agent=agent, model=model, repeat=0).id  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def clients_atif(clients_run: Path) -> Path:
    done = export_run(clients_run, "atif")
    assert done.sessions == 4
    return Path(done.path)


# ------------------------------------------------------------------------------- tables


def test_the_csv_has_one_row_per_session_with_the_documented_columns_and_the_stores_values(scripted_run: Path) -> None:
    assert main(["export", str(scripted_run), "--format", "csv"]) == 0
    with open(scripted_run / "export" / "sessions.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == list(SessionExport.model_fields)
    assert reader.fieldnames[:12] == ["model", "gpu", "problem", "compiled", "correct", "speedup", "turns",
                                      "total_tokens", "estimated_cost_usd", "baseline_type", "run_dir",
                                      "solution_link"]  # KernelBench-v3's names, in their order

    store = Store(scripted_run / STORE_FILE)
    run, (session,) = store.run(), store.sessions()
    score, usage, subs = store.score(session.id), store.usage(session.id), store.submissions(session.id)
    store.close()
    assert run is not None and score is not None and usage is not None
    (row,) = rows
    assert row["session_id"] == session.id and row["run_id"] == run.id and row["problem"] == TASK
    assert row["model"] == "solution" and row["agent"] == "scripted" and row["category"] == "triton2triton"
    assert row["gpu"] == run.device and row["backend"] == score.backend and row["run_dir"] == str(scripted_run)
    s = score.score
    cell = {None: ""}
    for column in ("verdict", "compiled", "correct", "generalizes", "speedup", "speedup_visible", "speedup_hidden",
                   "peak_fraction", "submission_hash", "evaluator_version"):
        assert row[column] == cell.get(getattr(s, column), str(getattr(s, column))), column
    assert row["baseline_type"] == cell.get(s.speedup_against, str(s.speedup_against))
    assert json.loads(row["flags"]) == s.flags and row["repeat"] == str(session.repeat)
    assert row["turns"] == "5" and row["total_tokens"] == "0" and row["estimated_cost_usd"] == "0.0"
    assert row["cost_source"] == "none" and json.loads(row["tool_calls"]) == usage.tool_calls
    assert row["solution_link"] == subs[-1].path and row["wall_s"] == str(usage.wall_s)


def test_the_jsonl_loads_with_json_one_row_per_session_pending_ones_empty(clients_run: Path) -> None:
    out = clients_run / "rows.jsonl"
    done = export_run(clients_run, "jsonl", out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    store = Store(clients_run / STORE_FILE)
    assert [r["session_id"] for r in rows] == [s.id for s in store.sessions()] and done.sessions == 5
    store.close()
    assert all(list(r) == list(SessionExport.model_fields) for r in rows)

    claude_row = rows[0]
    usage = recorded_usage(claude, "claude-stdio.jsonl", "claude-sonnet-4-5")
    assert claude_row["agent"] == "claude-code" and claude_row["gpu"] == "NVIDIA H200"
    assert claude_row["input_tokens"] == usage.input_tokens and claude_row["output_tokens"] == usage.output_tokens
    assert claude_row["total_tokens"] == (usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
                                          + usage.output_tokens)
    assert claude_row["estimated_cost_usd"] == usage.cost_usd and claude_row["cost_source"] == "cli"
    assert claude_row["flags"] == ["speedup>10x: audit"] and claude_row["speedup_hidden"] == 1.6
    assert claude_row["tool_calls"] == dict.fromkeys(TOOLS, 1) and claude_row["solution_link"] is None

    never = rows[-1]
    assert never["state"] == "pending" and never["verdict"] is None and never["turns"] is None
    assert never["flags"] == [] and never["tool_calls"] == {} and never["evaluator_version"] == "7"


def test_pandas_reads_the_csv_with_its_types(clients_run: Path) -> None:
    pd = pytest.importorskip("pandas", reason="pandas is not installed (not a crucible dependency)")
    path = Path(export_run(clients_run, "csv").path)
    frame = pd.read_csv(path)
    assert list(frame.columns) == list(SessionExport.model_fields) and len(frame) == 5
    assert frame["speedup"].iloc[0] == 1.5 and frame["problem"].iloc[0] == TASK


def test_parquet_round_trips_with_typed_columns(clients_run: Path) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install 'kernel-crucible[parquet]'")
    import pyarrow.parquet as pq

    path = Path(export_run(clients_run, "parquet").path)
    table = pq.read_table(path)
    assert table.column_names == list(SessionExport.model_fields)
    back = table.to_pylist()
    for got, want in zip(back, session_rows(clients_run), strict=True):
        got["tool_calls"] = dict(got["tool_calls"])
        assert got == want.model_dump()
    tool_calls = table.schema.field("tool_calls").type
    assert (tool_calls.key_type, tool_calls.item_type) == (pa.string(), pa.int64())
    assert table.schema.field("flags").type == pa.list_(pa.string())
    assert table.schema.field("verdict").type == pa.string()  # typed though empty in a pending row


def test_parquet_without_pyarrow_says_how_to_install_it_and_exits_2(
        clients_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` now raises ImportError
    assert main(["export", str(clients_run), "--format", "parquet", "--out", str(clients_run / "x.parquet")]) == 2
    assert PARQUET_HINT in capsys.readouterr().err and not (clients_run / "x.parquet").exists()


def test_a_folder_that_is_not_a_run_is_refused_with_exit_2_and_left_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for fmt in ("csv", "atif"):
        assert main(["export", str(tmp_path / "nowhere"), "--format", fmt]) == 2
        err = capsys.readouterr().err
        assert "no store.db in" in err and "`crucible run` folder" in err
    assert not (tmp_path / "nowhere").exists()


def test_jsonl_to_standard_output_with_the_summary_on_stderr(
        clients_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(clients_run), "--format", "jsonl", "--out", "-"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 5 and "wrote 5 rows to -" in err
    assert main(["export", str(clients_run), "--format", "atif", "--out", "-"]) == 2
    assert "csv and jsonl" in capsys.readouterr().err


# ------------------------------------------------------------------------------- ATIF


def test_the_scripted_trajectory_validates_and_replays_its_plan_with_the_ledgers_records(scripted_run: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRUCIBLE_TASKS", str(FIXTURES))
        assert main(["export", str(scripted_run), "--format", "atif"]) == 0
        prompt = prompt_for(find_task(TASK))
    (path,) = (scripted_run / "export" / "atif").iterdir()
    doc = load_atif(path)
    store = Store(scripted_run / STORE_FILE)
    (session,) = store.sessions()
    ledger, score = store.tool_calls(session.id), store.score(session.id)
    store.close()
    assert score is not None and path.name == f"{session.id}.json" and doc.session_id == session.id
    assert doc.agent.name == "scripted" and doc.agent.version == "0.1.0" and doc.agent.model_name == "solution"

    user, *plan = doc.steps
    assert user.source == "user" and user.message == prompt
    assert all(s.source == "agent" and s.llm_call_count == 0 and s.metrics is None for s in plan)
    assert [c.function_name for c in calls(doc)] == ["get_task", "write", "compile", "run_tests", "submit"]
    crucible_calls = [c for c in calls(doc) if c.function_name != "write"]
    assert [c.extra["ledger"]["call_id"] for c in crucible_calls if c.extra] == [c.call_id for c in ledger]
    assert [c.extra["ledger"]["status"] for c in crucible_calls if c.extra] == [c.status for c in ledger]
    submit = plan[-1]
    assert submit.observation is not None and "submission 1" in str(submit.observation.results[0].content)
    assert all(s.timestamp is not None and s.timestamp >= (session.started_at or "") for s in plan)

    assert doc.final_metrics is not None and doc.final_metrics.total_steps == 6
    assert doc.final_metrics.total_cost_usd == 0.0 and doc.final_metrics.extra["cost_source"] == "none"
    assert doc.extra is not None and doc.extra["crucible"]["score"] == score.score.model_dump(mode="json")


def test_claude_steps_are_its_messages_with_their_input_tokens_and_tool_results(clients_atif: Path) -> None:
    doc = load_atif(clients_atif / f"{session_id('claude-code', 'claude-sonnet-4-5')}.json")
    assert doc.agent.version == "2.1.332" and doc.agent.model_name == "claude-sonnet-4-5"
    user, *turns = doc.steps
    assert user.source == "user" and user.message == "" and "cannot be rebuilt" in str(user.extra)
    assert len(turns) == 6 and all(t.llm_call_count == 1 for t in turns)
    # The fake API's i-th answer used 1000+17i input, 200i cache read, 50+i cache write tokens.
    assert [t.metrics.prompt_tokens for t in turns if t.metrics] == [1050 + 218 * i for i in range(6)]
    assert [t.metrics.cached_tokens for t in turns if t.metrics] == [200 * i for i in range(6)]
    assert all(t.metrics and t.metrics.completion_tokens is None for t in turns)  # the stream's are placeholders
    first = turns[0]
    assert first.tool_calls and first.tool_calls[0].function_name == "mcp__crucible__get_task"
    assert first.observation and first.observation.results[0].source_call_id == first.tool_calls[0].tool_call_id
    assert "triton2triton/vadd" in str(first.observation.results[0].content)
    assert [c.extra["ledger"]["call_id"] for c in calls(doc) if c.extra] == [1, 2, 3, 4, 5]
    assert turns[-1].message == "All five crucible tools answered."

    usage = recorded_usage(claude, "claude-stdio.jsonl", "claude-sonnet-4-5")
    final = doc.final_metrics
    assert final is not None and final.total_completion_tokens == usage.output_tokens == 285
    assert final.total_prompt_tokens == sum(t.metrics.prompt_tokens for t in turns if t.metrics and t.metrics.prompt_tokens)
    assert final.total_cost_usd == usage.cost_usd and final.total_cached_tokens == usage.cache_read_tokens


def test_codex_and_cursor_trajectories_validate_with_every_tool_call_and_result(clients_atif: Path) -> None:
    codex_doc = load_atif(clients_atif / f"{session_id('codex', 'gpt-5')}.json")
    assert [c.function_name for c in calls(codex_doc)] == TOOLS
    assert all(c.extra and c.extra["server"] == "crucible" and "ledger" in c.extra for c in calls(codex_doc))
    assert codex_doc.steps[-1].message == "All five crucible tools answered."
    assert codex_doc.final_metrics and codex_doc.final_metrics.total_completion_tokens == 465

    cursor_doc = load_atif(clients_atif / f"{session_id('cursor', 'sonnet-4.5')}.json")
    user = cursor_doc.steps[0]
    assert user.source == "user" and user.message == "Optimize the kernel with the crucible tools."  # its own event
    # Steps are model calls (model_call_id): the shell call came from the one that called profile.
    assert [[c.function_name for c in s.tool_calls or []] for s in cursor_doc.steps[1:]] == \
           [["read", "get_task"], ["compile"], ["run_tests"], ["profile", "shell"], ["submit"], []]
    profile_step = cursor_doc.steps[4]
    assert profile_step.observation and profile_step.observation.results[-1].extra == {"is_error": True}
    assert all(c.extra and "ledger" in c.extra for c in calls(cursor_doc) if c.function_name in TOOLS)
    assert cursor_doc.steps[1].reasoning_content == "Start with the task."
    assert cursor_doc.steps[1].timestamp is not None


def test_api_trajectory_has_the_system_prompt_and_priced_tokens_per_completion(clients_atif: Path) -> None:
    doc = load_atif(clients_atif / f"{session_id('api', 'gpt-5')}.json")
    system, user, first, last = doc.steps
    assert system.source == "system" and "read_file and write_file" in system.message and user.source == "user"
    assert first.metrics and (first.metrics.prompt_tokens, first.metrics.completion_tokens) == (1500, 30)
    assert last.metrics and last.metrics.cached_tokens == 100
    price = model_price("gpt-5")
    assert price is not None and first.metrics.cost_usd == pytest.approx((1500 * price.input + 30 * price.output) / 1e6)
    compile_call, write_call = first.tool_calls or []
    assert compile_call.extra and compile_call.extra["ledger"]["call_id"] == 1
    assert write_call.extra is None  # a local file tool: not the crucible server's
    results = {r.source_call_id: r for r in first.observation.results} if first.observation else {}
    assert results["c1"].extra == {"truncated_to_chars": 2000} and results["c2"].extra == {"is_error": True}


def test_a_session_that_never_ran_has_no_trajectory_and_is_listed_as_left_out(clients_run: Path) -> None:
    done = export_run(clients_run, "atif", clients_run / "again")
    never = session_id("scripted", "solution")
    assert done.sessions == 4 and done.skipped == [f"{never} (pending: no events file)"]
    assert not (clients_run / "again" / f"{never}.json").exists() and "left out 1" in done.summary()
