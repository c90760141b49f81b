import json
import os
from pathlib import Path

import pytest

from crucible.toolkit.task import discover_tasks, find_task, load_task
from crucible.toolkit.workspace import WorkspaceError, materialize, read_source, take_snapshot

SUITE, _ = discover_tasks()


@pytest.mark.parametrize("task", SUITE + [load_task(Path(__file__).parent / "fixtures/tasks/triton2triton/vadd")],
                         ids=lambda t: t.id)
def test_nothing_of_the_hidden_configs_or_the_solution_reaches_the_workspace(task, tmp_path: Path) -> None:
    names = materialize(task, tmp_path)
    assert "hidden.toml" not in names and task.spec.solution not in names
    solution = task.file(task.spec.solution).read_bytes()
    blob = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for config in task.hidden.configs:
        assert f'"{config.name}"'.encode() not in blob, f"hidden config {config.name} leaked"
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert p.read_bytes() != solution, f"{p.name} is the expert solution"
    visible = json.loads((tmp_path / "task.json").read_text())
    assert "solution" not in visible
    assert [c["name"] for c in visible["configs"]] == [c.name for c in task.spec.configs]


def test_the_candidate_starts_as_the_baseline(tiny_task_dir: Path, tmp_path: Path) -> None:
    task = load_task(tiny_task_dir)
    materialize(task, tmp_path / "ws")
    assert (tmp_path / "ws/kernel.py").read_text() == (tiny_task_dir / "baseline.py").read_text()


def test_materialize_refuses_a_non_empty_folder(tiny_task_dir: Path, tmp_path: Path) -> None:
    task = load_task(tiny_task_dir)
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(WorkspaceError, match="not empty"):
        materialize(task, tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_snapshots_are_named_by_content_and_read_only(tiny_task_dir: Path, tmp_path: Path) -> None:
    task = load_task(tiny_task_dir)
    ws = tmp_path / "ws"
    materialize(task, ws)
    first = take_snapshot(task, ws)
    again = take_snapshot(task, ws)
    assert first.digest == again.digest and first.root == again.root
    assert "kernel.py" in first.files and "task.json" not in first.files
    assert not (first.root / "kernel.py").stat().st_mode & 0o222
    (ws / "kernel.py").write_text((ws / "kernel.py").read_text() + "\n# changed\n")
    changed = take_snapshot(task, ws)
    assert changed.digest != first.digest
    assert (first.root / "kernel.py").read_text() != (changed.root / "kernel.py").read_text()


def test_a_snapshot_without_the_candidate_file_says_how_to_restore_it(tiny_task_dir: Path, tmp_path: Path) -> None:
    task = load_task(tiny_task_dir)
    materialize(task, tmp_path / "ws")
    (tmp_path / "ws/kernel.py").unlink()
    with pytest.raises(WorkspaceError, match="restore it from baseline.py"):
        take_snapshot(task, tmp_path / "ws")


def test_a_snapshot_takes_no_file_through_a_link_even_one_swapped_in_while_it_copies(
        tiny_task_dir: Path, tmp_path: Path) -> None:
    """The agent edits its workspace while the server snapshots it: nothing outside the workspace may get in,
    by a link in place of the kernel, a linked folder, or a file swapped for a link between the listing and
    the read (read_source is what take_snapshot reads every file with)."""
    task = load_task(tiny_task_dir)
    ws = tmp_path / "ws"
    materialize(task, ws)
    secret = tmp_path / "outside" / "solution.py"
    secret.parent.mkdir()
    secret.write_text("EXPERT = True\n")
    (ws / "helper.py").symlink_to(secret)
    (ws / "linked").symlink_to(secret.parent, target_is_directory=True)
    snap = take_snapshot(task, ws)
    assert "helper.py" not in snap.files and not any(f.startswith("linked") for f in snap.files)
    real = ws.resolve()
    assert read_source(real, ws / "helper.py") is None  # the last step is a link
    assert read_source(real, ws / "linked" / "solution.py") is None  # a folder above it is one
    assert read_source(real, ws / "kernel.py") == (ws / "kernel.py").read_bytes()
    os.mkfifo(ws / "pipe.py")  # a FIFO must not hang the server
    assert read_source(real, ws / "pipe.py") is None
    (ws / "pipe.py").unlink()
    (ws / "kernel.py").unlink()
    (ws / "kernel.py").symlink_to(secret)
    with pytest.raises(WorkspaceError, match="kernel.py is a link or not a plain file"):
        take_snapshot(task, ws)


def test_a_sessions_snapshot_store_keeps_to_its_size_by_dropping_the_oldest(tmp_path: Path) -> None:
    # One snapshot per tool call that changed the workspace: an agent writing a new 4 MB header before every
    # call filled the disk outside its own limits.
    import os
    import time

    from crucible.toolkit.workspace import prune_store

    store = tmp_path / "snapshots"
    for i in range(6):
        snap = store / f"s{i}"
        snap.mkdir(parents=True)
        (snap / "kernel.py").write_bytes(b"x" * 1000)
        os.utime(snap, (time.time() - 100 + i, time.time() - 100 + i))
    assert prune_store(store, keep=store / "s5", limit=10_000) == []
    removed = prune_store(store, keep=store / "s0", limit=4_000)  # the one just made may be the oldest
    assert removed == [store / "s1", store / "s2", store / "s3"]
    assert sorted(p.name for p in store.iterdir()) == ["s0", "s4", "s5"]


def test_a_snapshot_stops_reading_once_past_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os  # noqa: F811

    from crucible.toolkit import workspace

    task = find_task("triton2triton/softmax")
    ws = tmp_path / "ws"
    materialize(task, ws)
    (ws / "big.h").write_bytes(b"y" * (3 << 20))
    for i in range(50):  # links to one file: little disk, and the limit's worth 50 times over to read
        os.link(ws / "big.h", ws / f"copy{i}.h")
    read: list[int] = []
    original = workspace.read_source
    monkeypatch.setattr(workspace, "read_source", lambda *a, **k: read.append(1) or original(*a, **k))
    with pytest.raises(WorkspaceError, match="bytes; the limit is"):
        workspace.take_snapshot(task, ws, store=tmp_path / "store")
    assert len(read) <= 3
