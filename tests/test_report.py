"""The run report: aggregation over a synthetic store, the text, JSON and CLI faces.

The store below (also used by tests/test_report_html.py) has two entrants, three tasks, repeats, an infra
error, a flagged session and an unscored one, with figures simple enough to check by hand.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from crucible.harness.cli import main
from crucible.harness.models import RunConfig, Score, SessionEnd, SessionSpec, Usage
from crucible.harness.report import (
    EntrantReport,
    Report,
    ReportError,
    fmt_sol,
    leaderboard_text,
    load_outcomes,
    report_for,
    report_text,
    t_critical,
)
from crucible.harness.store import STORE_FILE, RunRow, ScoreRow, SessionRecord, SessionRow, Store

RUN_ID = "20251130T090000Z-abc123"
AT = "2025-11-30T09:00:00Z"
A = ("claude-code", "opus")
B = ("codex", "gpt-5")
SOFTMAX, RMSNORM, SILU = "triton2triton/softmax", "cuda2cuda/rmsnorm", "torch2triton/silu_and_mul"


def passed(speedup: float, flags: list[str] | None = None) -> Score:
    return Score(verdict="pass", message="ok", compiled=True, correct=True, generalizes=True, speedup=speedup,
                 speedup_visible=speedup, speedup_hidden=speedup, speedup_against="eager", flags=flags or [])


NOT_GENERAL = Score(verdict="incorrect", message="hidden config tail_1023 wrong", compiled=True, correct=True,
                    generalizes=False)
FLAGGED = Score(verdict="flagged", message="audit", compiled=True, correct=True, generalizes=True,
                flags=["speedup 14.2x above 10x: audit (profiler saw 1 kernel of 0.4 us)"])
INFRA = Score(verdict="infra_error", message="worker lost its GPU")


def usage(cost: float | None, source: str = "cli", tokens: int = 1000) -> Usage:
    return Usage(turns=10, input_tokens=tokens, output_tokens=tokens // 10, cache_read_tokens=tokens * 5,
                 cache_write_tokens=tokens // 2, cost_usd=cost, cost_source=source, wall_s=600,  # type: ignore[arg-type]
                 tool_calls={"compile": 3, "run_tests": 4, "submit": 1})


# (agent/model, task, repeat, state, end reason, score, usage)
Row = tuple[tuple[str, str], str, int, str, str | None, Score | None, Usage | None]

SESSIONS: list[Row] = [
    (A, SOFTMAX, 0, "done", "finished", passed(2.0, ["peak fraction 0.97 of the measured copy ceiling"]), usage(1.0)),
    (A, RMSNORM, 0, "done", "finished", passed(1.2), usage(2.0)),
    (A, SOFTMAX, 1, "done", "finished", passed(3.0), usage(1.5)),
    (A, RMSNORM, 1, "done", "finished", NOT_GENERAL, usage(2.5)),
    (A, SOFTMAX, 2, "done", "finished", passed(1.6), usage(0.5)),
    (A, RMSNORM, 2, "done", "finished", passed(0.8), usage(1.5)),
    (A, SILU, 2, "done", "infra_error", INFRA, usage(4.0)),
    (B, SOFTMAX, 0, "done", "finished", passed(1.1), usage(0.2, "price_table")),
    (B, RMSNORM, 0, "done", "finished", passed(2.5), usage(None, "unknown")),
    (B, SILU, 0, "done", "finished", FLAGGED, usage(0.6, "price_table")),
    (B, SOFTMAX, 1, "infra_error", "infra_error", None, None),
    (B, RMSNORM, 1, "running", None, None, None),
]


def write_store(run_dir: Path, sessions: list[Row] = SESSIONS, backend: str = "cuda") -> Path:
    """store.db written through the store's own writers, as a run leaves it."""
    store = Store(run_dir / STORE_FILE)
    store.put_run(RunRow(id=RUN_ID, config=RunConfig().model_dump(mode="json"), config_digest=RunConfig().digest(),
                         argv=["crucible", "run"], crucible_version="0.1.0", evaluator_version="1",
                         evaluator_digest="abc", python="3.11", torch="2.9", triton="3.6", device="NVIDIA H200",
                         backend=backend, sandbox="bwrap", started_at=AT))
    specs = [SessionSpec(run_id=RUN_ID, task=task, agent=agent, model=model, repeat=repeat)  # type: ignore[arg-type]
             for (agent, model), task, repeat, *_ in sessions]
    store.add_pending(specs)
    for spec, (_, _, _, state, reason, score, used) in zip(specs, sessions, strict=True):
        if state == "running":
            store.mark_running(spec.id, AT, str(run_dir / "sessions" / spec.id))
        elif reason is not None:
            row = SessionRow.pending(spec).ended(SessionEnd(reason=reason), state, AT)  # type: ignore[arg-type]
            store.finish_session(SessionRecord(
                session=row, tool_calls=[], submissions=[], usage=used or Usage(),
                score=ScoreRow(session_id=spec.id, score=score, backend=backend, scored_at=AT) if score else None))
    store.close()
    return run_dir


def session_id(entrant: tuple[str, str], task: str, repeat: int) -> str:
    return SessionSpec(run_id=RUN_ID, task=task, agent=entrant[0], model=entrant[1], repeat=repeat).id  # type: ignore[arg-type]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_store(tmp_path / "run")


@pytest.fixture
def report(run_dir: Path) -> Report:
    return report_for(run_dir)


def entrant(report: Report, who: tuple[str, str]) -> EntrantReport:
    return next(e for e in report.entrants if (e.agent, e.model) == who)


T_95_DF2 = 4.302652729911275  # Student's t, two-sided 95%, 2 degrees of freedom, from a printed table


def test_t_critical_matches_the_printed_table() -> None:
    for df, t in [(1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (10, 2.2281), (30, 2.0423)]:
        assert t_critical(df) == pytest.approx(t, abs=1e-4)


def test_the_loader_reads_every_session_with_its_score_usage_and_category(run_dir: Path) -> None:
    outcomes = {o.session_id: o for o in load_outcomes(run_dir)}
    assert len(outcomes) == len(SESSIONS)
    first = outcomes[session_id(A, SOFTMAX, 0)]
    assert first.category == "triton2triton" and first.entrant == "claude-code/opus"
    assert first.score is not None and first.score.flags == ["peak fraction 0.97 of the measured copy ceiling"]
    assert first.usage.tool_calls == {"compile": 3, "run_tests": 4, "submit": 1}
    assert outcomes[session_id(B, RMSNORM, 1)].score is None
    assert outcomes[session_id(B, SOFTMAX, 1)].state == "infra_error"


def test_a_folder_without_a_store_is_a_report_error(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no store.db"):
        load_outcomes(tmp_path)


def test_fast_p_counts_only_passing_sessions_strictly_faster_than_p(report: Report) -> None:
    a = entrant(report, A).overall
    # per repeat: r0 {2.0, 1.2}, r1 {3.0, incorrect}, r2 {1.6, 0.8}; a speedup of exactly 2.0 is not fast_2
    assert a.fast_p["1.0"].per_repeat == {0: 1.0, 1: 0.5, 2: 0.5}
    assert a.fast_p["1.5"].per_repeat == {0: 0.5, 1: 0.5, 2: 0.5}
    assert a.fast_p["2.0"].per_repeat == {0: 0.0, 1: 0.5, 2: 0.0}
    b = entrant(report, B).overall  # 1.1, 2.5, and a flagged session that earns nothing
    assert b.fast_p["1.0"].mean == pytest.approx(2 / 3) and b.fast_p["2.0"].mean == pytest.approx(1 / 3)


def test_speedup_is_the_geometric_mean_over_passing_sessions_per_repeat_then_across_repeats(report: Report) -> None:
    s = entrant(report, A).overall.speedup
    per = [math.sqrt(2.0 * 1.2), 3.0, math.sqrt(1.6 * 0.8)]
    assert list(s.per_repeat.values()) == pytest.approx(per)
    logs = [math.log(x) for x in per]
    m = sum(logs) / 3
    half = T_95_DF2 * statistics.stdev(logs) / math.sqrt(3)
    assert s.geometric and s.mean == pytest.approx(math.exp(m))
    assert (s.low, s.high) == pytest.approx((math.exp(m - half), math.exp(m + half)))
    assert entrant(report, B).overall.speedup.mean == pytest.approx(math.sqrt(1.1 * 2.5))


def test_the_confidence_interval_over_three_repeats_matches_a_hand_computation(report: Report) -> None:
    g = entrant(report, A).overall.generalizes  # per repeat: 2/2, 1/2, 2/2
    mean = (1 + 0.5 + 1) / 3
    s = math.sqrt(((1 - mean) ** 2 * 2 + (0.5 - mean) ** 2) / 2)
    half = T_95_DF2 * s / math.sqrt(3)
    assert g.n == 3 and g.mean == pytest.approx(mean)
    assert (g.low, g.high) == pytest.approx((mean - half, mean + half))
    assert half == pytest.approx(0.7171, abs=1e-4)
    # all three repeats agree: a zero-width interval
    f = entrant(report, A).overall.fast_p["1.5"]
    assert (f.low, f.mean, f.high) == pytest.approx((0.5, 0.5, 0.5))


def test_one_repeat_has_no_interval(report: Report) -> None:
    b = entrant(report, B).overall
    assert b.repeats == 1 and b.correct.n == 1 and b.correct.low is None and b.correct.high is None
    assert "1 (CI n/a)" in report_text(report)


def test_infra_errors_are_listed_apart_and_never_counted_against_the_agent(report: Report) -> None:
    infra = {s.session_id for s in report.infra_errors}
    assert infra == {session_id(A, SILU, 2), session_id(B, SOFTMAX, 1)}
    a = entrant(report, A).overall
    assert a.sessions == 6 and "infra_error" not in a.verdicts
    # counted, repeat 2 would have had 3 sessions and a correct rate of 2/3
    assert a.correct.per_repeat == {0: 1.0, 1: 1.0, 2: 1.0}
    assert {t.task for t in report.tasks if t.entrant == "claude-code/opus"} == {SOFTMAX, RMSNORM}
    assert report.cost_total_usd == pytest.approx(1 + 2 + 1.5 + 2.5 + 0.5 + 1.5 + 4 + 0.2 + 0.6)
    assert a.cost_total_usd == pytest.approx(9.0)


def test_unfinished_sessions_are_listed_apart_and_left_out(report: Report) -> None:
    assert [s.session_id for s in report.unscored] == [session_id(B, RMSNORM, 1)]
    assert entrant(report, B).overall.sessions == 3


def test_flagged_sessions_are_listed_with_their_evidence_whatever_the_verdict(report: Report) -> None:
    flagged = {s.session_id: s for s in report.flagged}
    assert set(flagged) == {session_id(A, SOFTMAX, 0), session_id(B, SILU, 0)}
    assert flagged[session_id(B, SILU, 0)].flags == FLAGGED.flags
    text = report_text(report)
    assert "== flagged" in text and "profiler saw 1 kernel of 0.4 us" in text


def test_categories_come_from_the_task_id_prefix(report: Report) -> None:
    a = entrant(report, A)
    assert set(a.by_category) == {"triton2triton", "cuda2cuda"}
    assert a.by_category["triton2triton"].fast_p["2.0"].per_repeat == {0: 0.0, 1: 1.0, 2: 0.0}
    assert set(entrant(report, B).by_category) == {"triton2triton", "cuda2cuda", "torch2triton"}


def test_usage_is_per_session_with_its_cost_sources(report: Report) -> None:
    a, b = entrant(report, A).overall, entrant(report, B).overall
    assert a.input_tokens.mean == 1000 and a.turns.mean == 10 and a.tool_calls.mean == 8 and a.wall_s.mean == 600
    assert a.cost_usd.per_repeat == {0: 1.5, 1: 2.0, 2: 1.0} and a.cost_sources == {"cli": 6}
    # an unknown cost is left out of the mean, not read as zero
    assert b.cost_usd.mean == pytest.approx(0.4) and b.cost_sources == {"price_table": 2, "unknown": 1}


def test_the_json_report_round_trips_through_its_model(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir), "--json"]) == 0
    parsed = Report.model_validate_json(capsys.readouterr().out)
    assert parsed == report_for(run_dir)


def test_the_text_report_has_its_sections(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(run_dir)]) == 0
    out = capsys.readouterr().out
    for section in ("== results per agent/model", "== usage per session", "== by category", "== per task",
                    "== infra errors", "== unscored", "== flagged"):
        assert section in out
    assert "claude-code/opus" in out and "83% ±72" in out  # generalizes with its interval
    assert "speedup: geometric mean over passing sessions only" in out


def test_report_html_writes_the_page(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--html", str(page)]) == 0
    assert page.read_text().startswith("<!doctype html>") and str(page) in capsys.readouterr().out


def test_report_on_a_folder_without_a_store_is_a_usage_error(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "no store.db" in capsys.readouterr().err


def test_the_leaderboard_has_one_row_per_entrant_and_names_what_was_left_out(run_dir: Path) -> None:
    text = leaderboard_text(run_dir)
    rows = [line for line in text.splitlines() if line.startswith(("claude-code/", "codex/"))]
    assert len(rows) == 2
    assert "infra errors (not counted)" in text and session_id(A, SILU, 2) in text
    assert "flagged:" in text


def test_terminal_escape_sequences_from_agents_are_neutralised(tmp_path: Path) -> None:
    evil = ("codex", "m\x1b[2J\x1b]0;pwned\x07")
    run = write_store(tmp_path / "run", [(evil, SOFTMAX, 0, "done", "finished", passed(1.5), usage(0.1))])
    text = leaderboard_text(run) + report_text(report_for(run))
    assert "\x1b" not in text and "\x07" not in text


def test_only_speedups_above_10x_go_to_audit_every_other_flag_is_an_integrity_flag() -> None:
    from crucible.harness.report import is_integrity_flag
    from crucible.harness.scoring import physics_flags
    from crucible.toolkit.results import ConfigResult, Evaluation, IntegrityFinding, TimingStats

    timed = TimingStats(median_us=10, min_us=10, max_us=10, iqr_us=0, rse=0, reps=5, method="gated_events",
                        comparable=True)
    ev = Evaluation(task=SOFTMAX, snapshot="s", backend="cuda", status="ok", message="", timing_comparable=True,
                    configs=[ConfigResult(config="fast", status="pass", speedup=12.0),
                             ConfigResult(config="impossible", status="pass", speedup=2.0, candidate=timed,
                                          sol_us=14.0, sol_fraction=1.4)])
    speed, peak = physics_flags(ev)
    assert not is_integrity_flag(speed) and is_integrity_flag(peak)
    assert is_integrity_flag(IntegrityFinding(defence="stale_results", config="c", evidence="e").flag())
    assert is_integrity_flag("tripwire:identity_cache kernel.py:3: x (why)")


def on_cpu(speedup: float, checked: int) -> Score:
    """A pass scored on the cpu backend: interpreter timings, and `checked` of 8 hidden configs small enough."""
    return passed(speedup).model_copy(update={"timing_comparable": False, "hidden_configs": 8,
                                              "hidden_checked": checked})


CPU_SESSIONS: list[Row] = [
    (A, SOFTMAX, 0, "done", "finished", on_cpu(0.19, 3), usage(None, "none")),
    (A, RMSNORM, 0, "done", "finished", on_cpu(0.03, 2), usage(None, "none")),
]


def test_a_cpu_run_shows_speedups_as_not_comparable_in_every_text_and_counts_the_hidden_configs_checked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write_store(tmp_path / "cpu", CPU_SESSIONS, backend="cpu")
    report = report_for(run)
    assert report.timing_comparable is False and report.timing_note == "CPU interpreter"
    texts = {"leaderboard": leaderboard_text(run), "report": report_text(report)}
    assert main(["report", str(run), "--html", str(tmp_path / "page.html")]) == 0
    texts["html"] = (tmp_path / "page.html").read_text()
    capsys.readouterr()
    for name, text in texts.items():
        assert "n/c (CPU interpreter)" in text, name
        assert "5 of 16 hidden configs checked" in text, name
        assert "0.08x" not in text and "0.19x" not in text and "0.03x" not in text, name  # no figure shown as a GPU's
    assert "<svg" not in texts["html"]  # no speedup plots of interpreter timings
    # The JSON keeps every figure, and says they are not comparable.
    assert main(["report", str(run), "--json"]) == 0
    data = Report.model_validate_json(capsys.readouterr().out)
    a = entrant(data, A).overall
    assert a.timing_comparable is False and a.speedup.mean == pytest.approx(math.sqrt(0.19 * 0.03))
    assert (a.hidden_configs, a.hidden_checked) == (16, 5)
    assert [p.timing_comparable for p in data.points] == [False, False]


def test_a_gpu_run_shows_speedups_and_no_count_of_hidden_configs(report: Report) -> None:
    text = report_text(report)
    assert report.timing_comparable is True and "n/c" not in text and "hidden configs checked" not in text
    assert f"{(2.0 * 3.0 * 1.6) ** (1 / 3):.2f}x" in text  # claude-code/opus on softmax, over its repeats


def with_sol(score: Score, sol: float) -> Score:
    return score.model_copy(update={"sol_fraction": sol})


def test_entrants_are_ranked_by_speedup_and_by_sol_and_the_text_shows_both(tmp_path: Path) -> None:
    # A is faster against the baseline, B closer to the hardware's limit: each leads one ranking.
    sessions: list[Row] = [
        (A, SOFTMAX, 0, "done", "finished", with_sol(passed(4.0), 0.2), usage(1.0)),
        (A, RMSNORM, 0, "done", "finished", with_sol(passed(1.0), 0.8), usage(1.0)),  # geomean 2.0, SOL 0.4
        (B, SOFTMAX, 0, "done", "finished", with_sol(passed(1.5), 0.9), usage(1.0)),
        (B, RMSNORM, 0, "done", "finished", with_sol(NOT_GENERAL, 0.99), usage(1.0)),  # failing: counts nothing
    ]
    r = report_for(write_store(tmp_path / "run", sessions))
    a, b = entrant(r, A), entrant(r, B)
    assert a.overall.sol_fraction.mean == pytest.approx(0.4) and b.overall.sol_fraction.mean == pytest.approx(0.9)
    assert (a.rank_speedup, a.rank_sol, b.rank_speedup, b.rank_sol) == (1, 2, 2, 1)
    assert [e.entrant for e in r.entrants] == [a.entrant, b.entrant]
    softmax_b = next(t for t in r.tasks if t.task == SOFTMAX and t.entrant == b.entrant)
    assert softmax_b.sol_fraction == pytest.approx(0.9)
    board = leaderboard_text(tmp_path / "run")
    assert "#SOL" in board and "SOL (passing)" in board and "0.40" in board and "0.90" in board
    assert "SOL (passing)" in report_text(r)


def test_a_cpu_run_ranks_nobody_and_shows_sol_as_not_comparable(tmp_path: Path) -> None:
    sessions: list[Row] = [(A, SOFTMAX, 0, "done", "finished", passed(2.0), usage(1.0)),
                           (B, SOFTMAX, 0, "done", "finished", passed(1.0), usage(1.0))]
    r = report_for(write_store(tmp_path / "run", sessions, backend="cpu"))
    assert all(e.rank_speedup is None and e.rank_sol is None for e in r.entrants)
    assert all(fmt == "n/c" for fmt in (fmt_sol(e.overall.sol_fraction, e.overall.timing_comparable)
                                         for e in r.entrants))


def test_a_session_whose_cli_stream_held_foreign_events_is_named_in_the_notes(tmp_path: Path) -> None:
    forged = usage(0.01).model_copy(update={"foreign_events": 3})
    sessions: list[Row] = [(A, SOFTMAX, 0, "done", "finished", passed(2.0), forged),
                           (A, RMSNORM, 0, "done", "finished", passed(1.2), usage(2.0))]
    report = report_for(write_store(tmp_path / "run", sessions))
    (note,) = [n for n in report.notes if "cannot have written" in n]
    assert note.startswith("1 session(s)") and session_id(A, SOFTMAX, 0) in note
    assert session_id(A, RMSNORM, 0) not in note
    assert not [n for n in report_for(write_store(tmp_path / "clean", sessions[1:])).notes if "cannot have" in n]
