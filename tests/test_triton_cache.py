"""Triton builds by content: what a runner compiled is kept for the next runner of the same kernel, taken
back as hostile files, never handed to another kernel's runner, and never kept from a run of hidden
configs; the compile tool answers an unchanged snapshot from its earlier trace."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from crucible.toolkit.evaluation import (
    EvalRequest,
    baseline_cache,
    candidate_cache,
    compile_snapshot,
    evaluate,
    kernel_spec,
)
from crucible.toolkit.judge.triton_cache import MAX_FILE_BYTES, harvest, seed
from crucible.toolkit.task import load_task
from crucible.toolkit.workspace import materialize, take_snapshot

FIXTURE = Path(__file__).parent / "fixtures/tasks/triton2triton/vadd"


def entry(cache: Path, name: str, files: dict[str, bytes]) -> Path:
    folder = cache / name
    folder.mkdir(parents=True)
    for file, data in files.items():
        (folder / file).write_bytes(data)
    return folder


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    scratch = tmp_path / "scratch"
    (scratch / "triton").mkdir(parents=True)
    return scratch / "triton"


def test_plain_entries_are_kept_and_copied_into_the_next_runners_cache(tmp_path: Path, cache: Path) -> None:
    entry(cache, "ABC123", {"k.cubin": b"\x7fELF", "k.json": b"{}"})
    store = tmp_path / "store"
    assert harvest(cache, store) == 1
    fresh = tmp_path / "next" / "triton"
    fresh.mkdir(parents=True)
    assert seed(store, fresh) == 1
    assert (fresh / "ABC123" / "k.cubin").read_bytes() == b"\x7fELF"
    (fresh / "ABC123" / "k.cubin").write_bytes(b"changed by the next runner")
    assert (store / "ABC123" / "k.cubin").read_bytes() == b"\x7fELF"  # a copy: the store is not reachable


def test_a_planted_link_never_makes_the_judge_copy_a_file_of_its_own(tmp_path: Path, cache: Path) -> None:
    secret = tmp_path / "hidden.toml"
    secret.write_text("[[configs]]\nname = 'secret'\n")
    entry(cache, "LINKED", {"k.json": b"{}"})
    (cache / "LINKED" / "k.cubin").symlink_to(secret)
    (cache / "DIRLINK").symlink_to(tmp_path)
    entry(cache, "HARD", {})
    os.link(secret, cache / "HARD" / "k.cubin")
    store = tmp_path / "store"
    assert harvest(cache, store) == 0
    assert not store.exists() or not any(store.iterdir())


def test_a_cache_folder_swapped_for_a_link_is_not_followed(tmp_path: Path, cache: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    entry(elsewhere, "ABC123", {"k.cubin": b"not the runner's"})
    shutil.rmtree(cache)
    cache.symlink_to(elsewhere)
    assert harvest(cache, tmp_path / "store") == 0


def test_odd_names_nested_folders_and_oversized_files_are_left_out(tmp_path: Path, cache: Path) -> None:
    entry(cache, "NESTED", {"k.json": b"{}"})
    (cache / "NESTED" / "sub").mkdir()
    entry(cache, "BIG", {"k.cubin": b"x" * (MAX_FILE_BYTES + 1)})
    entry(cache, "..odd", {"k.json": b"{}"})
    entry(cache, "FINE", {"k.json": b"{}"})
    store = tmp_path / "store"
    assert harvest(cache, store) == 1
    assert sorted(p.name for p in store.iterdir()) == ["FINE"]


def test_an_entry_already_kept_is_never_replaced(tmp_path: Path, cache: Path) -> None:
    store = tmp_path / "store"
    entry(store, "ABC123", {"k.cubin": b"first"})
    entry(cache, "ABC123", {"k.cubin": b"second"})
    assert harvest(cache, store) == 0
    assert (store / "ABC123" / "k.cubin").read_bytes() == b"first"


# A candidate that writes into its private Triton cache while it runs (what a hostile one would leave there).
PLANTER = '''
import os
import triton
import triton.language as tl

@triton.jit
def _vadd(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2 + tl.load(y + offs, mask=mask), mask=mask)

def vadd(x, y, out, N):
    folder = os.path.join(os.environ["TRITON_CACHE_DIR"], "PLANTED")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "seen.json"), "w") as f:
        f.write(str(N))
    _vadd[(triton.cdiv(N, 128),)](x, y, out, N, BLOCK=128)
'''


def planted(tmp_path: Path):
    task = load_task(FIXTURE)
    ws = tmp_path / "ws"
    materialize(task, ws)
    (ws / "kernel.py").write_text(PLANTER + f"# {tmp_path.name}\n")  # content of this test's own
    return task, take_snapshot(task, ws)


def test_a_candidates_cache_is_kept_from_visible_configs_for_its_own_content_only(tmp_path: Path) -> None:
    task, snap = planted(tmp_path)
    result = evaluate(task, snap, EvalRequest(configs=["small"], seeds=1, timing="quick", backend="cpu"))
    assert result.status == "ok", result.message
    mine = Path(candidate_cache(task, snap, "cpu", True).store)  # type: ignore[union-attr]
    assert (mine / "PLANTED" / "seen.json").read_text() == "1000"
    base = baseline_cache(task, kernel_spec(task, None, task.file("baseline.py")), "cpu")
    assert base is not None and not (Path(base.store) / "PLANTED").exists()


def test_a_candidates_cache_is_never_kept_from_a_run_that_saw_hidden_configs(tmp_path: Path) -> None:
    task, snap = planted(tmp_path)
    result = evaluate(task, snap, EvalRequest(configs=["tail"], seeds=1, timing="none", backend="cpu"))
    assert result.status == "ok", result.message
    mine = Path(candidate_cache(task, snap, "cpu", False).store)  # type: ignore[union-attr]
    assert not (mine / "PLANTED").exists()


def test_compiling_an_unchanged_snapshot_answers_from_its_earlier_trace(tmp_path: Path) -> None:
    task = load_task(FIXTURE)
    ws = tmp_path / "ws"
    materialize(task, ws)
    first = compile_snapshot(task, take_snapshot(task, ws), "cpu")
    again = compile_snapshot(task, take_snapshot(task, ws), "cpu")
    assert first.ok and not first.cached and first.kernels
    assert again.cached and again.kernels == first.kernels and again.diagnostics == first.diagnostics
    (ws / "kernel.py").write_text((ws / "kernel.py").read_text() + "\n# edited\n")
    edited = compile_snapshot(task, take_snapshot(task, ws), "cpu")
    assert edited.ok and not edited.cached


def test_a_failed_trace_is_traced_again(tmp_path: Path) -> None:
    task = load_task(FIXTURE)
    ws = tmp_path / "ws"
    materialize(task, ws)
    (ws / "kernel.py").write_text("def vadd(x, y, out, N):\n    raise RuntimeError('not yet')\n")
    snap = take_snapshot(task, ws)
    assert not compile_snapshot(task, snap, "cpu").ok
    again = compile_snapshot(task, snap, "cpu")
    assert not again.ok and not again.cached
