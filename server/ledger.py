"""The session ledger: the audit trail of one MCP session, in SQLite (sqlite-utils, WAL mode).

    calls                         one row per tool call, written when it starts and completed when it ends
      id           INTEGER PK     call number in this ledger
      tool         TEXT           get_task | compile | run_tests | profile | submit
      arguments    TEXT           the validated arguments, JSON
      source_hash  TEXT NULL      content hash of the workspace snapshot the call worked on
      started_at   TEXT           ISO 8601, UTC
      duration_s   REAL NULL      NULL while running (a row left that way: the server died mid-call)
      outcome      TEXT           running | ok | error | cancelled | timeout
      status       TEXT NULL      the engine's status (ok, compile_error, incorrect, crash, ...) or
                                  bad_request, workspace_error, internal_error
      summary      TEXT           one line
      error        TEXT NULL      the message sent back with isError; the traceback of an internal error

    submissions                   one row per submit; the last one is the session's answer
      n            INTEGER PK     1, 2, ...
      call_id      INTEGER        the submit call (calls.id)
      source_hash  TEXT
      path         TEXT           the frozen copy of the snapshot (outside the workspace)
      status       TEXT           the visible verdict's status; `checking` while the re-check runs,
                                  `cancelled` if it was stopped
      correct      INTEGER NULL   1 / 0 on the visible configs; NULL when nothing ran
      speedup      REAL NULL      visible, quick timing
      verdict      TEXT           the visible verdict, JSON (server/models.py: RunTestsReport)
      note         TEXT NULL      the agent's note
      at           TEXT           ISO 8601, UTC

The harness reads this file after the session; the server is its only writer.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import sqlite_utils
from pydantic import BaseModel, ConfigDict

Outcome = Literal["running", "ok", "error", "cancelled", "timeout"]


class CallFields(BaseModel):
    """What the ledger records of one tool call (the harness's store copies it per session)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any]
    source_hash: str | None = None
    started_at: str
    duration_s: float | None = None
    outcome: Outcome
    status: str | None = None
    summary: str = ""
    error: str | None = None


class CallRow(CallFields):
    id: int


class SubmissionRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int
    call_id: int
    source_hash: str
    path: str
    status: str
    correct: bool | None = None
    speedup: float | None = None
    verdict: dict[str, Any]
    note: str | None = None
    at: str


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Ledger:
    """Append-mostly writer and typed reader of a session's ledger."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # check_same_thread off: the server writes from its event loop only, but a test or the harness
        # may open the ledger from another thread.
        self._conn = sqlite3.connect(str(path), check_same_thread=False)
        self.db = sqlite_utils.Database(self._conn)
        self.db.enable_wal()
        self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across a process crash
        self._create()

    def _create(self) -> None:
        self.db["calls"].create({  # type: ignore[union-attr]
            "id": int, "tool": str, "arguments": str, "source_hash": str, "started_at": str,
            "duration_s": float, "outcome": str, "status": str, "summary": str, "error": str,
        }, pk="id", not_null={"tool", "arguments", "started_at", "outcome"}, if_not_exists=True)
        self.db["submissions"].create({  # type: ignore[union-attr]
            "n": int, "call_id": int, "source_hash": str, "path": str, "status": str, "correct": int,
            "speedup": float, "verdict": str, "note": str, "at": str,
        }, pk="n", not_null={"call_id", "source_hash", "path", "status", "verdict", "at"},
            foreign_keys=[("call_id", "calls", "id")], if_not_exists=True)

    def close(self) -> None:
        self._conn.close()

    # ---------------------------------------------------------------- writing

    def begin_call(self, tool: str, arguments: dict[str, Any], started_at: str) -> int:
        table = self.db["calls"]
        table.insert({"tool": tool, "arguments": json.dumps(arguments), "started_at": started_at,  # type: ignore[union-attr]
                      "outcome": "running", "summary": ""})
        return int(table.last_pk)  # type: ignore[union-attr, arg-type]

    def finish_call(self, call_id: int, *, outcome: Outcome, duration_s: float, source_hash: str | None,
                    status: str | None, summary: str, error: str | None = None) -> None:
        self.db["calls"].update(call_id, {  # type: ignore[union-attr]
            "outcome": outcome, "duration_s": round(duration_s, 6), "source_hash": source_hash,
            "status": status, "summary": summary[:500], "error": error})

    def next_submission(self) -> int:
        row = self.db.execute("SELECT COALESCE(MAX(n), 0) FROM submissions").fetchone()
        return int(row[0]) + 1

    def add_submission(self, row: SubmissionRow) -> None:
        data = row.model_dump()
        data["verdict"] = json.dumps(row.verdict)
        data["correct"] = None if row.correct is None else int(row.correct)
        self.db["submissions"].insert(data)  # type: ignore[union-attr]

    def update_submission(self, n: int, *, status: str, correct: bool | None = None,
                          speedup: float | None = None, verdict: dict[str, Any] | None = None) -> None:
        data: dict[str, Any] = {"status": status, "correct": None if correct is None else int(correct),
                                "speedup": speedup}
        if verdict is not None:
            data["verdict"] = json.dumps(verdict)
        self.db["submissions"].update(n, data)  # type: ignore[union-attr]

    # ---------------------------------------------------------------- reading

    def calls(self) -> list[CallRow]:
        return [CallRow.model_validate({**r, "arguments": json.loads(r["arguments"])})
                for r in self.db["calls"].rows_where(order_by="id")]  # type: ignore[union-attr]

    def submissions(self) -> list[SubmissionRow]:
        return [SubmissionRow.model_validate({**r, "verdict": json.loads(r["verdict"]),
                                              "correct": None if r["correct"] is None else bool(r["correct"])})
                for r in self.db["submissions"].rows_where(order_by="n")]  # type: ignore[union-attr]
