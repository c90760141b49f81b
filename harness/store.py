"""The run store: `<run dir>/store.db`, SQLite through sqlite-utils, WAL mode. One run per store.

    runs                       one row: what was asked and what it ran on
      id               TEXT PK     the run id (`<UTC time>-<config digest[:6]>`)
      config           TEXT        RunConfig, JSON
      config_digest    TEXT        RunConfig.digest(): `--resume` refuses a different one
      argv             TEXT        the command line, JSON list (to say how to resume)
      crucible_version TEXT        package version; evaluator_version / evaluator_digest: EVALUATOR_VERSION
      evaluator_version, evaluator_digest TEXT   and the hash of toolkit/'s sources
      python, torch, triton TEXT   software versions
      device           TEXT        the GPU's name, or the CPU's on the cpu backend
      backend          TEXT        cpu | cuda | rocm (resolved)
      sandbox          TEXT        the agent sandbox's mode; `none` with --no-sandbox or when none exists yet
      started_at, finished_at TEXT ISO 8601 UTC; finished_at NULL until the run's last session ended

    sessions                   one row per cell of the matrix (SessionSpec)
      id               TEXT PK     SessionSpec.id
      run_id, task, agent, model, repeat
      state            TEXT        pending | running | done | infra_error
      end_reason       TEXT NULL   SessionEnd.reason: finished | budget | time_limit | turn_limit | crash | infra_error
      end_message      TEXT, exit_code INTEGER NULL
      started_at, finished_at TEXT NULL
      session_dir      TEXT        `<run dir>/sessions/<id>`

    tool_calls                 copied from the session's ledger (server/ledger.py `calls`) at the session's end
      session_id, call_id  PK      call_id: the ledger's call number
      tool, arguments (JSON), source_hash, started_at, duration_s, outcome, status, summary, error

    submissions                copied from the ledger's `submissions`
      session_id, n        PK      n: 1, 2, ...; the highest is the session's answer
      call_id, source_hash, path (the frozen copy, in the session folder), status (the visible verdict's),
      correct, speedup (visible, quick timing), verdict (JSON), note, at

    scores                     one row per scored session: the Score fields (harness/models.py)
      session_id           PK
      verdict, message, compiled, correct, generalizes, speedup_visible, speedup_hidden, speedup,
      speedup_against, peak_fraction, flags (JSON list), submission_hash, evaluator_version,
      backend, scored_at           where and when it was scored (`crucible score` re-scores)

    usage                      one row per finished session: the Usage fields
      session_id           PK
      turns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, cost_source,
      wall_s, tool_calls (JSON: calls by tool, from the ledger)

Writes are upserts keyed by the session id, and a session's rows are written in one transaction at its
end (`finish_session`), so a run killed at any point loses no row and duplicates none: a session is
either `done` with all its rows, or not done and redone by `--resume`. The same schema is in docs/store.md.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import sqlite_utils
from pydantic import BaseModel, ConfigDict

from crucible.server.ledger import CallFields, SubmissionRow

from .models import Score, SessionEnd, SessionSpec, Usage

STORE_FILE = "store.db"

SessionState = Literal["pending", "running", "done", "infra_error"]


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunRow(Row):
    id: str
    config: dict[str, Any]
    config_digest: str
    argv: list[str]
    crucible_version: str
    evaluator_version: str
    evaluator_digest: str
    python: str
    torch: str
    triton: str
    device: str
    backend: str
    sandbox: str
    started_at: str
    finished_at: str | None = None


class SessionRow(Row):
    id: str
    run_id: str
    task: str
    agent: str
    model: str | None
    repeat: int
    state: SessionState = "pending"
    end_reason: str | None = None
    end_message: str = ""
    exit_code: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    session_dir: str = ""

    @classmethod
    def pending(cls, spec: SessionSpec) -> SessionRow:
        return cls(id=spec.id, run_id=spec.run_id, task=spec.task, agent=spec.agent, model=spec.model,
                   repeat=spec.repeat)

    def ended(self, end: SessionEnd, state: SessionState, finished_at: str) -> SessionRow:
        return self.model_copy(update={"state": state, "end_reason": end.reason, "end_message": end.message,
                                       "exit_code": end.exit_code, "finished_at": finished_at})


class ToolCallRow(Row, CallFields):
    """A row of the session ledger's `calls` (server/ledger.py), keyed by session and call number."""

    session_id: str
    call_id: int


class SubmissionRecord(Row, SubmissionRow):
    """A row of the session ledger's `submissions` (server/ledger.py), keyed by session."""

    session_id: str


class ScoreRow(Row):
    session_id: str
    score: Score
    backend: str
    scored_at: str


class SessionRecord(Row):
    """Everything a finished session writes to the store, in one transaction."""

    session: SessionRow
    tool_calls: list[ToolCallRow]
    submissions: list[SubmissionRecord]
    usage: Usage
    score: ScoreRow | None


_JSON_FIELDS = {"config", "argv", "arguments", "verdict", "flags", "tool_calls"}


def _encode(data: dict[str, Any]) -> dict[str, Any]:
    return {k: json.dumps(v) if k in _JSON_FIELDS and v is not None else v for k, v in data.items()}


def _decode(row: dict[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) if k in _JSON_FIELDS and isinstance(v, str) else v for k, v in row.items()}


class StoreError(Exception):
    """The store cannot be used as asked (no run in it, a different one); the message says what to do."""


class Store:
    """Typed reader and writer of one run's store. Thread-safe: sessions finish from worker threads."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False)
        self.db = sqlite_utils.Database(self._conn)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses no commit
        self._create()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _create(self) -> None:
        t = self.db.table
        t("runs").create({  # type: ignore[union-attr]
            "id": str, "config": str, "config_digest": str, "argv": str, "crucible_version": str,
            "evaluator_version": str, "evaluator_digest": str, "python": str, "torch": str, "triton": str,
            "device": str, "backend": str, "sandbox": str, "started_at": str, "finished_at": str,
        }, pk="id", if_not_exists=True)
        t("sessions").create({  # type: ignore[union-attr]
            "id": str, "run_id": str, "task": str, "agent": str, "model": str, "repeat": int, "state": str,
            "end_reason": str, "end_message": str, "exit_code": int, "started_at": str, "finished_at": str,
            "session_dir": str,
        }, pk="id", not_null={"run_id", "task", "agent", "repeat", "state"}, if_not_exists=True)
        t("tool_calls").create({  # type: ignore[union-attr]
            "session_id": str, "call_id": int, "tool": str, "arguments": str, "source_hash": str,
            "started_at": str, "duration_s": float, "outcome": str, "status": str, "summary": str, "error": str,
        }, pk=("session_id", "call_id"), if_not_exists=True)
        t("submissions").create({  # type: ignore[union-attr]
            "session_id": str, "n": int, "call_id": int, "source_hash": str, "path": str, "status": str,
            "correct": int, "speedup": float, "verdict": str, "note": str, "at": str,
        }, pk=("session_id", "n"), if_not_exists=True)
        t("scores").create({  # type: ignore[union-attr]
            "session_id": str, "verdict": str, "message": str, "compiled": int, "correct": int,
            "generalizes": int, "speedup_visible": float, "speedup_hidden": float, "speedup": float,
            "speedup_against": str, "peak_fraction": float, "flags": str, "submission_hash": str,
            "evaluator_version": str, "backend": str, "scored_at": str,
        }, pk="session_id", if_not_exists=True)
        t("usage").create({  # type: ignore[union-attr]
            "session_id": str, "turns": int, "input_tokens": int, "output_tokens": int,
            "cache_read_tokens": int, "cache_write_tokens": int, "cost_usd": float, "cost_source": str,
            "wall_s": float, "tool_calls": str,
        }, pk="session_id", if_not_exists=True)

    # ---------------------------------------------------------------- runs

    def run(self) -> RunRow | None:
        with self._lock:
            rows = list(self.db["runs"].rows)
        if len(rows) > 1:
            raise StoreError(f"{self.path} holds {len(rows)} runs; a run folder holds one")
        return RunRow.model_validate(_decode(rows[0])) if rows else None

    def put_run(self, row: RunRow) -> None:
        with self._lock:
            self.db["runs"].upsert(_encode(row.model_dump()), pk="id")  # type: ignore[union-attr]

    def finish_run(self, run_id: str, finished_at: str) -> None:
        with self._lock:
            self.db["runs"].update(run_id, {"finished_at": finished_at})  # type: ignore[union-attr]

    # ---------------------------------------------------------------- sessions

    def add_pending(self, specs: Iterable[SessionSpec]) -> None:
        """Rows for sessions not yet in the store; existing rows are left as they are."""
        rows = [SessionRow.pending(s).model_dump() for s in specs]
        with self._lock, self.db.atomic():
            self.db["sessions"].insert_all(rows, pk="id", ignore=True)  # type: ignore[union-attr]

    def sessions(self) -> list[SessionRow]:
        with self._lock:
            rows = list(self.db["sessions"].rows_where(order_by="rowid"))
        return [SessionRow.model_validate(r) for r in rows]

    def session(self, session_id: str) -> SessionRow | None:
        with self._lock:
            rows = list(self.db["sessions"].rows_where("id = ?", [session_id]))
        return SessionRow.model_validate(rows[0]) if rows else None

    def mark_running(self, session_id: str, started_at: str, session_dir: str) -> None:
        with self._lock, self.db.atomic():
            # A redone session's earlier rows go now: until it ends, it has none.
            for table in ("tool_calls", "submissions", "scores", "usage"):
                self.db.execute(f"DELETE FROM {table} WHERE session_id = ?", [session_id])
            self.db["sessions"].update(session_id, {  # type: ignore[union-attr]
                "state": "running", "started_at": started_at, "finished_at": None, "end_reason": None,
                "end_message": "", "exit_code": None, "session_dir": session_dir})

    def finish_session(self, record: SessionRecord) -> None:
        """All of a session's rows, replacing any it had, in one transaction."""
        sid = record.session.id
        with self._lock, self.db.atomic():
            for table in ("tool_calls", "submissions", "scores", "usage"):
                self.db.execute(f"DELETE FROM {table} WHERE session_id = ?", [sid])
            self.db["sessions"].upsert(record.session.model_dump(), pk="id")  # type: ignore[union-attr]
            if record.tool_calls:
                self.db["tool_calls"].insert_all(  # type: ignore[union-attr]
                    [_encode(c.model_dump()) for c in record.tool_calls], pk=("session_id", "call_id"))
            if record.submissions:
                self.db["submissions"].insert_all(  # type: ignore[union-attr]
                    [_encode(s.model_dump()) for s in record.submissions], pk=("session_id", "n"))
            self.db["usage"].insert(  # type: ignore[union-attr]
                _encode({"session_id": sid, **record.usage.model_dump()}), pk="session_id")
            if record.score is not None:
                self._put_score(record.score)

    # ---------------------------------------------------------------- rows of a session

    def tool_calls(self, session_id: str) -> list[ToolCallRow]:
        with self._lock:
            rows = list(self.db["tool_calls"].rows_where("session_id = ?", [session_id], order_by="call_id"))
        return [ToolCallRow.model_validate(_decode(r)) for r in rows]

    def submissions(self, session_id: str) -> list[SubmissionRecord]:
        with self._lock:
            rows = list(self.db["submissions"].rows_where("session_id = ?", [session_id], order_by="n"))
        return [SubmissionRecord.model_validate({**_decode(r), "correct": None if r["correct"] is None
                                                 else bool(r["correct"])}) for r in rows]

    def usage(self, session_id: str) -> Usage | None:
        with self._lock:
            rows = list(self.db["usage"].rows_where("session_id = ?", [session_id]))
        if not rows:
            return None
        return Usage.model_validate({k: v for k, v in _decode(rows[0]).items() if k != "session_id"})

    def score(self, session_id: str) -> ScoreRow | None:
        with self._lock:
            rows = list(self.db["scores"].rows_where("session_id = ?", [session_id]))
        if not rows:
            return None
        row = _decode(rows[0])
        fields = {k: v for k, v in row.items() if k in Score.model_fields and v is not None}
        for k in ("compiled", "correct", "generalizes"):
            if k in fields:
                fields[k] = bool(fields[k])
        return ScoreRow(session_id=session_id, score=Score.model_validate(fields), backend=row["backend"],
                        scored_at=row["scored_at"])

    def put_score(self, row: ScoreRow) -> None:
        """Replace a session's score (`crucible score` re-scores a run)."""
        with self._lock, self.db.atomic():
            self.db.execute("DELETE FROM scores WHERE session_id = ?", [row.session_id])
            self._put_score(row)

    def _put_score(self, row: ScoreRow) -> None:
        data = row.score.model_dump(mode="json")
        for k in ("compiled", "correct", "generalizes"):
            data[k] = None if data[k] is None else int(data[k])
        self.db["scores"].insert(  # type: ignore[union-attr]
            _encode({"session_id": row.session_id, **data, "backend": row.backend, "scored_at": row.scored_at}),
            pk="session_id")

    def counts(self) -> dict[str, int]:
        """Rows per table (the tests' and the benchmark's view of the store)."""
        with self._lock:
            return {t: self.db[t].count for t in ("runs", "sessions", "tool_calls", "submissions", "scores",
                                                   "usage")}
