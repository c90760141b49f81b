"""The run store's format: plain values in plain columns, JSON only for lists and objects, stores of the
older format still read (and migrated when opened for writing), and damaged files refused untouched."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from test_report import CPU_SESSIONS, write_store

from crucible.harness.cli import main
from crucible.harness.report import report_for
from crucible.harness.store import STORE_FILE, STORE_VERSION, Store, StoreError

# The tables as the first stores made them (sqlite-utils, from hand-kept column lists), before
# `timing_comparable`, `hidden_configs` and `hidden_checked` were scored, with `scores.verdict` JSON-quoted.
OLD_SCHEMA = """
CREATE TABLE runs (id TEXT PRIMARY KEY, config TEXT, config_digest TEXT, argv TEXT, crucible_version TEXT,
    evaluator_version TEXT, evaluator_digest TEXT, python TEXT, torch TEXT, triton TEXT, device TEXT, backend TEXT,
    sandbox TEXT, started_at TEXT, finished_at TEXT);
CREATE TABLE sessions (id TEXT PRIMARY KEY, run_id TEXT NOT NULL, task TEXT NOT NULL, agent TEXT NOT NULL,
    model TEXT, repeat INTEGER NOT NULL, state TEXT NOT NULL, end_reason TEXT, end_message TEXT, exit_code INTEGER,
    started_at TEXT, finished_at TEXT, session_dir TEXT);
CREATE TABLE tool_calls (session_id TEXT, call_id INTEGER, tool TEXT, arguments TEXT, source_hash TEXT,
    started_at TEXT, duration_s FLOAT, outcome TEXT, status TEXT, summary TEXT, error TEXT,
    PRIMARY KEY (session_id, call_id));
CREATE TABLE submissions (session_id TEXT, n INTEGER, call_id INTEGER, source_hash TEXT, path TEXT, status TEXT,
    correct INTEGER, speedup FLOAT, verdict TEXT, note TEXT, at TEXT, PRIMARY KEY (session_id, n));
CREATE TABLE scores (session_id TEXT PRIMARY KEY, verdict TEXT, message TEXT, compiled INTEGER, correct INTEGER,
    generalizes INTEGER, speedup_visible FLOAT, speedup_hidden FLOAT, speedup FLOAT, speedup_against TEXT,
    peak_fraction FLOAT, flags TEXT, submission_hash TEXT, evaluator_version TEXT, backend TEXT, scored_at TEXT);
CREATE TABLE usage (session_id TEXT PRIMARY KEY, turns INTEGER, input_tokens INTEGER, output_tokens INTEGER,
    cache_read_tokens INTEGER, cache_write_tokens INTEGER, cost_usd FLOAT, cost_source TEXT, wall_s FLOAT,
    tool_calls TEXT);
"""
SID = "triton2triton__softmax__scripted__solution__r1"
AT = "2026-12-01T12:42:01+00:00"


def old_store(run_dir: Path) -> Path:
    """A store written the old way: one run on the cpu backend, one passing session."""
    run_dir.mkdir(parents=True)
    path = run_dir / STORE_FILE
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)
    config = {"agent": "scripted", "model": "solution", "tasks": "*", "suite": None, "repeats": 1,
              "budget_usd": None, "time_limit_s": 1800, "concurrency": 1, "sandbox": True, "agent_gpu": False,
              "backend": "auto"}
    conn.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 ["r1", json.dumps(config), "d", json.dumps(["--agent", "scripted"]), "0.1.0", "0.2.0", "e",
                  "3.11", "2.13", "3.6", "cpu: AMD EPYC", "cpu", "in-process", AT, AT])
    conn.execute("INSERT INTO sessions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 [SID, "r1", "triton2triton/softmax", "scripted", "solution", 1, "done", "finished", "", None, AT, AT,
                  str(run_dir / "sessions" / SID)])
    conn.execute("INSERT INTO submissions VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                 [SID, 1, 4, "abc", "/x", "ok", 1, 0.5, json.dumps({"status": "ok"}), None, AT])
    conn.execute("INSERT INTO scores VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                 [SID, json.dumps("pass"), "correct; timings not comparable on this backend", 1, 1, 1, 0.5, 0.4,
                  0.45, "baseline", None, json.dumps([]), "abc", "0.2.0", "cpu", AT])
    conn.execute("INSERT INTO usage VALUES (?,?,?,?,?,?,?,?,?,?)",
                 [SID, 5, 0, 0, 0, 0, None, "none", 12.5, json.dumps({"submit": 1})])
    conn.commit()
    conn.close()
    return path


def test_plain_columns_hold_plain_values_so_sql_finds_them(tmp_path: Path) -> None:
    run = write_store(tmp_path / "run", CPU_SESSIONS, backend="cpu")
    conn = sqlite3.connect(run / STORE_FILE)
    assert conn.execute("SELECT count(*) FROM scores WHERE verdict = 'pass'").fetchone() == (2,)
    assert conn.execute("SELECT DISTINCT timing_comparable, hidden_configs FROM scores").fetchall() == [(0, 8)]
    assert json.loads(conn.execute("SELECT flags FROM scores LIMIT 1").fetchone()[0]) == []  # a list: JSON
    assert conn.execute("PRAGMA user_version").fetchone() == (STORE_VERSION,)
    conn.close()


def test_an_old_store_is_read_without_a_write_and_reported_as_not_comparable(tmp_path: Path) -> None:
    path = old_store(tmp_path / "run")
    before = path.read_bytes()
    report = report_for(tmp_path / "run")
    assert path.read_bytes() == before
    (line,) = report.points
    assert line.verdict == "pass" and line.speedup == 0.45
    assert report.timing_comparable is False  # no field recorded: it goes by the backend it was scored on


def test_opening_an_old_store_for_writing_unquotes_plain_columns_and_adds_the_new_ones(tmp_path: Path) -> None:
    path = old_store(tmp_path / "run")
    store = Store(path)
    scored = store.score(SID)
    assert scored is not None and scored.score.verdict == "pass" and scored.score.timing_comparable is None
    assert store.submissions(SID)[0].verdict == {"status": "ok"} and store.usage(SID).tool_calls == {"submit": 1}  # type: ignore[union-attr]
    store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT verdict FROM scores").fetchone() == ("pass",)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(scores)")}
    assert {"timing_comparable", "hidden_configs", "hidden_checked"} <= columns
    assert conn.execute("PRAGMA user_version").fetchone() == (STORE_VERSION,)
    conn.close()
    again = Store(path)  # a second open changes nothing more
    assert again.score(SID) == scored
    again.close()


DAMAGES = {
    "zero bytes": lambda good: b"",
    "junk": lambda good: bytes(range(256)) * 16,
    "truncated": lambda good: good[:5000],
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_store_is_refused_with_what_to_do_and_left_as_it_was(damage: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    good = old_store(tmp_path / "good").read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    path = run / STORE_FILE
    path.write_bytes(DAMAGES[damage](good))
    before = path.read_bytes()
    for read_only in (True, False):
        with pytest.raises(StoreError, match="not a crucible store or is damaged"):
            Store(path, read_only=read_only)
    for argv in (["report", str(run)], ["score", str(run)], ["run", "--out", str(run), "--resume"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert str(path) in err and "not a crucible store or is damaged" in err and "Restore it" in err, argv
    assert path.read_bytes() == before
    assert sorted(p.name for p in run.iterdir()) == [STORE_FILE]


def test_a_sqlite_file_of_something_else_is_not_a_store(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILE
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE calls (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="no table runs"):
        Store(path)
