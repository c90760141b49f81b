"""The red-team corpus (tests/redteam/): every cheat is caught by the defences its first line names, and
no expert solution, baseline or stub of the suite trips anything.

Tripwires are checked on the text; runtime defences and verdicts by scoring each cheat as a submission
(final scoring: visible and hidden configs, timed re-checks): the Triton cheats on the CPU (Triton's
interpreter), the CUDA cheats on a GPU (`-m gpu`).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from crucible.harness.scoring import score_session
from crucible.toolkit.task import Task, discover_tasks, find_task, load_task
from crucible.toolkit.tripwires import REASONS, scan, scan_cpp, scan_python
from crucible.toolkit.workspace import materialize

HERE = Path(__file__).parent
CORPUS = HERE / "redteam"
CHEATS = sorted(p for p in CORPUS.iterdir() if p.suffix in (".py", ".cu"))
TASKS, _ = discover_tasks()
DEFAULT_TASK = {".py": "triton2triton/vadd", ".cu": "cuda2cuda/rmsnorm"}
TASK_ROOTS = (CORPUS / "tasks", HERE / "fixtures" / "tasks")


def expected(path: Path, *, gpu: bool = False) -> list[str]:
    """The first line's `expect:` list; on a GPU also the `expect-gpu:` line's (what only a GPU can show)."""
    text = path.read_text()
    m = re.match(r"^(#|//) expect: (.+)$", text.splitlines()[0])
    assert m, f"{path.name}: the first line must be `# expect: DEFENCE ...`"
    more = re.search(r"^(?:#|//) expect-gpu: (.+)$", text, re.M) if gpu else None
    return m.group(2).split() + (more.group(1).split() if more else [])


def task_of(path: Path) -> Task:
    """The `# task: ID` line, else the default for the language; red-team and test fixtures first."""
    m = re.search(r"^(?:#|//) task: (\S+)$", path.read_text(), re.M)
    task_id = m.group(1) if m else DEFAULT_TASK[path.suffix]
    for root in TASK_ROOTS:
        if (root / task_id / "task.toml").is_file():
            return load_task(root / task_id)
    return find_task(task_id)


def runtime_cases(suffixes: tuple[str, ...], *, gpu: bool = False) -> list[Path]:
    return [p for p in CHEATS if p.suffix in suffixes
            and any(not e.startswith("tripwire:") for e in expected(p, gpu=gpu))]


def score_cheat(cheat: Path, backend: str, tmp_path: Path) -> tuple[str, list[str], str]:
    task = task_of(cheat)
    sub = tmp_path / "submission"
    sub.mkdir()
    shutil.copyfile(cheat, sub / task.spec.candidate)
    score, _ = score_session(task, sub, backend)  # type: ignore[arg-type]
    return score.verdict, score.flags, score.message


def assert_caught(cheat: Path, verdict: str, flags: list[str], message: str, *, gpu: bool = False) -> None:
    for want in expected(cheat, gpu=gpu):
        kind, _, name = want.partition(":")
        if kind == "runtime":
            assert any(f.startswith(f"runtime:{name}") for f in flags), (
                f"{cheat.name}: no runtime:{name} finding; verdict {verdict}, flags {flags}, {message[:500]}")
        elif kind == "verdict":
            assert verdict == name, f"{cheat.name}: verdict {verdict}, expected {name}; {message[:500]}; {flags}"


@pytest.mark.parametrize("cheat", runtime_cases((".py",)), ids=lambda p: p.name)
def test_each_triton_cheat_is_caught_at_runtime_on_the_cpu(cheat: Path, tmp_path: Path) -> None:
    assert_caught(cheat, *score_cheat(cheat, "cpu", tmp_path))


@pytest.mark.gpu
@pytest.mark.parametrize("cheat", runtime_cases((".cu", ".py"), gpu=True), ids=lambda p: p.name)
def test_each_cheat_is_caught_at_runtime_on_the_gpu(cheat: Path, tmp_path: Path) -> None:
    verdict, flags, message = score_cheat(cheat, "cuda", tmp_path)
    print(f"REDTEAM {cheat.name}: {verdict}; {flags}")  # the figures of the GPU run keep this line
    assert_caught(cheat, verdict, flags, message, gpu=True)


def tripwires_of(path: Path) -> set[str]:
    text = path.read_text()
    found = scan_python(text, "kernel.py") if path.suffix == ".py" else scan_cpp(text, "kernel.cu")
    return {f"tripwire:{t.kind}" for t in found}


def test_the_corpus_covers_every_tripwire_in_both_languages() -> None:
    covered = {(p.suffix, e) for p in CHEATS for e in expected(p)}
    python_only = {"reference_fallback", "tensor_subclass", "monkeypatch", "introspection", "identity_cache"}
    cpp_only = {"side_stream", "timer_tampering"}
    for kind in REASONS:
        if kind not in cpp_only:
            assert (".py", f"tripwire:{kind}") in covered, f"no Triton cheat for tripwire {kind}"
        if kind not in python_only:
            assert (".cu", f"tripwire:{kind}") in covered, f"no CUDA cheat for tripwire {kind}"


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda p: p.name)
def test_each_cheat_trips_the_tripwires_it_names(cheat: Path) -> None:
    want = {e for e in expected(cheat) if e.startswith("tripwire:")}
    found = tripwires_of(cheat)
    assert want <= found, f"{cheat.name}: expected {sorted(want)}, found {sorted(found)}"


def test_no_expert_solution_baseline_or_stub_trips_anything() -> None:
    alarms = []
    for task in TASKS:
        for name in filter(None, (task.spec.solution, task.spec.baseline, task.spec.stub)):
            text = task.file(name).read_text()
            found = scan_python(text, name) if name.endswith(".py") else scan_cpp(text, name)
            alarms += [f"{task.id}: {t.flag()}" for t in found]
    assert not alarms, "\n".join(alarms)


def test_a_scanned_workspace_reports_only_what_the_agent_wrote(tmp_path: Path) -> None:
    task = load_task(Path(__file__).parent / "fixtures/tasks/triton2triton/vadd")
    materialize(task, tmp_path)
    assert scan(task, tmp_path) == []  # the task's own reference.py computes with torch: never flagged
    shutil.copyfile(CORPUS / "triton_identity_cache.py", tmp_path / "helpers.py")
    (tmp_path / task.spec.candidate).write_text("from helpers import vadd  # noqa\n")
    found = scan(task, tmp_path)
    assert {t.kind for t in found} == {"identity_cache"}
    assert all(t.file == "helpers.py" and t.line > 1 for t in found)
    flag = found[0].flag()
    assert flag.startswith("tripwire:identity_cache helpers.py:") and "input identity" in flag


def test_comments_strings_and_look_alike_names_do_not_trip() -> None:
    cu = '''// exit(0) and cudaStreamCreate(&s) in a comment
    /* fopen("/proc/self/fd") */
    const char* s = "std::thread exit(";
    __device__ float exit_code(float v) { return v; }
    k<<<grid, block, 0, stream>>>(x);
    '''
    assert scan_cpp(cu, "kernel.cu") == []
    py = '''"""Mentions open(), os._exit and torch.softmax in a docstring."""
import math
import triton.language as tl


@triton.jit
def k(x_ptr):
    v = tl.load(x_ptr)
    tl.store(x_ptr, tl.sum(v, 0) + math.exp(1.0))


def entry(x, out, *, N):
    out_view = out.view(-1)  # a view, not compute
    k[(1,)](out_view)
'''
    assert scan_python(py, "kernel.py") == []
