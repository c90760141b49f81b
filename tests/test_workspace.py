import json
from pathlib import Path

import pytest

from crucible.toolkit.task import discover_tasks, load_task
from crucible.toolkit.workspace import WorkspaceError, materialize, take_snapshot

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
