"""Workspaces (what the agent sees) and snapshots (what gets evaluated).

    workspace/                  written by `materialize`, edited by the agent
      PROMPT.md  reference.py  task.json (visible spec)  baseline.* (X2X)  kernel.* (the candidate)

    <cache>/snapshots/<digest>/  written by `take_snapshot`: the workspace's source files, read-only,
                                 named by the content hash, so every result can be reproduced later

Nothing of `hidden.toml` or the solution is ever copied into a workspace.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .task import Task

SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".h", ".hpp", ".hip", ".c", ".cc", ".cpp", ".inc"}
MAX_SNAPSHOT_FILES = 200
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024
SKIP_DIRS = {"__pycache__", ".git", ".cursor", ".codex", ".claude", "node_modules", ".venv"}


class WorkspaceError(Exception):
    """A workspace that cannot be written or snapshotted; the message says what to do."""


def cache_root() -> Path:
    """Where builds and snapshots are cached: `$CRUCIBLE_CACHE` or `~/.cache/crucible`."""
    return Path(os.environ.get("CRUCIBLE_CACHE", Path.home() / ".cache" / "crucible")).resolve()


def visible_files(task: Task) -> dict[str, Path]:
    """Workspace name -> source path, for every file the agent may see (the candidate excluded)."""
    spec = task.spec
    files = {"PROMPT.md": task.file("PROMPT.md"), "reference.py": task.file("reference.py")}
    if spec.baseline:
        files[spec.baseline] = task.file(spec.baseline)
    return files


def materialize(task: Task, dest: Path, *, overwrite: bool = False) -> list[str]:
    """Write exactly what the agent may see into dest; returns the names written."""
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()) and not overwrite:
        raise WorkspaceError(f"{dest} is not empty; pick an empty folder or pass overwrite=True (--force)")
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name, src in visible_files(task).items():
        shutil.copyfile(src, dest / name)
        written.append(name)
    start = task.spec.baseline or task.spec.stub
    assert start is not None  # the TaskSpec validator guarantees one of them
    shutil.copyfile(task.file(start), dest / task.spec.candidate)
    written.append(task.spec.candidate)
    (dest / "task.json").write_text(json.dumps(task.spec.visible(), indent=2) + "\n")
    written.append("task.json")
    return sorted(written)


class Snapshot(BaseModel):
    """An immutable copy of a workspace's source, named by its content hash."""

    model_config = ConfigDict(frozen=True)

    digest: str
    root: Path
    files: list[str]
    bytes: int

    @property
    def short(self) -> str:
        return self.digest[:12]


def _source_files(workspace: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(workspace):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.suffix in SOURCE_SUFFIXES and path.is_file() and not path.is_symlink():
                out.append(path)
    return out


def digest_files(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for path in files:
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def take_snapshot(task: Task, workspace: Path, store: Path | None = None) -> Snapshot:
    """Copy the workspace's source files into a content-addressed, read-only snapshot."""
    workspace = Path(workspace).resolve()
    if not workspace.is_dir():
        raise WorkspaceError(f"workspace {workspace} does not exist; create it with `crucible workspace`")
    candidate = workspace / task.spec.candidate
    if not candidate.is_file():
        raise WorkspaceError(f"the workspace has no {task.spec.candidate}: that is the file to edit "
                             f"(restore it from {task.spec.baseline or task.spec.stub} if it was deleted)")
    files = _source_files(workspace)
    total = sum(p.stat().st_size for p in files)
    if len(files) > MAX_SNAPSHOT_FILES or total > MAX_SNAPSHOT_BYTES:
        raise WorkspaceError(f"the workspace holds {len(files)} source files, {total} bytes; the limit is "
                             f"{MAX_SNAPSHOT_FILES} files and {MAX_SNAPSHOT_BYTES} bytes: remove generated files")
    digest = digest_files(workspace, files)
    root = (store or cache_root() / "snapshots") / digest
    rel = [p.relative_to(workspace).as_posix() for p in files]
    if not root.is_dir():
        tmp = root.with_name(f".{digest}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        for path, name in zip(files, rel, strict=True):
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        try:
            tmp.rename(root)
        except OSError:  # another process stored the same snapshot first: identical content
            shutil.rmtree(tmp, ignore_errors=True)
    return Snapshot(digest=digest, root=root, files=rel, bytes=total)
