"""What killed runs leave behind is removed at the next start, and nothing that may still be in use."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from crucible.toolkit.leftovers import CGROUP_GRACE_S, GRACE_S, OWNER_FILE, clean_leftovers, mark_owner


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def folder(temp: Path, name: str, owner: int | None = None, age_s: float = 0) -> Path:
    path = temp / name
    path.mkdir()
    (path / "kernel.so").write_text("left behind")
    if owner is not None:
        (path / OWNER_FILE).write_text(str(owner))
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))
    return path


def test_a_scratch_folder_whose_owner_died_is_removed_and_a_live_owners_is_kept(tmp_path: Path) -> None:
    dead = folder(tmp_path, "crucible-worker-dead", owner=dead_pid())
    live = folder(tmp_path, "crucible-worker-live")
    mark_owner(live)
    done = clean_leftovers(tmp_path, cgroup_parents=[])
    assert done.folders == [str(dead)] and not dead.exists() and live.exists()


def test_a_folder_without_an_owner_goes_only_when_old_and_nobody_works_in_it(tmp_path: Path) -> None:
    old = folder(tmp_path, "crucible-candidate-old", age_s=GRACE_S + 60)
    young = folder(tmp_path, "crucible-baseline-young")  # between being made and its runner starting
    busy = folder(tmp_path, "crucible-candidate-busy", age_s=GRACE_S + 60)
    other = folder(tmp_path, "not-crucible-old", age_s=GRACE_S + 60)
    runner = subprocess.Popen(["sleep", "30"], cwd=busy)
    try:
        done = clean_leftovers(tmp_path, cgroup_parents=[])
    finally:
        runner.kill()
        runner.wait()
    assert done.folders == [str(old)]
    assert young.exists() and busy.exists() and other.exists()


def test_a_worker_folder_whose_dead_owner_left_a_live_process_in_it_is_kept(tmp_path: Path) -> None:
    orphan = folder(tmp_path, "crucible-worker-orphan", owner=dead_pid())
    proc = subprocess.Popen(["sleep", "30"], cwd=orphan)
    try:
        assert clean_leftovers(tmp_path, cgroup_parents=[]).folders == []
    finally:
        proc.kill()
        proc.wait()
    assert orphan.exists()


def cgroup(parent: Path, name: str, procs: str = "", age_s: float = CGROUP_GRACE_S + 5) -> Path:
    path = parent / name
    path.mkdir()
    if procs:
        (path / "cgroup.procs").write_text(procs)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_an_empty_cgroup_of_a_dead_process_is_removed_and_any_other_kept(tmp_path: Path) -> None:
    pid = dead_pid()
    stale = cgroup(tmp_path, f"crucible-{pid}-0123456789ab")
    probe = cgroup(tmp_path, f"crucible-probe-{pid}-01234567")
    mine = cgroup(tmp_path, f"crucible-{os.getpid()}-0123456789ab")
    busy = cgroup(tmp_path, f"crucible-{pid}-ba9876543210", procs="4242\n")  # a process still in it
    young = cgroup(tmp_path, f"crucible-{pid}-aaaaaaaaaaaa", age_s=0)  # made, not yet joined
    other = cgroup(tmp_path, "system.slice")
    (tmp_path / "temp").mkdir()
    done = clean_leftovers(tmp_path / "temp", cgroup_parents=[tmp_path])
    assert sorted(done.cgroups) == sorted([str(stale), str(probe)])
    assert all(p.exists() for p in (mine, busy, young, other))


@pytest.mark.parametrize("command", ["run", "serve"])
def test_crucible_run_and_serve_clean_up_at_start(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from crucible.harness import cli

    temp = tmp_path / "temp"
    temp.mkdir()
    stale = folder(temp, "crucible-worker-stale", owner=dead_pid())
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    argv = (["run", "--suite", "nope", "--out", str(tmp_path / "run")] if command == "run"
            else ["serve", "--task", "nope/nothing", "--workspace", str(tmp_path)])
    assert cli.main(argv) == 2  # bad input after the clean-up: nothing else of the command runs
    assert not stale.exists()
    assert "removed 1 scratch folder(s)" in capsys.readouterr().err
