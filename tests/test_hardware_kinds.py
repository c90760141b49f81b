"""Kinds of GPU and GPUs that come back, tested on the CPU with declared devices: a task's `[hardware]`
requirement sends its scoring only to an AMD GPU, falls back to HIP on CUDA where the task allows it (and the
placement records it), else is refused as infra_error naming the hardware; a retired GPU is probed again
after a cool-down and returns to rotation, and a truly broken one stays out after a few probes."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from crucible.harness import placement, scoring
from crucible.harness.export import SessionExport, session_rows
from crucible.harness.models import Placement, Score, Usage
from crucible.harness.placement import Device, DeviceError, Placer, route, score_placed
from crucible.harness.scoring import LocalScoring
from crucible.harness.store import STORE_FILE, RunRow, ScoreRow, SessionRecord, SessionRow, Store
from crucible.toolkit.devices import LeaseCancelled
from crucible.toolkit.results import DeviceInfo, Evaluation
from crucible.toolkit.task import TASKS_ROOT, Task, find_task, load_task

H200, MI300X = "NVIDIA H200", "AMD Instinct MI300X"
FIXTURES = Path(__file__).parent / "fixtures" / "tasks"
PASS = Score(verdict="pass", message="right")
INFRA = Score(verdict="infra_error", message="could not run")
FAULT = "the judge failed: CUDA error: GPU is lost (Xid 79)"


@pytest.fixture(autouse=True)
def own_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lease files of this test's own, so that no other run on this machine holds a declared GPU."""
    monkeypatch.setenv("CRUCIBLE_CACHE", str(tmp_path / "cache"))


def hip_task(tmp_path: Path, hardware: str = "") -> Task:
    """A copy of a HIP task of the suite, with `hardware` appended to its task.toml."""
    folder = tmp_path / f"hip{len(list(tmp_path.glob('hip*')))}"
    shutil.copytree(TASKS_ROOT / "hip2hip" / "gemv_fp32", folder)
    if hardware:
        (folder / "task.toml").write_text((folder / "task.toml").read_text() + "\n" + hardware)
    return load_task(folder)


AMD_ONLY = '[hardware]\nvendor = "amd"\n'
AMD_OR_HIP_ON_CUDA = '[hardware]\nvendor = "amd"\nfallback = "hip-on-cuda"\n'


def evaluation(backend: str = "cuda", status: str = "ok", message: str = "", name: str = H200) -> Evaluation:
    return Evaluation(task="t", snapshot="s", backend=backend, status=status, message=message,  # type: ignore[arg-type]
                      seconds=0.1, device=DeviceInfo(backend=backend, name=name, torch="2"))  # type: ignore[arg-type]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    """Stands in for the engine: every evaluation passes; records (backend, GPU) of each."""
    calls: list[tuple[str, int | None]] = []

    def fake_score_session(task, submission, backend, *, pool=None, gpu=None, **kw):  # type: ignore[no-untyped-def]
        calls.append((backend, gpu))
        return PASS, evaluation(backend, name=MI300X if backend == "rocm" else H200)

    monkeypatch.setattr(scoring, "score_session", fake_score_session)
    monkeypatch.setattr(scoring, "judge_pool", lambda backend, gpu=None: f"{backend} pool of GPU {gpu}")
    return calls


def mixed() -> LocalScoring:
    """Two H200s and one MI300X, declared (a run whose pools are NVIDIA and AMD)."""
    return LocalScoring(devices={"cuda": [Device(index=0, name=H200), Device(index=1, name=H200)],
                                 "rocm": [Device(index=0, name=MI300X)]})


def nvidia_only() -> LocalScoring:
    return LocalScoring(devices={"cuda": [Device(index=0, name=H200), Device(index=1, name=H200)]})


# ---------------------------------------------------------------- kinds of GPU


def test_a_task_that_needs_amd_goes_only_to_the_amd_gpu_of_a_mixed_run(
        tmp_path: Path, asked: list[tuple[str, int | None]]) -> None:
    local, task = mixed(), hip_task(tmp_path, AMD_ONLY)
    placed = [local.score(task, tmp_path, "cuda") for _ in range(4)]
    assert asked == [("rocm", 0)] * 4, "every evaluation on the AMD GPU, none on the H200s"
    assert all(p.score.verdict == "pass" and p.placement.gpu_name == MI300X for p in placed)
    assert all(p.placement.hip_on_cuda is False and p.placement.note == "" for p in placed)
    asked.clear()
    triton = find_task("triton2triton/vadd", FIXTURES)
    others = [local.score(triton, tmp_path, "cuda") for _ in range(2)]
    assert {b for b, _ in asked} == {"cuda"} and {g for _, g in asked} == {0, 1}, "a Triton task stays on the run's"
    assert all(p.placement.hip_on_cuda is None for p in others)


def test_a_hip_task_that_asks_for_nothing_prefers_amd_and_else_runs_as_hip_on_cuda_recorded(
        tmp_path: Path, asked: list[tuple[str, int | None]]) -> None:
    task = hip_task(tmp_path)
    assert mixed().score(task, tmp_path, "cuda").placement.hip_on_cuda is False and asked == [("rocm", 0)]
    placed = nvidia_only().score(task, tmp_path, "cuda")
    assert placed.score.verdict == "pass" and asked[-1][0] == "cuda"
    assert placed.placement.hip_on_cuda is True and placed.placement.note == "HIP on CUDA: this run has no AMD GPU"


def test_the_fallback_runs_hip_on_cuda_where_the_run_has_no_amd_gpu_and_the_placement_says_so(
        tmp_path: Path, asked: list[tuple[str, int | None]]) -> None:
    placed = nvidia_only().score(hip_task(tmp_path, AMD_OR_HIP_ON_CUDA), tmp_path, "cuda")
    assert placed.score.verdict == "pass" and asked == [("cuda", placed.placement.gpu)]
    assert placed.placement.hip_on_cuda is True and placed.placement.gpu_name == H200
    assert 'by the task\'s fallback: [hardware] vendor = "amd"' in placed.placement.note
    # with an AMD GPU in the run, the fallback is not used
    again = mixed().score(hip_task(tmp_path, AMD_OR_HIP_ON_CUDA), tmp_path, "cuda")
    assert again.placement.hip_on_cuda is False and asked[-1] == ("rocm", 0)


def test_without_amd_gpu_or_fallback_the_session_is_refused_as_infra_error_naming_the_hardware(
        tmp_path: Path, asked: list[tuple[str, int | None]]) -> None:
    task = hip_task(tmp_path, AMD_ONLY)
    placed = nvidia_only().score(task, tmp_path, "cuda")
    assert asked == [], "nothing evaluated"
    assert placed.score.verdict == "infra_error", "never the agent's failure"
    message = placed.score.message
    assert f"{task.id} needs an AMD GPU" in message and '[hardware] vendor = "amd"' in message
    assert "NVIDIA (cuda)" in message and "allows no fallback" in message and "crucible score RUN" in message
    assert placed.placement.attempts == 0 and placed.placement.hip_on_cuda is None
    # the cpu backend has no GPU of either vendor
    on_cpu = LocalScoring(devices={}).score(hip_task(tmp_path, AMD_OR_HIP_ON_CUDA), tmp_path, "cpu")
    assert on_cpu.score.verdict == "infra_error" and "has no GPU" in on_cpu.score.message
    assert "HIP on CUDA, needs an NVIDIA GPU and there is none either" in on_cpu.score.message
    # no submission: scored as such (score_session's no_submission), not refused: nothing would have run
    unsubmitted = nvidia_only().score(task, None, "cuda")
    assert asked == [("cuda", None)] and "needs an AMD GPU" not in unsubmitted.score.message


def test_route_covers_each_requirement_and_pool() -> None:
    triton = find_task("triton2triton/vadd", FIXTURES).spec
    nvidia = triton.model_copy(update={"hardware": triton.hardware.model_copy(update={"vendor": "nvidia"})})
    assert route(triton, "cpu", []).backend == "cpu" and route(triton, "cpu", []).hip_on_cuda is None
    assert route(triton, "rocm", ["rocm"]).backend == "rocm"
    assert route(nvidia, "rocm", ["rocm", "cuda"]).backend == "cuda"
    refused = route(nvidia, "rocm", ["rocm"], where="the cluster")
    assert refused.backend is None and "needs an NVIDIA GPU" in refused.refusal and "the cluster has AMD (rocm)" in \
        refused.refusal


def test_hip_on_cuda_is_stored_and_exported(tmp_path: Path) -> None:
    store = Store(tmp_path / STORE_FILE)
    store.put_run(RunRow(id="r", config={}, config_digest="d", argv=[], crucible_version="0",
                         evaluator_version="0", evaluator_digest="0", python="3", torch="2", triton="3",
                         device=H200, backend="cuda", sandbox="none", started_at="t"))
    for sid, hip_on_cuda in (("a", True), ("b", False), ("c", None)):
        store.finish_session(SessionRecord(
            session=SessionRow(id=sid, run_id="r", task="hip2hip/gemv_fp32", agent="scripted", model=None,
                               repeat=1, state="done"), tool_calls=[], submissions=[], usage=Usage(),
            score=ScoreRow(session_id=sid, score=PASS, backend="cuda", scored_at="t",
                           placement=Placement(gpu=0, gpu_name=H200, hip_on_cuda=hip_on_cuda))))
    assert [store.score(s).placement.hip_on_cuda for s in "abc"] == [True, False, None]  # type: ignore[union-attr]
    store.close()
    rows = session_rows(tmp_path)
    assert [r.hip_on_cuda for r in rows] == [True, False, None]
    assert "hip_on_cuda" in SessionExport.model_fields


# ---------------------------------------------------------------- retired GPUs probed again


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_retired_gpu_is_probed_after_its_cool_down_and_returns_to_rotation() -> None:
    clock, probed = Clock(), []

    def probe(backend: str, device: Device) -> str | None:
        probed.append(device.index)
        return None  # fit again: the fault was transient

    placer = Placer("cuda", [Device(index=0, name=H200), Device(index=1, name=H200)], probe=probe,
                    reprobe_after_s=10, clock=clock)
    fault_once = iter([True])
    placed = score_placed(placer, lambda d: (INFRA, evaluation(status="infra", message=FAULT))
                          if d is not None and d.index == 0 and next(fault_once, False) else (PASS, evaluation()))
    assert placed.score.verdict == "pass" and list(placer.retired) == [0]
    clock.now = 9
    assert placer.reprobe() == [] and probed == [], "not before its cool-down"
    clock.now = 10
    assert placer.reprobe() == [0] and probed == [0]
    assert not placer.retired and [d.index for d in placer.healthy()] == [0, 1]
    assert any("GPU 0 back in rotation: probe 1 of 3 passed" in line for line in placer.log)
    used = {score_placed(placer, lambda d: (PASS, evaluation())).placement.gpu for _ in range(4)}
    assert used == {0, 1}, "it takes evaluations again"


def test_a_gpu_that_fails_every_probe_stays_out_after_the_cap_with_the_cool_down_doubling() -> None:
    clock, probed = Clock(), []

    def probe(backend: str, device: Device) -> str | None:
        probed.append(clock.now)
        return "the driver no longer lists GPU 1"

    placer = Placer("cuda", [Device(index=0, name=H200), Device(index=1, name=H200)], probe=probe,
                    reprobe_after_s=10, max_probes=3, clock=clock)
    placer.retire(Device(index=1, name=H200), "Xid 79")
    for now in (10, 29, 30, 69, 70, 10_000, 100_000):
        clock.now = now
        assert placer.reprobe() == []
    assert probed == [10, 30, 70], "after 10 s, then 20 s, then 40 s; then never again"
    assert list(placer.retired) == [1] and placer.retired[1] == "Xid 79"
    assert "GPU 1 out of rotation for good (3 probe(s) spent)" in placer.log[-1]
    # the run goes on on the other GPU
    assert {score_placed(placer, lambda d: (PASS, evaluation())).placement.gpu for _ in range(3)} == {0}
    placer.retire(Device(index=0, name=H200), "Xid 48")
    with pytest.raises(DeviceError, match=r"GPU 1: Xid 79 \(for good\)"), placer.slot():
        pass


def test_a_gpu_that_keeps_failing_after_it_came_back_is_capped_too() -> None:
    clock = Clock()
    placer = Placer("cuda", [Device(index=0, name=H200)], probe=lambda b, d: None, reprobe_after_s=1,
                    max_probes=2, clock=clock)
    for n in range(2):
        placer.retire(Device(index=0, name=H200), "Xid 79")
        clock.now += 1000
        assert placer.reprobe() == [0], f"return {n + 1}"
    placer.retire(Device(index=0, name=H200), "Xid 79")
    clock.now += 10_000
    assert placer.reprobe() == [] and list(placer.retired) == [0]


def test_a_probe_that_cannot_get_at_the_gpu_spends_nothing() -> None:
    clock, answers = Clock(), iter(["busy", None])

    def probe(backend: str, device: Device) -> str | None:
        if next(answers) == "busy":
            raise LeaseCancelled("another process held it")
        return None

    placer = Placer("cuda", [Device(index=0, name=H200)], probe=probe, reprobe_after_s=5, max_probes=1, clock=clock)
    placer.retire(Device(index=0, name=H200), "Xid 79")
    clock.now = 5
    assert placer.reprobe() == [] and "put off" in placer.log[-1]
    clock.now = 10
    assert placer.reprobe() == [0], "its one probe was still left"


def test_when_every_gpu_is_retired_an_evaluation_waits_for_a_due_probe_and_runs_on_the_gpu_it_brings_back() -> None:
    started = threading.Event()

    def probe(backend: str, device: Device) -> str | None:
        started.set()
        return None

    placer = Placer("cuda", [Device(index=3, name=H200)], probe=probe, reprobe_after_s=0.05)
    placer.retire(Device(index=3, name=H200), "Xid 79")
    # before its cool-down nothing waits: no GPU now
    with pytest.raises(DeviceError, match="every GPU is out of rotation"), placer.slot():
        pass
    threading.Event().wait(0.1)
    placed = score_placed(placer, lambda d: (PASS, evaluation()))
    assert started.is_set() and placed.score.verdict == "pass" and placed.placement.gpu == 3


def test_the_default_probe_needs_the_driver_to_list_the_gpu_and_a_tiny_job_to_run_on_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "list_gpus", lambda backend: [Device(index=0, name=H200)])
    why = placement.probe_gpu("cuda", Device(index=2, name=H200))
    assert why == "the driver no longer lists GPU 2"

    def unlisted(backend: str) -> list[Device]:
        raise DeviceError("cannot list the cuda GPUs of this host (nvidia-smi: not found)")

    monkeypatch.setattr(placement, "list_gpus", unlisted)
    assert "cannot list" in (placement.probe_gpu("cuda", Device(index=0, name=H200)) or "")
    # listed, but the tiny job cannot run here (no GPU on this machine): not fit
    monkeypatch.setattr(placement, "list_gpus", lambda backend: [Device(index=0, name=H200)])
    why = placement.probe_gpu("cuda", Device(index=0, name=H200), timeout_s=300)
    assert why is not None and why.startswith("the probe's tiny job failed"), why
