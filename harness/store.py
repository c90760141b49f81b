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
      correct, speedup (visible, quick timing), verdict (JSON object), note, at

    scores                     one row per scored session: the Score fields (harness/models.py)
      session_id           PK
      verdict, message, compiled, correct, generalizes, speedup_visible, speedup_hidden, speedup,
      speedup_against, timing_comparable, peak_fraction, sol_fraction, flags (JSON list), submission_hash,
      evaluator_version, hidden_configs, hidden_checked,
      backend, scored_at           where and when it was scored (`crucible score` re-scores)
      gpu, gpu_name, host, attempts, placement_note, hip_on_cuda   the Placement (harness/models.py): which
                                   GPU of which host, how many evaluations it took, whether a HIP task ran as
                                   HIP on CUDA (0/1, NULL: not a HIP task); NULL in stores made before them

    usage                      one row per finished session: the Usage fields
      session_id           PK
      turns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, cost_source,
      wall_s, tool_calls (JSON: calls by tool, from the ledger)

Writes are upserts keyed by the session id, and a session's rows are written in one transaction at its
end (`finish_session`), so a run killed at any point loses no row and duplicates none: a session is
either `done` with all its rows, or not done and redone by `--resume`. The same schema is in docs/store.md.

The columns come from the row models (`TABLES`): a list or dict field is a JSON column, a bool an INTEGER,
everything else a plain value. Opening a store for writing adds the columns a newer row model has, and
migrates an older format (`PRAGMA user_version`, `STORE_VERSION`); a read-only open writes nothing and
reads either format. A file that is not a crucible store, or is damaged, is a StoreError, never a store.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import sqlite_utils
from pydantic import BaseModel, ConfigDict

from crucible.server.ledger import CallFields, SubmissionRow

from .models import Placement, Score, SessionEnd, SessionSpec, Usage

STORE_FILE = "store.db"

STORE_VERSION = 1
"""`PRAGMA user_version` of a store this code writes. 0: before it was set, when plain text columns in a
name shared with a JSON column (`scores.verdict`) were written JSON-quoted (`"pass"`)."""

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
    placement: Placement | None = None
    """None: scored before placements were recorded."""


PLACEMENT_COLUMNS = {"gpu": "gpu", "gpu_name": "gpu_name", "host": "host", "attempts": "attempts",
                     "note": "placement_note", "hip_on_cuda": "hip_on_cuda"}
"""Placement field -> its plain column in `scores`."""


class SessionRecord(Row):
    """Everything a finished session writes to the store, in one transaction."""

    session: SessionRow
    tool_calls: list[ToolCallRow]
    submissions: list[SubmissionRecord]
    usage: Usage
    score: ScoreRow | None


# ---------------------------------------------------------------- the schema, from the row models


class Table(NamedTuple):
    """One table: its columns (name -> Python type of the column) and which of them hold JSON or bools."""

    columns: dict[str, type]
    pk: str | tuple[str, ...]
    json: frozenset[str]
    """Lists and dicts, stored as JSON text; every other column holds its plain value."""
    bools: frozenset[str]
    """Stored as 0/1, read back as bools."""
    not_null: frozenset[str] = frozenset()


def _kind(annotation: Any) -> type:
    """The column type of a field: str, int, float, bool, or dict for anything stored as JSON."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _kind(args[0])
    if origin is Literal:
        return type(args[0])
    if origin in (list, dict) or annotation in (list, dict) or isinstance(annotation, type) and issubclass(
            annotation, BaseModel):
        return dict
    return annotation if annotation in (str, int, float, bool) else str


def _table(fields: dict[str, Any], pk: str | tuple[str, ...], not_null: Iterable[str] = ()) -> Table:
    kinds = {name: _kind(annotation) for name, annotation in fields.items()}
    return Table(columns={k: str if t is dict else int if t is bool else t for k, t in kinds.items()}, pk=pk,
                 json=frozenset(k for k, t in kinds.items() if t is dict),
                 bools=frozenset(k for k, t in kinds.items() if t is bool), not_null=frozenset(not_null))


def _fields(*models: type[BaseModel]) -> dict[str, Any]:
    return {name: f.annotation for m in models for name, f in m.model_fields.items()}


def _keyed(key: dict[str, Any], model: type[BaseModel], after: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**key, **_fields(model), **(after or {})}


TABLES: dict[str, Table] = {
    "runs": _table(_fields(RunRow), pk="id"),
    "sessions": _table(_fields(SessionRow), pk="id", not_null={"run_id", "task", "agent", "repeat", "state"}),
    "tool_calls": _table(_keyed({"session_id": str, "call_id": int}, CallFields), pk=("session_id", "call_id")),
    "submissions": _table(_keyed({"session_id": str}, SubmissionRow), pk=("session_id", "n")),
    "scores": _table(_keyed({"session_id": str}, Score, {
        "backend": str, "scored_at": str,
        **{column: Placement.model_fields[field].annotation for field, column in PLACEMENT_COLUMNS.items()}}),
        pk="session_id"),
    "usage": _table(_keyed({"session_id": str}, Usage), pk="session_id"),
}
"""The store's schema. A field added to a row model becomes a column of every store opened for writing."""

LEGACY_QUOTED = {"scores": frozenset({"verdict"})}
"""Plain columns that version-0 stores hold JSON-quoted."""


def _encode(table: str, data: dict[str, Any]) -> dict[str, Any]:
    spec = TABLES[table]
    out = {}
    for k, v in data.items():
        if v is not None and k in spec.json:
            v = json.dumps(v)
        elif v is not None and k in spec.bools:
            v = int(v)
        out[k] = v
    return out


def _decode(table: str, row: dict[str, Any], version: int) -> dict[str, Any]:
    spec = TABLES[table]
    legacy = LEGACY_QUOTED.get(table, frozenset()) if version < 1 else frozenset()
    out = {}
    for k, v in row.items():
        if isinstance(v, str) and (k in spec.json or (k in legacy and v.startswith('"'))):
            v = json.loads(v)
        elif v is not None and k in spec.bools:
            v = bool(v)
        out[k] = v
    return out


class StoreError(Exception):
    """The store cannot be used as asked (not a store, damaged, no run in it, a different one); the message
    says what to do."""


def _damaged(path: Path, why: object) -> StoreError:
    return StoreError(f"{path} is not a crucible store or is damaged ({why}); nothing was changed in it. "
                      "Restore it from a copy if you have one; each session's own result is kept in "
                      "sessions/<id>/result.json of the run folder. To run again, start a new run with "
                      "another --out")


class Store:
    """Typed reader and writer of one run's store. Thread-safe: sessions finish from worker threads.

    `Store(path)` creates the store if the file does not exist, else opens it for writing (adding new
    columns, migrating an older format); `Store(path, read_only=True)` opens an existing one and writes
    nothing, not even a migration. Either way a file that is not a crucible store raises StoreError."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        self._lock = threading.RLock()
        exists = path.exists()
        if read_only and not exists:
            raise StoreError(f"no {path.name} at {path.parent}: is it a `crucible run` folder?")
        if exists and path.is_file() and path.stat().st_size == 0:
            # sqlite would take an empty file as an empty database and write a schema into it
            raise _damaged(path, "the file is empty")
        if not exists:
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = (sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
                          if read_only else sqlite3.connect(str(path), check_same_thread=False))
        except sqlite3.Error as exc:
            raise _damaged(path, exc) from None
        self.db = sqlite_utils.Database(self._conn)
        try:
            self.version = self._check(new=not exists)
            if not read_only:
                self.db.enable_wal()
                self.db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a killed process loses no commit
                self._create_and_migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise _damaged(path, exc) from None
        except StoreError:
            self._conn.close()
            raise

    def _check(self, new: bool) -> int:
        """The store's format version; raises unless it is a sound crucible store (or a new file)."""
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if new:
            return STORE_VERSION
        missing = sorted(set(TABLES) - tables)
        if missing:
            raise _damaged(self.path, f"no table {', '.join(missing)}")
        check = [r[0] for r in self._conn.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            raise _damaged(self.path, "; ".join(check[:3]))
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _create_and_migrate(self) -> None:
        with self._lock, self.db.atomic():
            for name, spec in TABLES.items():
                table = self.db.table(name)
                if not table.exists():
                    table.create(spec.columns, pk=spec.pk, not_null=set(spec.not_null))
                    continue
                for column, kind in spec.columns.items():  # a row model grew a field
                    if column not in table.columns_dict:
                        table.add_column(column, kind)
            if self.version < 1:
                for name, columns in LEGACY_QUOTED.items():
                    for column in columns:
                        self.db.execute(f"UPDATE {name} SET {column} = json_extract({column}, '$') "
                                        f"WHERE json_valid({column}) AND {column} LIKE '\"%'")
            self.db.execute(f"PRAGMA user_version = {STORE_VERSION}")
        self.version = STORE_VERSION

    def _rows(self, table: str, where: str | None = None, args: list[Any] | None = None,
              order_by: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            rows = list(self.db.table(table).rows_where(where, args, order_by=order_by))
        return [_decode(table, r, self.version) for r in rows]

    def _writable(self) -> None:
        if self.read_only:
            raise StoreError(f"{self.path} was opened read-only")

    # ---------------------------------------------------------------- runs

    def run(self) -> RunRow | None:
        rows = self._rows("runs")
        if len(rows) > 1:
            raise StoreError(f"{self.path} holds {len(rows)} runs; a run folder holds one")
        return RunRow.model_validate(rows[0]) if rows else None

    def put_run(self, row: RunRow) -> None:
        self._writable()
        with self._lock:
            self.db.table("runs").upsert(_encode("runs", row.model_dump()), pk="id")

    def finish_run(self, run_id: str, finished_at: str) -> None:
        self._writable()
        with self._lock:
            self.db.table("runs").update(run_id, {"finished_at": finished_at})

    # ---------------------------------------------------------------- sessions

    def add_pending(self, specs: Iterable[SessionSpec]) -> None:
        """Rows for sessions not yet in the store; existing rows are left as they are."""
        self._writable()
        rows = [_encode("sessions", SessionRow.pending(s).model_dump()) for s in specs]
        with self._lock, self.db.atomic():
            self.db.table("sessions").insert_all(rows, pk="id", ignore=True)

    def sessions(self) -> list[SessionRow]:
        return [SessionRow.model_validate(r) for r in self._rows("sessions", order_by="rowid")]

    def session(self, session_id: str) -> SessionRow | None:
        rows = self._rows("sessions", "id = ?", [session_id])
        return SessionRow.model_validate(rows[0]) if rows else None

    def mark_running(self, session_id: str, started_at: str, session_dir: str) -> None:
        self._writable()
        with self._lock, self.db.atomic():
            # A redone session's earlier rows go now: until it ends, it has none.
            for table in ("tool_calls", "submissions", "scores", "usage"):
                self.db.execute(f"DELETE FROM {table} WHERE session_id = ?", [session_id])
            self.db.table("sessions").update(session_id, {
                "state": "running", "started_at": started_at, "finished_at": None, "end_reason": None,
                "end_message": "", "exit_code": None, "session_dir": session_dir})

    def finish_session(self, record: SessionRecord) -> None:
        """All of a session's rows, replacing any it had, in one transaction."""
        self._writable()
        sid = record.session.id
        with self._lock, self.db.atomic():
            for table in ("tool_calls", "submissions", "scores", "usage"):
                self.db.execute(f"DELETE FROM {table} WHERE session_id = ?", [sid])
            self.db.table("sessions").upsert(_encode("sessions", record.session.model_dump()), pk="id")
            if record.tool_calls:
                self.db.table("tool_calls").insert_all(
                    [_encode("tool_calls", c.model_dump()) for c in record.tool_calls], pk=("session_id", "call_id"))
            if record.submissions:
                self.db.table("submissions").insert_all(
                    [_encode("submissions", s.model_dump()) for s in record.submissions], pk=("session_id", "n"))
            self.db.table("usage").insert(
                _encode("usage", {"session_id": sid, **record.usage.model_dump()}), pk="session_id")
            if record.score is not None:
                self._put_score(record.score)

    # ---------------------------------------------------------------- rows of a session

    def tool_calls(self, session_id: str) -> list[ToolCallRow]:
        rows = self._rows("tool_calls", "session_id = ?", [session_id], order_by="call_id")
        return [ToolCallRow.model_validate(r) for r in rows]

    def submissions(self, session_id: str) -> list[SubmissionRecord]:
        rows = self._rows("submissions", "session_id = ?", [session_id], order_by="n")
        return [SubmissionRecord.model_validate(r) for r in rows]

    def usage(self, session_id: str) -> Usage | None:
        rows = self._rows("usage", "session_id = ?", [session_id])
        if not rows:
            return None
        return Usage.model_validate({k: v for k, v in rows[0].items() if k in Usage.model_fields and v is not None})

    def score(self, session_id: str) -> ScoreRow | None:
        rows = self._rows("scores", "session_id = ?", [session_id])
        if not rows:
            return None
        row = rows[0]
        fields = {k: v for k, v in row.items() if k in Score.model_fields and v is not None}
        # A store opened read-only from before the placement columns has none of them.
        placed = {f: row[c] for f, c in PLACEMENT_COLUMNS.items() if row.get(c) is not None}
        return ScoreRow(session_id=session_id, score=Score.model_validate(fields), backend=row["backend"],
                        scored_at=row["scored_at"], placement=Placement.model_validate(placed) if placed else None)

    def put_score(self, row: ScoreRow) -> None:
        """Replace a session's score (`crucible score` re-scores a run)."""
        self._writable()
        with self._lock, self.db.atomic():
            self.db.execute("DELETE FROM scores WHERE session_id = ?", [row.session_id])
            self._put_score(row)

    def _put_score(self, row: ScoreRow) -> None:
        self.db.table("scores").insert(_encode("scores", {
            "session_id": row.session_id, **row.score.model_dump(mode="json"), "backend": row.backend,
            "scored_at": row.scored_at, **({c: getattr(row.placement, f) for f, c in PLACEMENT_COLUMNS.items()}
                                           if row.placement else {})}), pk="session_id")

    def counts(self) -> dict[str, int]:
        """Rows per table (the tests' and the benchmark's view of the store)."""
        with self._lock:
            return {t: self.db.table(t).count for t in TABLES}
