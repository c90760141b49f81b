import json
import os
from pathlib import Path

import pytest

from crucible.toolkit.task import discover_tasks, load_task
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
