"""What a killed run leaves behind, removed when the next `crucible run` or `crucible serve` starts.

A SIGKILLed harness or server runs no cleanup of its own: its workers' scratch folders stay in the temp
folder, and its workers' and runners' cgroups under the cgroup parents that `sandbox.probe()` found.

    <temp>/crucible-worker-*        a worker's scratch (start_worker writes OWNER_FILE: the pid that made it)
    <temp>/crucible-candidate-*     a runner's scratch, where its judge's temp folder was this one
    <temp>/crucible-baseline-*      (without an owner file)
    <cgroup parent>/crucible-<pid>-<hex>, crucible-probe-<pid>-<hex>    RunCgroup, the probe's test group

Something is removed only when nothing can still be using it:
    a scratch folder   no live process works in it (its cwd), and either its owner pid is gone, or it
                       has no owner file and has not changed for GRACE_S (the moment between making
                       it and starting the process that works in it)
    a cgroup           the pid in its name is gone, no process is in it, and it is older than CGROUP_GRACE_S
                       (a worker joins its cgroup within milliseconds of making it)
Folders of other users are left alone. A reused pid only keeps a leftover for a later start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

OWNER_FILE = ".crucible-owner"
SCRATCH_PREFIXES = ("crucible-worker-", "crucible-candidate-", "crucible-baseline-")
CGROUP_NAME = re.compile(r"crucible-(?:probe-)?(\d+)-[0-9a-f]+")
GRACE_S = 120.0
CGROUP_GRACE_S = 10.0


class Leftovers(BaseModel):
    """What one cleanup removed."""

    folders: list[str] = Field(default_factory=list)
    """Scratch folders removed, by path."""
    cgroups: list[str] = Field(default_factory=list)
    """cgroup folders removed, by path."""

    def summary(self) -> str:
        parts = [f"{len(self.folders)} scratch folder(s)" if self.folders else "",
                 f"{len(self.cgroups)} cgroup(s)" if self.cgroups else ""]
        return f"removed {' and '.join(p for p in parts if p) or 'nothing'} left by killed crucible processes"


def mark_owner(folder: Path) -> None:
    """Record this process as the owner of a scratch folder, so a later start knows when it is stale."""
    (folder / OWNER_FILE).write_text(str(os.getpid()))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def working_dirs() -> set[Path]:
    """The working directory of every process we may look at."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                out.add(Path(os.readlink(entry / "cwd")))
    return out


def _owner(folder: Path) -> int | None:
    try:
        return int((folder / OWNER_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _stale_folder(folder: Path, in_use: set[Path], now: float) -> bool:
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():  # a symlink, a file, another user's
        return False
    if any(d == folder or folder in d.parents for d in in_use):
        return False
    owner = _owner(folder)
    if owner is not None:
        return not alive(owner)
    return now - st.st_mtime > GRACE_S


def _stale_cgroup(group: Path, now: float) -> bool:
    match = CGROUP_NAME.fullmatch(group.name)
    if match is None or alive(int(match.group(1))):
        return False
    try:
        if now - group.stat().st_mtime <= CGROUP_GRACE_S:
            return False
        procs = (group / "cgroup.procs").read_text() if (group / "cgroup.procs").exists() else ""
    except OSError:
        return False
    return not procs.strip()


def clean_leftovers(temp: Path | None = None, cgroup_parents: list[Path] | None = None,
                    now: float | None = None) -> Leftovers:
    """Remove stale scratch folders from `temp` (default: the temp folder) and stale cgroups from
    `cgroup_parents` (default: where this machine's runs make them)."""
    temp = Path(temp or tempfile.gettempdir())
    now = time.time() if now is None else now
    if cgroup_parents is None:
        from .sandbox import probe

        caps = probe()
        cgroup_parents = [Path(p) for p in dict.fromkeys((caps.cgroup_memory, caps.cgroup_pids, caps.cgroup_cpu,
                                                          caps.cgroup_freezer)) if p]
    done = Leftovers()
    in_use = working_dirs()
    for folder in sorted(temp.iterdir()):
        if not folder.name.startswith(SCRATCH_PREFIXES):
            continue
        with contextlib.suppress(OSError):
            if _stale_folder(folder, in_use, now):
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    done.folders.append(str(folder))
    for parent in cgroup_parents:
        with contextlib.suppress(OSError):
            for group in sorted(parent.iterdir()):
                if group.is_dir() and _stale_cgroup(group, now):
                    with contextlib.suppress(OSError):
                        group.rmdir()  # the kernel refuses while a process or a child group is in it
                        done.cgroups.append(str(group))
    return done
