"""Placing final scoring on the GPUs of a host, tested on the CPU with a declared device list: one
evaluation per GPU at a time, every GPU used, a failed GPU out of rotation and the evaluation retried on
another (capped), where it ran recorded in the score and the store."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import pytest

from crucible.harness import scoring
from crucible.harness.cli import main
from crucible.harness.models import Placement, RunConfig, Score, Usage
from crucible.harness.placement import (
    MAX_ATTEMPTS,
    Device,
    DeviceError,
    Placer,
    choose_devices,
    parse_gpu_listing,
    parse_gpus,
    score_placed,
)
from crucible.harness.run import command_args
from crucible.harness.scoring import LocalScoring
from crucible.harness.store import STORE_FILE, RunRow, ScoreRow, SessionRecord, SessionRow, Store
from crucible.toolkit.devices import gpu_lease
from crucible.toolkit.results import DeviceInfo, Evaluation
from crucible.toolkit.task import find_task

H200 = "NVIDIA H200"


@pytest.fixture(autouse=True)
def own_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lease files of this test's own, so that no other run on this machine holds a declared GPU."""
    monkeypatch.setenv("CRUCIBLE_CACHE", str(tmp_path / "cache"))


def gpus(n: int) -> list[Device]:
    return [Device(index=i, name=H200) for i in range(n)]


def evaluation(status: str = "ok", message: str = "", name: str = H200) -> Evaluation:
    return Evaluation(task="t", snapshot="s", backend="cuda", status=status, message=message,  # type: ignore[arg-type]
                      seconds=0.1, device=DeviceInfo(backend="cuda", name=name, torch="2"))


PASS = Score(verdict="pass", message="right")
INFRA = Score(verdict="infra_error", message="could not run")


def test_gpus_are_parsed_from_the_flag_and_from_the_drivers_listing() -> None:
    assert parse_gpus("0,1, 3") == [0, 1, 3]
    for bad in ("", "0,,1", "a", "1,1", "-1"):
        with pytest.raises(ValueError, match="--gpus"):
            parse_gpus(bad)
    listed = parse_gpu_listing("cuda", "0, NVIDIA H200\n1, NVIDIA H200\n")
    assert listed == [Device(index=0, name=H200), Device(index=1, name=H200)]
    amd = parse_gpu_listing("rocm", "device,Card series,Card model\ncard0,AMD Instinct MI300X,0x74a1\n")
    assert amd == [Device(index=0, name="AMD Instinct MI300X")]


def test_asked_gpus_must_be_on_the_host_and_none_asked_means_all() -> None:
    def listed(backend: str) -> list[Device]:
        return gpus(4)

    assert [d.index for d in choose_devices("cuda", None, listed)] == [0, 1, 2, 3]
    assert [d.index for d in choose_devices("cuda", [3, 1], listed)] == [3, 1]
    with pytest.raises(DeviceError, match=r"names \[7\], which this host does not have"):
        choose_devices("cuda", [1, 7], listed)
    with pytest.raises(DeviceError, match="found no GPU"):
        choose_devices("cuda", None, lambda b: [])
    with pytest.raises(DeviceError, match="cpu backend"):
        choose_devices("cpu", [0], listed)
    assert choose_devices("cpu", None, listed) == []

    def unlisted(backend: str) -> list[Device]:
        raise DeviceError("cannot list the cuda GPUs of this host; pass them with --gpus 0,1,...")

    assert choose_devices("cuda", [1], unlisted) == [Device(index=1, name="cuda GPU 1")]
    with pytest.raises(DeviceError, match="pass them with --gpus"):
        choose_devices("cuda", None, unlisted)


def test_evaluations_spread_over_every_gpu_and_never_two_on_one_at_a_time() -> None:
    placer = Placer("cuda", gpus(3))
    active: dict[int, int] = {}
    peak: dict[int, int] = {}
    lock = threading.Lock()
    results = []

    def attempt(device: Device | None) -> tuple[Score, Evaluation | None]:
        assert device is not None
        with lock:
            active[device.index] = active.get(device.index, 0) + 1
            peak[device.index] = max(peak.get(device.index, 0), active[device.index])
        time.sleep(0.05)
        with lock:
            active[device.index] -= 1
        return PASS, evaluation()

    def one() -> None:
        results.append(score_placed(placer, attempt))

    threads = [threading.Thread(target=one) for _ in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(results) == 9
    assert set(peak) == {0, 1, 2}, "every GPU took evaluations"
    assert max(peak.values()) == 1, "never two evaluations on one GPU at once"
    assert all(r.placement.gpu in (0, 1, 2) and r.placement.gpu_name == H200 and r.placement.attempts == 1
               for r in results)


def test_a_gpu_another_process_holds_is_passed_over_for_an_idle_one() -> None:
    placer = Placer("cuda", gpus(2))
    held, release = threading.Event(), threading.Event()

    def other_run() -> None:  # another process's evaluation, as the lease files see it
        with gpu_lease("cuda", 0):
            held.set()
            release.wait(10)

    t = threading.Thread(target=other_run)
    t.start()
    held.wait(5)
    try:
        placed = score_placed(placer, lambda d: (PASS, evaluation()))
    finally:
        release.set()
        t.join(5)
    assert placed.placement.gpu == 1


def test_a_gpu_that_fails_leaves_rotation_and_the_evaluation_runs_on_another() -> None:
    placer = Placer("cuda", gpus(3))
    seen: list[int] = []

    def attempt(device: Device | None) -> tuple[Score, Evaluation | None]:
        assert device is not None
        seen.append(device.index)
        if device.index == seen[0]:
            return INFRA, evaluation("infra", "the judge failed: CUDA error: GPU is lost (Xid 79)")
        return PASS, evaluation()

    placed = score_placed(placer, attempt)
    assert placed.score.verdict == "pass"
    assert placed.placement.attempts == 2 and placed.placement.gpu == seen[1] != seen[0]
    assert f"GPU {seen[0]}" in placed.placement.note and "left rotation" in placed.placement.note
    assert list(placer.retired) == [seen[0]]
    later = [score_placed(placer, attempt).placement.gpu for _ in range(6)]
    assert seen[0] not in later, "a retired GPU takes no more evaluations"


def test_retries_stop_at_the_cap_as_infra_error_never_the_agents_failure() -> None:
    placer = Placer("cuda", gpus(5))
    calls: list[int] = []

    def attempt(device: Device | None) -> tuple[Score, Evaluation | None]:
        assert device is not None
        calls.append(device.index)
        return INFRA, evaluation("infra", "cudaErrorDevicesUnavailable: no CUDA-capable device is detected")

    placed = score_placed(placer, attempt)
    assert len(calls) == MAX_ATTEMPTS == placed.placement.attempts
    assert len(set(calls)) == MAX_ATTEMPTS, "each retry on another GPU"
    assert placed.score.verdict == "infra_error"
    assert "gave up after 3 attempts" in placed.placement.note


def test_when_every_gpu_is_out_of_rotation_the_score_is_infra_error_and_says_why() -> None:
    placer = Placer("cuda", gpus(1))
    placer.retire(Device(index=0, name=H200), "Xid 79")
    placed = score_placed(placer, lambda d: (PASS, evaluation()))
    assert placed.score.verdict == "infra_error"
    assert "every GPU is out of rotation" in placed.score.message and "Xid 79" in placed.score.message
    assert placed.placement.attempts == 0


@pytest.mark.parametrize("status", ["crash", "error", "incorrect", "exit"])
def test_a_candidate_that_prints_a_device_fault_cannot_turn_its_failure_into_a_retry(status: str) -> None:
    placer = Placer("cuda", gpus(2))
    calls: list[int] = []

    def attempt(device: Device | None) -> tuple[Score, Evaluation | None]:
        assert device is not None
        calls.append(device.index)
        return (Score(verdict="incorrect", message="x"),
                evaluation(status, "RuntimeError: CUDA error: GPU has fallen off the bus (Xid 79)"))

    placed = score_placed(placer, attempt)
    assert placed.score.verdict == "incorrect" and len(calls) == 1 and not placer.retired


def test_an_infra_evaluation_that_names_no_device_fault_keeps_its_gpu() -> None:
    placer = Placer("cuda", gpus(2))
    placed = score_placed(placer, lambda d: (INFRA, evaluation("infra", "the task's own baseline does not build")))
    assert placed.score.verdict == "infra_error" and placed.placement.attempts == 1 and not placer.retired


def test_the_cpu_backend_places_nothing_and_runs_evaluations_at_once() -> None:
    placer = Placer("cpu", [])
    inside = threading.Barrier(3, timeout=5)  # three at once: none waits for a device

    def attempt(device: Device | None) -> tuple[Score, Evaluation | None]:
        assert device is None
        inside.wait()
        return PASS, None

    results = []
    threads = [threading.Thread(target=lambda: results.append(score_placed(placer, attempt))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [r.placement.gpu for r in results] == [None] * 3


def test_local_scoring_evaluates_on_the_placed_gpu_with_that_gpus_own_judge_pool(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked: list[tuple[int | None, object]] = []

    def fake_score_session(task, submission, backend, *, pool=None, gpu=None, **kw):  # type: ignore[no-untyped-def]
        asked.append((gpu, pool))
        return PASS, evaluation(name=f"{H200} #{gpu}")

    monkeypatch.setattr(scoring, "score_session", fake_score_session)
    monkeypatch.setattr(scoring, "judge_pool", lambda backend, gpu=None: f"pool of GPU {gpu}")
    local = LocalScoring(devices={"cuda": [Device(index=2, name=H200), Device(index=5, name=H200)]})
    task = find_task("triton2triton/vadd", Path(__file__).parent / "fixtures" / "tasks")
    placed = [local.score(task, tmp_path, "cuda") for _ in range(4)]
    assert {gpu for gpu, _ in asked} == {2, 5}
    assert all(pool == f"pool of GPU {gpu}" for gpu, pool in asked)
    assert all(p.placement.gpu_name == f"{H200} #{p.placement.gpu}" for p in placed), "the judge's name wins"
    assert local.where == f"this host's GPU 2 ({H200}), 5 ({H200})"


def test_where_a_score_ran_is_stored_and_a_store_from_before_gets_the_columns(tmp_path: Path) -> None:
    path = tmp_path / STORE_FILE
    store = Store(path)
    store.put_run(RunRow(id="r", config={}, config_digest="d", argv=[], crucible_version="0",
                         evaluator_version="0", evaluator_digest="0", python="3", torch="2", triton="3",
                         device="x", backend="cuda", sandbox="none", started_at="t"))
    placed = Placement(gpu=3, gpu_name=H200, host="node-2", attempts=2, note="GPU 1 failed", hip_on_cuda=True)
    for sid, placement in (("a", placed), ("b", None)):
        store.finish_session(SessionRecord(
            session=SessionRow(id=sid, run_id="r", task="t", agent="scripted", model=None, repeat=1, state="done"),
            tool_calls=[], submissions=[], usage=Usage(),
            score=ScoreRow(session_id=sid, score=PASS, backend="cuda", scored_at="t", placement=placement)))
    assert store.score("a").placement == placed  # type: ignore[union-attr]
    assert store.score("b").placement is None  # type: ignore[union-attr]
    store.close()
    # a store written before the placement columns: drop them, as an old run folder has none
    conn = sqlite3.connect(path)
    for column in ("gpu", "gpu_name", "host", "attempts", "placement_note", "hip_on_cuda"):
        conn.execute(f"ALTER TABLE scores DROP COLUMN {column}")
    conn.commit()
    conn.close()
    old = Store(path, read_only=True)
    assert old.score("a").placement is None and old.score("a").score == PASS  # type: ignore[union-attr]
    old.close()
    reopened = Store(path)  # for writing (`crucible score` on an old run): the columns come back
    reopened.put_score(ScoreRow(session_id="a", score=PASS, backend="cuda", scored_at="t2", placement=placed))
    assert reopened.score("a").placement == placed  # type: ignore[union-attr]
    reopened.close()


def test_where_a_run_is_scored_is_not_part_of_its_config_digest_but_is_in_its_command() -> None:
    base = RunConfig()
    placed = RunConfig(gpus=[0, 2], ray=None)
    assert placed.digest() == base.digest() == RunConfig(ray="auto").digest()
    assert command_args(placed)[-2:] == ["--gpus", "0,2"]
    assert command_args(RunConfig(ray="auto"))[-2:] == ["--ray", "auto"]


def test_crucible_run_refuses_bad_gpus_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_BACKEND", "cpu")
    assert main(["run", "--gpus", "0,x", "--out", str(tmp_path / "run")]) == 2
    assert "--gpus takes GPU indices" in capsys.readouterr().err
    assert main(["run", "--gpus", "0", "--out", str(tmp_path / "run")]) == 2
    assert "--gpus needs a GPU backend" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu
def test_on_a_gpu_host_scores_spread_over_its_gpus_and_record_each_gpus_name() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from crucible.harness.placement import list_gpus
    from crucible.toolkit.task import find_task

    devices = {d.index: d.name for d in list_gpus("cuda")}
    assert devices, "nvidia-smi lists no GPU"
    task = find_task("triton2triton/softmax")
    submission = Path(tempfile.mkdtemp(prefix="crucible-placement-"))
    (submission / task.spec.candidate).write_bytes(task.file(task.spec.solution or "").read_bytes())
    local = LocalScoring()
    n = min(2 * len(devices), 8)
    try:
        with ThreadPoolExecutor(n) as pool:
            placed = list(pool.map(lambda _: local.score(task, submission, "cuda"), range(n)))
    finally:
        local.close()
    assert [p.score.verdict for p in placed] == ["pass"] * n, [p.score.message for p in placed]
    for p in placed:
        assert p.placement.gpu in devices and p.placement.attempts == 1
        listed = devices[p.placement.gpu]  # type: ignore[index]
        assert p.placement.gpu_name and (listed in p.placement.gpu_name or p.placement.gpu_name in listed)
        assert p.evaluation is not None and p.evaluation.timing_comparable
    if len(devices) >= 2:
        assert len({p.placement.gpu for p in placed}) >= 2, "evaluations ran on more than one GPU"


def test_sessions_tools_are_spread_over_the_hosts_scoring_gpus_and_none_on_the_cpu() -> None:
    from crucible.harness.run import tools_gpus

    local = LocalScoring(devices={"cuda": [Device(index=2, name=H200), Device(index=5, name=H200)]})
    assert tools_gpus(local, "cuda") == [2, 5]
    assert tools_gpus(local, "cpu") == []


def test_a_tool_call_leases_the_gpu_its_pools_judges_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    from crucible.toolkit import evaluation
    from crucible.toolkit.worker import WorkerOutcome

    leased: list[int | None] = []

    @contextmanager
    def lease(backend, gpu, cancel=None):  # type: ignore[no-untyped-def]
        leased.append(gpu)
        yield

    class Pool:
        backend, gpu = "cuda", 5

        def run_job(self, kind, payload, **kw):  # type: ignore[no-untyped-def]
            return WorkerOutcome(status="ok", result={}, message="", exit_code=0, signal=None, stderr_tail="",
                                 seconds=0.0, isolation={})

    monkeypatch.setattr(evaluation, "gpu_lease", lease)
    monkeypatch.setattr(evaluation, "run_job", lambda *a, **kw: Pool().run_job("compile", {}))
    task = find_task("triton2triton/vadd", Path(__file__).parent / "fixtures" / "tasks")
    # The request names no GPU (a compile): the lease follows the pool, never GPU 0 by default.
    evaluation._run(task, "compile", {}, "cuda", evaluation.EvalRequest(), None, None, Pool())  # type: ignore[arg-type]
    evaluation._run(task, "compile", {}, "cuda", evaluation.EvalRequest(), None, None)
    assert leased == [5, 0]
