"""`crucible run` with the scripted agent over the fixture suite: sessions through the real MCP path, the
store's rows and session folders, preflight, re-scoring, and the default run on the real suite."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from crucible.harness.cli import main
from crucible.harness.models import RunConfig
from crucible.harness.run import execute, rescore
from crucible.harness.store import STORE_FILE, Store
from crucible.server.ledger import Ledger
from crucible.toolkit.task import TASKS_ROOT, discover_tasks

# Whole scripted runs: minutes (.ci/run runs them). The module's fixture makes four runs side by side, about
# 4.5 min on 2 idle cores: past the default 300 s limit on a busy machine, which errored every test using it.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "tasks"
ROOT = HERE.parent
TASK = "triton2triton/vadd"


def replay_file(folder: Path, name: str, steps: list[dict]) -> str:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(steps))
    return f"replay:{path}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, Path, str]]]:
    """One run per plan, side by side: plan -> (exit code, run dir, output)."""
    tmp = tmp_path_factory.mktemp("runs")
    wrong = (HERE / "planted" / "vadd_wrong.py").read_text()
    plans = {
        "solution": "solution",
        "baseline": "baseline",
        "wrong": replay_file(tmp, "wrong", [{"call": {"tool": "get_task"}},
                                            {"write": {"file": "kernel.py", "content": wrong}},
                                            {"call": {"tool": "submit", "arguments": {"note": "planted"}}}]),
        "silent": replay_file(tmp, "silent", [{"call": {"tool": "get_task"}},
                                              {"call": {"tool": "compile"}}]),
    }

    def one(name: str) -> tuple[int, Path, str]:
        out, stream = tmp / name, io.StringIO()
        code = execute(RunConfig(model=plans[name], concurrency=1), out=out, stream=stream)
        return code, out, stream.getvalue()

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRUCIBLE_TASKS", str(FIXTURES))
        with ThreadPoolExecutor(len(plans)) as pool:
            results = dict(zip(plans, pool.map(one, plans), strict=True))
        yield results


def only_session(run_dir: Path) -> tuple[Store, str]:
    store = Store(run_dir / STORE_FILE)
    sessions = store.sessions()
    assert len(sessions) == 1
    return store, sessions[0].id


def test_the_expert_solution_passes_visible_and_hidden_with_a_speedup(runs: dict) -> None:
    code, run_dir, output = runs["solution"]
    assert code == 0, output
    store, sid = only_session(run_dir)
    score = store.score(sid)
    assert score is not None and score.score.verdict == "pass"
    assert score.score.correct is True and score.score.generalizes is True
    assert score.score.speedup is not None and score.score.speedup > 0
    assert score.score.speedup_visible is not None and score.score.speedup_hidden is not None
    assert "skipped as too large" in score.score.message  # the fixture's `big` hidden config, on the CPU
    assert "no_op" not in " ".join(score.score.flags)
    assert f"{TASK} r1 scripted/solution: pass" in output and "scripted/solution" in output.split("\n\n")[-2]


def test_a_cpu_runs_session_lines_and_leaderboard_show_speedups_as_not_comparable(runs: dict) -> None:
    _, run_dir, output = runs["solution"]
    store, sid = only_session(run_dir)
    score = store.score(sid)
    assert score is not None and score.score.timing_comparable is False
    assert score.score.hidden_configs == 2 and score.score.hidden_checked == 1  # `big` is too large for the CPU
    assert f"{TASK} r1 scripted/solution: pass n/c (CPU interpreter) |" in output
    leaderboard = output.split("\n\n")[-2]
    assert "n/c (CPU interpreter) [1 pass]" in leaderboard and "1 of 2 hidden configs checked" in leaderboard
    assert "timings not comparable (CPU interpreter)" in leaderboard


def test_the_baseline_passes_and_is_flagged_as_a_no_op(runs: dict) -> None:
    code, run_dir, output = runs["baseline"]
    store, sid = only_session(run_dir)
    score = store.score(sid)
    assert code == 0, output
    assert score is not None and score.score.verdict == "pass"
    assert any(f.startswith("no_op") for f in score.score.flags)


def test_a_replayed_wrong_kernel_is_incorrect_on_the_visible_configs(runs: dict) -> None:
    _, run_dir, output = runs["wrong"]
    store, sid = only_session(run_dir)
    score = store.score(sid)
    assert score is not None and score.score.verdict == "incorrect", output
    assert score.score.correct is False and score.score.speedup is None
    assert store.submissions(sid)[-1].correct is False  # the visible verdict at submit time agreed


def test_a_plan_that_never_submits_scores_no_submission(runs: dict) -> None:
    _, run_dir, _ = runs["silent"]
    store, sid = only_session(run_dir)
    score = store.score(sid)
    assert score is not None and score.score.verdict == "no_submission"
    assert store.submissions(sid) == []
    assert store.usage(sid).tool_calls == {"get_task": 1, "compile": 1}  # type: ignore[union-attr]


def test_the_store_holds_the_ledgers_calls_and_the_session_folder_holds_everything(runs: dict) -> None:
    _, run_dir, _ = runs["solution"]
    store, sid = only_session(run_dir)
    folder = run_dir / "sessions" / sid
    for name in ("config.json", "digests.json", "result.json", "events.jsonl", "ledger.db", "scoring.json"):
        assert (folder / name).is_file(), name
    assert (folder / "workspace" / "kernel.py").read_text() == (FIXTURES / TASK / "solution.py").read_text()
    assert not (folder / "workspace" / "hidden.toml").exists() and (folder / "home").is_dir()

    ledger = Ledger(folder / "ledger.db")
    calls, subs = ledger.calls(), ledger.submissions()
    ledger.close()
    stored = store.tool_calls(sid)
    assert [(c.call_id, c.tool, c.arguments, c.source_hash, c.outcome, c.status) for c in stored] == \
           [(c.id, c.tool, c.arguments, c.source_hash, c.outcome, c.status) for c in calls]
    assert [c.tool for c in stored] == ["get_task", "compile", "run_tests", "submit"]
    usage = store.usage(sid)
    assert usage is not None and usage.tool_calls == dict(Counter(c.tool for c in calls))
    assert usage.turns == 5 and usage.cost_source == "none" and usage.input_tokens == 0
    submissions = store.submissions(sid)
    assert [(s.n, s.source_hash, s.path) for s in submissions] == [(s.n, s.source_hash, s.path) for s in subs]
    assert Path(submissions[-1].path).is_relative_to(folder / "submissions")
    score = store.score(sid)
    assert score is not None and score.score.submission_hash == submissions[-1].source_hash

    result = json.loads((folder / "result.json").read_text())
    assert result["end"]["reason"] == "finished" and result["score"]["score"]["verdict"] == "pass"
    digests = json.loads((folder / "digests.json").read_text())
    assert len(digests["task"]["sha256"]) == 64 and digests["evaluator"]["version"]
    config = json.loads((folder / "config.json").read_text())
    assert config["spec"]["task"] == TASK and config["config"]["model"] == "solution"
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    assert [e["type"] for e in events].count("tool_result") == 4 and events[-1]["type"] == "finished"

    run = store.run()
    assert run is not None and run.backend == "cpu" and run.finished_at is not None
    assert run.config_digest == RunConfig(model="solution").digest() and run.sandbox.startswith("in-process")
    assert store.counts() == {"runs": 1, "sessions": 1, "tool_calls": 4, "submissions": 1, "scores": 1, "usage": 1}


def test_crucible_score_rescores_a_run_from_its_stored_submissions(runs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    _, run_dir, _ = runs["wrong"]
    store, sid = only_session(run_dir)
    before = store.score(sid)
    stream = io.StringIO()
    assert rescore(run_dir, stream=stream) == 0
    after = store.score(sid)
    assert before is not None and after is not None
    assert after.score.verdict == "incorrect" and after.scored_at > before.scored_at
    assert all(f"    {line}" in stream.getvalue() for line in after.score.message.splitlines())  # whole, not cut
    assert store.counts()["scores"] == 1
    assert json.loads((run_dir / "sessions" / sid / "result.json").read_text())["score"]["scored_at"] == after.scored_at


def test_an_agent_that_cannot_run_fails_the_run_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["run", "--agent", "codex", "--out", str(tmp_path / "codex")]) == 2
    assert "codex" in capsys.readouterr().err
    assert main(["run", "--model", "replay:/nonexistent/plan.json", "--out", str(tmp_path / "replay")]) == 2
    assert "plan.json" in capsys.readouterr().err
    assert not (tmp_path / "codex").exists() and not (tmp_path / "replay").exists()


def test_an_unknown_suite_or_a_glob_that_matches_nothing_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    assert main(["run", "--suite", "nope", "--out", str(tmp_path / "a")]) == 2
    assert "no suite 'nope'" in capsys.readouterr().err
    assert main(["run", "--tasks", "cuda2cuda/*", "--out", str(tmp_path / "b")]) == 2
    assert "matches no task" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.timeout(960)
def test_crucible_run_with_no_arguments_runs_the_real_suite_and_prints_a_leaderboard(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CRUCIBLE_TASKS"}
    # Every Triton task of the suite (17) through the CPU interpreter: ~6-9 minutes on 2 cores, depending
    # on their load; the limit is a guard against a hang, with room for a busy CI machine.
    proc = subprocess.run([sys.executable, "-m", "crucible.harness.cli", "run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    suite, _ = discover_tasks(TASKS_ROOT)  # the real suite, as the subprocess sees it
    triton = {t.id for t in suite if t.spec.language == "triton"}
    skipped_line = next(line for line in proc.stdout.splitlines() if "skipped, need a GPU:" in line)
    assert all(t.id in skipped_line for t in suite if t.id not in triton)
    assert "agent/model" in proc.stdout and "scripted/solution" in proc.stdout
    (run_dir,) = (tmp_path / "crucible-runs").iterdir()
    store = Store(run_dir / STORE_FILE)
    sessions = store.sessions()
    assert {s.task for s in sessions} == triton
    assert all(s.state == "done" for s in sessions)
    assert all(store.score(s.id).score.verdict == "pass" for s in sessions)  # type: ignore[union-attr]


def test_a_cli_agent_runs_in_the_agent_sandbox_where_the_store_and_the_ledger_do_not_exist(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crucible.harness.sandbox import probe_agent_sandbox

    out = tmp_path / "run"
    tools = tmp_path / "cursor-cli"
    tools.mkdir()
    (tools / "stream.jsonl").write_text((HERE / "e2e" / "recorded" / "cursor-session.jsonl").read_text())
    script = tools / "agent"  # a fake Cursor CLI: looks for the harness's files, then prints a recorded stream
    script.write_text(f'#!/bin/sh\nfor f in "{out}/store.db" "$PWD/../ledger.db" "{FIXTURES}/{TASK}/hidden.toml"; do\n'
                      f'  if [ -e "$f" ]; then echo "$f" >> "$HOME/seen.txt"; fi\ndone\n'
                      f'touch "$HOME/ran"\ncat "{tools}/stream.jsonl"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    monkeypatch.setenv("CURSOR_API_KEY", "cursor-key")
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    args = ["run", "--agent", "cursor", "--model", "sonnet-4.5", "--out", str(out)]
    if not probe_agent_sandbox().available:
        assert main(args) == 2 and not out.exists()  # no sandbox here: refused unless --no-sandbox
        args.append("--no-sandbox")
    assert main(args) == 0
    store, sid = only_session(out)
    home = out / "sessions" / sid / "home"
    assert (home / "ran").exists() and not (home / "seen.txt").exists()
    run = store.run()
    assert run is not None and run.sandbox.startswith("bubblewrap" if "--no-sandbox" not in args else "none")
    usage, score = store.usage(sid), store.score(sid)
    assert usage is not None and usage.cost_source == "price_table" and usage.input_tokens > 0
    assert score is not None and score.score.verdict == "no_submission"  # the recorded stream never reached us


def test_the_smoke_suite_is_the_triton_tasks_and_core_is_all(monkeypatch: pytest.MonkeyPatch) -> None:
    from crucible.harness.suites import load_suites, select
    from crucible.toolkit.task import discover_tasks

    tasks, _ = discover_tasks(ROOT / "tasks")
    monkeypatch.setenv("CRUCIBLE_TASKS", str(ROOT / "tasks"))
    assert set(load_suites()) >= {"smoke", "core"}
    assert {t.spec.language for t in select(tasks, suite="smoke")} == {"triton"}
    assert select(tasks, suite="core") == tasks
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))  # a suite folder without suites.toml has `core` only
    assert set(load_suites()) == {"core"}


def test_a_task_whose_language_package_is_missing_is_left_out_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its runner could not import the DSL: every session would fail on our account, not the agent's.
    from crucible.harness.run import runnable
    from crucible.toolkit.task import find_task
    from crucible.toolkit.toolchains import TOOLCHAINS

    suite = ROOT / "tasks"  # by name: another test of this module points CRUCIBLE_TASKS at the fixtures
    cute, triton = find_task("torch2cute/rmsnorm", suite), find_task("triton2triton/softmax", suite)
    monkeypatch.setattr(TOOLCHAINS["cute"], "available", lambda: "the CuTe DSL is not installed here")
    assert not runnable(cute, "cuda") and not runnable(cute, "cpu")
    assert runnable(triton, "cuda") and runnable(triton, "cpu")
    monkeypatch.setattr(TOOLCHAINS["cute"], "available", lambda: None)
    assert runnable(cute, "cuda") and not runnable(cute, "cpu")
