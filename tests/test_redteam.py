"""The red-team corpus (tests/redteam/, one folder per class of attack): every cheat is caught, by the
defences its first line names, and leaves nothing behind; no expert solution, baseline or stub of the suite
trips anything.

"Caught" means the final verdict is not `pass`, whatever else the expectations say, except for a cheat whose
line says `verdict:defeated`: an attack the design makes void (signals that reach only the cheat itself,
caches that never hit on inputs made anew each call), which then computes honestly; it may pass, but only
with no more than DEFEATED_MARGIN times the speedup of the task's own expert solution scored the same way.
Tripwires are checked on
the text; runtime defences and verdicts by scoring each cheat as a submission (final scoring: visible and
hidden configs, profiled calls, timed re-checks): every Triton cheat on the CPU (Triton's interpreter), every
cheat on a GPU (`-m gpu`). The CUDA cheats are also built on the CPU, where the build's own defences show.
Files under audit/ are not cheats: behaviours a person should see flagged, which leave the verdict alone.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from crucible.harness.scoring import score_session
from crucible.toolkit.evaluation import build
from crucible.toolkit.task import Task, discover_tasks, find_task, load_task
from crucible.toolkit.tripwires import REASONS, scan, scan_cpp, scan_python
from crucible.toolkit.workspace import materialize

HERE = Path(__file__).parent
CORPUS = HERE / "redteam"
CHEATS = sorted(p for p in CORPUS.rglob("*")
                if p.suffix in (".py", ".cu") and p.relative_to(CORPUS).parts[0] != "tasks")
TASKS, _ = discover_tasks()
DEFAULT_TASK = {".py": "triton2triton/vadd", ".cu": "cuda2cuda/rmsnorm"}
TASK_ROOTS = (CORPUS / "tasks", HERE / "fixtures" / "tasks")
LEAK_MARK = "LEAKED"
"""Cheats that manage to read what they must not print it with this mark: it must never reach a result."""
LINGER_PREFIX = "crt-"
"""Processes a cheat leaves behind name themselves with this prefix (/proc/PID/comm)."""
LEFTOVER_MARK = "crucible-redteam"
"""Files a cheat leaves behind (stores, caches, ballast) carry this in their names."""
BUILD_LIMIT_BYTES = 1 << 30
"""A build may not write more than a runner may (judge/link.py FILE_LIMIT_BYTES)."""


DEFEATED_MARGIN = 1.75
"""A defeated attack's speedup against its honest twin's (the expert solution): CPU timings are noisy."""
_HONEST: dict[tuple[str, str], float | None] = {}


def honest_speedup(task: Task, backend: str, tmp_path: Path) -> float | None:
    """The task's expert solution scored like a cheat (once per task and backend)."""
    key = (task.id, backend)
    if key not in _HONEST:
        sub = tmp_path / "honest"
        sub.mkdir()
        shutil.copyfile(task.file(task.spec.solution), sub / task.spec.candidate)  # type: ignore[arg-type]
        score, _ = score_session(task, sub, backend)  # type: ignore[arg-type]
        assert score.verdict == "pass", f"{task.id}: the expert solution itself scores {score.verdict}"
        _HONEST[key] = score.speedup
    return _HONEST[key]


def cheat_id(path: Path) -> str:
    return path.relative_to(CORPUS).as_posix()


def is_audit(path: Path) -> bool:
    return path.relative_to(CORPUS).parts[0] == "audit"


def expected(path: Path, *, gpu: bool = False) -> list[str]:
    """The first line's `expect:` list; on a GPU also the `expect-gpu:` line's (what only a GPU shows),
    whose `verdict:` replaces the first line's."""
    text = path.read_text()
    m = re.match(r"^(#|//) expect: (.+)$", text.splitlines()[0])
    assert m, f"{cheat_id(path)}: the first line must be `# expect: DEFENCE ...`"
    found = m.group(2).split()
    more = re.search(r"^(?:#|//) expect-gpu: (.+)$", text, re.M) if gpu else None
    if more:
        extra = more.group(1).split()
        if any(e.startswith("verdict:") for e in extra):
            found = [e for e in found if not e.startswith("verdict:")]
        found += extra
    return found


def task_of(path: Path) -> Task:
    """The `# task: ID` line, else the default for the language; red-team and test fixtures first."""
    m = re.search(r"^(?:#|//) task: (\S+)$", path.read_text(), re.M)
    task_id = m.group(1) if m else DEFAULT_TASK[path.suffix]
    for root in TASK_ROOTS:
        if (root / task_id / "task.toml").is_file():
            return load_task(root / task_id)
    return find_task(task_id)


# ---------------------------------------------------------------- what a cheat may leave behind

def _lingering() -> set[str]:
    out = set()
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:
            continue
        if name.startswith(LINGER_PREFIX):
            out.add(f"{comm.parent.name}:{name}")
    return out


def _marked_files() -> set[str]:
    flat = ["/dev/shm", "/tmp", "/var/tmp"]
    deep = [Path.home() / ".triton", Path.home() / ".cache" / "crucible" / "triton",
            Path(os.environ.get("CRUCIBLE_CACHE", "/nonexistent")) / "triton"]
    out = {str(p) for d in flat for p in Path(d).glob(f"{LEFTOVER_MARK}*")}
    return out | {str(p) for d in deep for p in d.glob(f"**/{LEFTOVER_MARK}*")}


def _state(task: Task) -> dict[str, set[str]]:
    return {"/dev/shm": set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set(),
            "the task folder": {p.relative_to(task.root).as_posix() for p in task.root.rglob("*")},
            "marked files": _marked_files(), "processes": _lingering()}


def assert_nothing_left(before: dict[str, set[str]], after: dict[str, set[str]], cheat: Path) -> None:
    for where, names in after.items():
        new = names - before[where]
        assert not new, f"{cheat_id(cheat)}: left behind in {where}: {sorted(new)[:10]}"


# ---------------------------------------------------------------- scoring

def score_cheat(cheat: Path, backend: str, tmp_path: Path) -> tuple[str, list[str], str, str]:
    """verdict, flags, message, and every text of the evaluation an agent could be shown (for a defeated
    attack that passed, its speedup against the honest one's is added to the message)."""
    task = task_of(cheat)
    sub = tmp_path / "submission"
    sub.mkdir()
    shutil.copyfile(cheat, sub / task.spec.candidate)
    before = _state(task)
    score, ev = score_session(task, sub, backend)  # type: ignore[arg-type]
    assert_nothing_left(before, _state(task), cheat)
    shown = [score.message, *score.flags]
    if ev is not None:
        shown += [ev.message, ev.stderr_tail or "", *(c.message or "" for c in ev.configs)]
    verdict, message = score.verdict, score.message
    if verdict == "pass" and "verdict:defeated" in expected(cheat, gpu=backend != "cpu"):
        honest = honest_speedup(task, backend, tmp_path)
        gained = score.speedup is not None and honest is not None and score.speedup > DEFEATED_MARGIN * honest
        verdict = "pass" if gained else "defeated"
        message = f"{message} [speedup {score.speedup} against the expert's {honest}]"
    return verdict, score.flags, message, "\n".join(shown)


def assert_caught(cheat: Path, verdict: str, flags: list[str], message: str, shown: str, *,
                  gpu: bool = False) -> None:
    where = f"{cheat_id(cheat)}: verdict {verdict}, flags {[f[:200] for f in flags]}, {message[:400]}"
    assert LEAK_MARK not in shown, f"{where}: it read and showed what it must not:\n{shown[:2000]}"
    if not is_audit(cheat):
        assert verdict != "pass", f"{where}: NOT CAUGHT"
    for want in expected(cheat, gpu=gpu):
        kind, _, name = want.partition(":")
        if kind == "runtime":
            assert any(f.startswith(f"runtime:{name}") for f in flags), f"{where}: no runtime:{name} finding"
        elif kind == "verdict":
            assert verdict == name, f"{where}: expected verdict {name}"


KNOWN_HOLES = {
    "what_ran/triton_profiler_aware.py": "the kernel list is the runner's own profiler's claim: a candidate that "
                                         "behaves while profiled passes (docs/integrity.md, known gaps)",
    "what_ran/triton_forged_profile.py": "the kernel list is the runner's own profiler's claim: a candidate that "
                                         "forges it passes (docs/integrity.md, known gaps)",
    "what_ran/cuda_forged_profile.cu": "the kernel list is the runner's own profiler's claim (known gaps)",
}
"""Cheats that still pass, on purpose in the corpus: strict xfails, so closing one turns its test red until it
leaves this list."""


def cases(cheats: list[Path]) -> list:
    return [pytest.param(p, id=cheat_id(p), marks=pytest.mark.xfail(strict=True, reason=KNOWN_HOLES[cheat_id(p)]))
            if cheat_id(p) in KNOWN_HOLES else pytest.param(p, id=cheat_id(p)) for p in cheats]


@pytest.mark.slow
@pytest.mark.parametrize("cheat", cases([p for p in CHEATS if p.suffix == ".py"]))
def test_each_triton_cheat_is_caught_on_the_cpu(cheat: Path, tmp_path: Path) -> None:
    assert_caught(cheat, *score_cheat(cheat, "cpu", tmp_path))


@pytest.mark.gpu
@pytest.mark.parametrize("cheat", cases(CHEATS))
def test_each_cheat_is_caught_on_the_gpu(cheat: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    verdict, flags, message, shown = score_cheat(cheat, "cuda", tmp_path)
    line = f"REDTEAM {cheat_id(cheat)}: {verdict} in {time.monotonic() - started:.0f} s; {flags}"
    print(line)  # the figures of the GPU run keep this line
    if os.environ.get("CRUCIBLE_REDTEAM_LOG"):  # at once: a run cut by its time limit keeps what it scored
        with open(os.environ["CRUCIBLE_REDTEAM_LOG"], "a") as log:
            log.write(f"{line[:600]} | {message[:300]}\n")
    if verdict == "timeout":  # where the judge hung: its stacks at the limit end the evaluation's stderr
        print(shown[-4000:])
    assert_caught(cheat, verdict, flags, message, shown, gpu=True)


def _secrets(task: Task) -> list[str]:
    """Distinctive lines of the files an agent never sees (hidden configs, the expert solution)."""
    lines = []
    for name in ("hidden.toml", task.spec.solution):
        if name and (task.root / name).is_file():
            lines += [ln.strip() for ln in (task.root / name).read_text().splitlines() if len(ln.strip()) >= 24]
    return lines


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
@pytest.mark.parametrize("cheat", [p for p in CHEATS if p.suffix == ".cu"], ids=cheat_id)
def test_each_cuda_cheat_builds_only_from_its_snapshot(cheat: Path, tmp_path: Path) -> None:
    """Builds run outside the sandbox: a cheat must not get the task's files, or more disk than a runner,
    through the build. Every other cheat compiles (so the GPU run tests the cheat, not a typo)."""
    task = task_of(cheat)
    shutil.copyfile(cheat, tmp_path / task.spec.candidate)
    result = build(task, tmp_path, task.spec.candidate, "cpu")
    artifact = Path(result.artifact) if result.artifact else None
    try:
        if "verdict:compile_error" not in expected(cheat):
            assert result.ok, f"{cheat_id(cheat)} does not compile: {result.diagnostics[:3]}"
        if artifact is None:
            return
        size = artifact.stat().st_size
        assert size <= BUILD_LIMIT_BYTES, f"{cheat_id(cheat)}: the build wrote a {size:,}-byte library"
        data = artifact.read_bytes()
        leaked = [s for s in _secrets(task) if s.encode() in data]
        assert not leaked, f"{cheat_id(cheat)}: the built library holds the task's hidden files: {leaked[:3]}"
        assert "verdict:compile_error" not in expected(cheat), f"{cheat_id(cheat)}: the build should refuse it"
    finally:
        if artifact is not None and artifact.stat().st_size > BUILD_LIMIT_BYTES:
            shutil.rmtree(artifact.parent, ignore_errors=True)  # never keep the ballast


# ---------------------------------------------------------------- tripwires

def tripwires_of(path: Path) -> set[str]:
    text = path.read_text()
    found = scan_python(text, "kernel.py") if path.suffix == ".py" else scan_cpp(text, "kernel.cu")
    return {f"tripwire:{t.kind}" for t in found}


def test_the_corpus_covers_every_tripwire_in_both_languages() -> None:
    covered = {(p.suffix, e) for p in CHEATS for e in expected(p)}
    # unscannable: C++ is read as text with no depth to exceed; its other cause, a scan past its time, has a
    # test of its own (tests/test_tripwires_more.py)
    python_only = {"reference_fallback", "tensor_subclass", "monkeypatch", "introspection", "identity_cache",
                   "unscannable"}
    cpp_only = {"side_stream", "timer_tampering", "python_api"}  # python_api: Python's C API from a library
    for kind in REASONS:
        if kind not in cpp_only:
            assert (".py", f"tripwire:{kind}") in covered, f"no Triton cheat for tripwire {kind}"
        if kind not in python_only:
            assert (".cu", f"tripwire:{kind}") in covered, f"no CUDA cheat for tripwire {kind}"


def test_the_corpus_covers_every_class_of_attack_in_both_languages() -> None:
    classes = {"answers", "tampering", "channel", "baseline", "skipping", "what_ran", "leaks", "state", "timing",
               "exit"}
    have = {(p.relative_to(CORPUS).parts[0], p.suffix) for p in CHEATS}
    missing = [f"{c} {s}" for c in sorted(classes) for s in (".py", ".cu") if (c, s) not in have]
    assert not missing, f"classes without a cheat: {missing}"
    assert {p.relative_to(CORPUS).parts[0] for p in CHEATS} <= classes | {"audit"}, "a folder the README lacks"


@pytest.mark.parametrize("cheat", CHEATS, ids=cheat_id)
def test_each_cheat_trips_the_tripwires_it_names(cheat: Path) -> None:
    want = {e for e in expected(cheat) if e.startswith("tripwire:")}
    found = tripwires_of(cheat)
    assert want <= found, f"{cheat_id(cheat)}: expected {sorted(want)}, found {sorted(found)}"


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
    shutil.copyfile(CORPUS / "skipping" / "triton_sampled_checksum_cache.py", tmp_path / "helpers.py")
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
