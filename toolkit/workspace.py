"""Workspaces (what the agent sees) and snapshots (what gets evaluated).

    workspace/                  written by `materialize`, edited by the agent
      PROMPT.md  reference.py  task.json (visible spec)  baseline.* (X2X)  kernel.* (the candidate)

    <cache>/snapshots/<digest>/  written by `take_snapshot`: the workspace's source files, read-only,
                                 named by the content hash, so every result can be reproduced later

Nothing of `hidden.toml` or the solution is ever copied into a workspace.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .task import Task

SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".h", ".hpp", ".hip", ".c", ".cc", ".cpp", ".inc", ".inl"}
"""The files a snapshot takes (and the tripwires scan); a build's cache key covers whatever it holds."""
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


def _digest(contents: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for rel, data in contents.items():
        h.update(f"{rel}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def read_source(workspace: Path, path: Path, limit: int = MAX_SNAPSHOT_BYTES) -> bytes | None:
    """`path`'s bytes if it is a regular file that resolves inside `workspace` (resolved), read once through
    one descriptor; None otherwise. The agent edits its workspace while the server copies it: a file swapped
    for a link into the task folder between a check and a read would hand the snapshot the expert's code.
    The last step refuses a link (O_NOFOLLOW); the descriptor's own path must lie in the workspace (a
    linked folder above it); O_NONBLOCK, so a FIFO cannot hang the server."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with contextlib.suppress(OSError):  # no /proc: the O_NOFOLLOW check alone
            if not Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(workspace):
                return None
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def take_snapshot(task: Task, workspace: Path, store: Path | None = None) -> Snapshot:
    """Copy the workspace's source files into a content-addressed, read-only snapshot: each file read once
    (read_source), its digest and its copy made of the same bytes."""
    workspace = Path(workspace).resolve()
    if not workspace.is_dir():
        raise WorkspaceError(f"workspace {workspace} does not exist; create it with `crucible workspace`")
    files = _source_files(workspace)
    if len(files) > MAX_SNAPSHOT_FILES:
        raise WorkspaceError(f"the workspace holds {len(files)} source files; the limit is {MAX_SNAPSHOT_FILES}: "
                             "remove generated files")
    contents: dict[str, bytes] = {}
    total = 0
    for path in files:
        data = read_source(workspace, path, limit=MAX_SNAPSHOT_BYTES - total)
        if data is not None:  # gone, or no longer a plain file of the workspace: as if never there
            contents[path.relative_to(workspace).as_posix()] = data
            total += len(data)
        if total > MAX_SNAPSHOT_BYTES:  # stop reading: 195 links to one 8 MB file held 1 GB before the check
            break
    if total > MAX_SNAPSHOT_BYTES:
        raise WorkspaceError(f"the workspace holds {len(contents)} source files, {total} bytes; the limit is "
                             f"{MAX_SNAPSHOT_FILES} files and {MAX_SNAPSHOT_BYTES} bytes: remove generated files")
    if task.spec.candidate not in contents:
        candidate, start = workspace / task.spec.candidate, task.spec.baseline or task.spec.stub
        if candidate.is_symlink() or candidate.exists():
            raise WorkspaceError(f"the workspace's {task.spec.candidate} is a link or not a plain file: the file to "
                                 f"edit must be a plain file in the workspace (copy {start} over it)")
        raise WorkspaceError(f"the workspace has no {task.spec.candidate}: that is the file to edit "
                             f"(restore it from {start} if it was deleted)")
    digest = _digest(contents)
    root = (store or cache_root() / "snapshots") / digest
    rel = list(contents)
    if not root.is_dir():
        tmp = root.with_name(f".{digest}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        for name, data in contents.items():
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        try:
            tmp.rename(root)
        except OSError:  # another process stored the same snapshot first: identical content
            shutil.rmtree(tmp, ignore_errors=True)
        if store is not None:
            prune_store(store, keep=root)
    return Snapshot(digest=digest, root=root, files=rel, bytes=total)


MAX_STORE_BYTES = 1 << 30
"""A session's snapshot store (one per tool call that changed the workspace): past this the oldest go. An
honest session of a 20 KB workspace reaches it after 50,000 edits; an agent that writes a new 4 MB header
before every call would otherwise fill the host's disk outside every limit of its own."""


def prune_store(store: Path, keep: Path, limit: int = MAX_STORE_BYTES) -> list[Path]:
    """Remove the oldest snapshots of `store` until it holds at most 3/4 of `limit` (never `keep`); the
    removed ones. A call still queued on one then fails as a workspace error, never scores anything."""
    snapshots = []
    for entry in os.scandir(store):
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
            size = sum(f.stat(follow_symlinks=False).st_size for f in Path(entry.path).rglob("*")
                       if f.is_file() and not f.is_symlink())
            snapshots.append((entry.stat(follow_symlinks=False).st_mtime, size, Path(entry.path)))
    total = sum(size for _, size, _ in snapshots)
    removed: list[Path] = []
    if total <= limit:
        return removed
    for _, size, path in sorted(snapshots, key=lambda s: s[0]):  # oldest first
        if total <= limit * 3 // 4:
            break
        if path != keep:
            shutil.rmtree(path, ignore_errors=True)
            total -= size
            removed.append(path)
    return removed
