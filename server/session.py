"""One server session: which task, which workspace, where its audit trail goes, and its time limits.

    <session dir>/                 outside the workspace: the agent can neither read nor rewrite it
      ledger.db                    every tool call and submission (server/ledger.py)
      snapshots/<digest>/          the workspace source each call saw, by content hash
      submissions/<n>-<hash12>/    a copy of each submitted snapshot, frozen at submit time

By default the session dir is `<cache>/sessions/<task slug>-<hash of the workspace path>`, so restarting a
server on the same workspace continues its ledger and submission numbering; the harness passes `--ledger`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from crucible.toolkit.workspace import cache_root


class ToolLimits(BaseModel):
    """Wall-clock limit of each tool call that runs the engine, in seconds (waiting for the lock excluded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compile: float = Field(default=300, gt=0)
    run_tests: float = Field(default=600, gt=0)
    profile: float = Field(default=900, gt=0)
    submit: float = Field(default=600, gt=0)

    def for_tool(self, tool: str) -> float:
        return float(getattr(self, tool))


class SessionConfig(BaseModel):
    """What `crucible serve` was asked to serve."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    """A task id, `<category>/<slug>`, looked up in the suite (`$CRUCIBLE_TASKS`)."""
    workspace: Path
    """The folder the agent edits (written by `crucible workspace`)."""
    ledger: Path | None = None
    """The session's SQLite ledger; default `<cache>/sessions/<slug>-<hash>/ledger.db`."""
    backend: Literal["auto", "cpu", "cuda", "rocm"] = "auto"
    gpu: int | None = Field(default=None, ge=0)
    """Which GPU of the host the tools run on (None: GPU 0); a harness spreads its sessions over its GPUs."""
    limits: ToolLimits = Field(default_factory=ToolLimits)

    @model_validator(mode="after")
    def _ledger_outside_workspace(self) -> SessionConfig:
        # The agent may write anything in its workspace: an audit trail kept there could be forged.
        ws = self.workspace.resolve()
        if ws in (self.ledger_path.resolve(), *self.ledger_path.resolve().parents):
            raise ValueError(f"the ledger {self.ledger_path} is inside the workspace {ws}; "
                             "put it outside (the agent can write anything in its workspace)")
        return self

    @property
    def ledger_path(self) -> Path:
        if self.ledger is not None:
            return self.ledger
        ws = str(self.workspace.resolve())
        slug = self.task_id.replace("/", "-")
        return cache_root() / "sessions" / f"{slug}-{hashlib.sha256(ws.encode()).hexdigest()[:12]}" / "ledger.db"

    @property
    def session_dir(self) -> Path:
        return self.ledger_path.parent

    @property
    def submissions_dir(self) -> Path:
        return self.session_dir / "submissions"

    @property
    def snapshots_dir(self) -> Path:
        return self.session_dir / "snapshots"
