"""`crucible run --resume`: a run killed mid-session finishes without rerunning what was done, losing or
duplicating no row; a changed config is refused."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crucible.harness.cli import main
from crucible.harness.store import STORE_FILE, Store
from crucible.server.ledger import Ledger

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"


def run_cli(out: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "CRUCIBLE_TASKS": str(FIXTURES)}
    return subprocess.Popen([sys.executable, "-m", "crucible.harness.cli", "run", "--repeats", "3", "--out", str(out),
                             *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def states(db: Path) -> list[str]:
    if not db.is_file():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return [r[0] for r in conn.execute("SELECT state FROM sessions ORDER BY rowid")]
    except sqlite3.OperationalError:  # the tables are being created
        return []
    finally:
        conn.close()


@pytest.mark.slow
def test_a_run_killed_mid_session_resumes_without_rerunning_or_losing_rows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_cli(out)
    deadline = time.monotonic() + 120
    while states(out / STORE_FILE)[:2] != ["done", "running"]:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"never saw one session done and the next running: {states(out / STORE_FILE)}"
        time.sleep(0.05)
    time.sleep(1.0)  # well inside the second session: its server and agent are at work
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    store = Store(out / STORE_FILE)
    first, second, third = store.sessions()
    assert (first.state, second.state, third.state) == ("done", "running", "pending")
    kept = (first.started_at, first.finished_at, store.score(first.id), store.tool_calls(first.id))
    store.close()

    resumed = run_cli(out, "--resume")
    output, _ = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, output
    assert "resuming: 1 session(s) done and kept, 2 to run" in output

    store = Store(out / STORE_FILE)
    sessions = store.sessions()
    assert [s.state for s in sessions] == ["done"] * 3
    again = store.session(first.id)
    assert again is not None
    assert (again.started_at, again.finished_at, store.score(first.id), store.tool_calls(first.id)) == kept
    assert store.session(second.id).started_at != second.started_at  # type: ignore[union-attr]
    total_calls = 0
    for s in sessions:
        ledger = Ledger(Path(s.session_dir) / "ledger.db")
        calls, subs = ledger.calls(), ledger.submissions()
        ledger.close()
        # The redone session's folder was cleared: its ledger holds one session's calls, not two.
        assert [c.tool for c in calls] == ["get_task", "compile", "run_tests", "submit"]
        assert [c.call_id for c in store.tool_calls(s.id)] == [c.id for c in calls]
        assert len(subs) == 1 and len(store.submissions(s.id)) == 1
        total_calls += len(calls)
    assert store.counts() == {"runs": 1, "sessions": 3, "tool_calls": total_calls, "submissions": 3, "scores": 3,
                              "usage": 3}


@pytest.mark.slow  # two whole scripted runs
def test_resume_refuses_a_changed_config_and_says_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    out = tmp_path / "run"
    assert main(["run", "--model", "baseline", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["run", "--model", "baseline", "--repeats", "2", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "different config" in err and "repeats: was 1, now 2" in err
    assert "--agent scripted --model baseline" in err
    assert main(["run", "--model", "baseline", "--out", str(out)]) == 2  # an existing run needs --resume
    assert "--resume" in capsys.readouterr().err
    finished_at = finished(out)
    assert finished_at is not None
    assert main(["run", "--model", "baseline", "--out", str(out), "--resume"]) == 0  # all done: nothing reruns
    assert "resuming: 1 session(s) done and kept, 0 to run" in capsys.readouterr().out
    assert finished(out) == finished_at  # the run ended when its last session did, not when it was looked at


def finished(out: Path) -> str | None:
    store = Store(out / STORE_FILE, read_only=True)
    run = store.run()
    store.close()
    assert run is not None
    return run.finished_at
