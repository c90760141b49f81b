"""Final scoring on a Ray cluster, on a local cluster with GPU resources declared (no GPU needed): one
evaluator per declared GPU, orders refused where the evaluator's copy of the task differs, Ray's own cost
per order, cancellation, a whole `crucible run --ray` end to end; and, without Ray, a clear error."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.harness.cli import main
from crucible.harness.models import Placement, Score
from crucible.harness.ray_backend import (
    EvalOrder,
    EvaluatorInfo,
    EvalVerdict,
    RayScoring,
    RayUnavailable,
    require_ray,
)
from crucible.harness.store import STORE_FILE, Store
from crucible.toolkit.results import Evaluation
from crucible.toolkit.task import find_task

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "tasks"
TASK = "triton2triton/vadd"


def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails, as where it is not installed
    with pytest.raises(RayUnavailable, match=r"pip install 'kernel-crucible\[ray\]'"):
        require_ray()
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    assert main(["run", "--ray", "auto", "--tasks", TASK, "--out", str(tmp_path / "run")]) == 2
    assert "pip install 'kernel-crucible[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_cli_needs_no_ray_to_start() -> None:
    code = "import sys; import crucible.harness.cli, crucible.harness.run; sys.exit('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


# ---------------------------------------------------------------- the head's routing, with a stand-in for Ray


class FakeRay:
    """What RayScoring calls of Ray: an order's reference is a function that answers it (or raises)."""

    class exceptions:  # noqa: N801 - Ray's own spelling
        RayError = RuntimeError
        RayActorError = type("RayActorError", (RuntimeError,), {})

    def wait(self, refs: list, timeout: float) -> tuple[list, list]:
        return refs, []

    def get(self, ref: object, timeout: float | None = None) -> object:
        return ref() if callable(ref) else ref

    def kill(self, actor: FakeEvaluator) -> None:
        actor.killed = True


class FakeEvaluator:
    """Answers each order with the next of `answers`: a verdict's status and message, or "dies"."""

    def __init__(self, *answers: str) -> None:
        self.answers, self.orders, self.killed = list(answers), 0, False
        outer = self

        class Method:
            def __init__(self, name: str) -> None:
                self.name = name

            def remote(self, *args: object) -> object:
                return outer.answer if self.name == "score" else (lambda: None)

        self.score, self.close, self.cancel = Method("score"), Method("close"), Method("cancel")

    def answer(self) -> dict:
        self.orders += 1
        answer = self.answers.pop(0)
        if answer == "dies":
            raise FakeRay.exceptions.RayActorError("The actor died unexpectedly before finishing this task.")
        status, _, message = answer.partition(":")
        evaluation = Evaluation(task="t", snapshot="s", backend="cuda", status=status, message=message,  # type: ignore[arg-type]
                                seconds=1.0)
        verdict = "pass" if status == "ok" else "infra_error"
        return EvalVerdict(score=Score(verdict=verdict, message=message), evaluation=evaluation,
                           placement=Placement(gpu=0, gpu_name="H200", host="node")).model_dump(mode="json")


def fake_cluster(*evaluators: tuple[FakeEvaluator, str]) -> RayScoring:
    infos = [EvaluatorInfo(backend=kind, gpu=i, gpu_name=kind, host=f"node{i}", evaluator_digest="d")  # type: ignore[arg-type]
             for i, (_, kind) in enumerate(evaluators)]
    return RayScoring(FakeRay(), [(e, i) for (e, _), i in zip(evaluators, infos, strict=True)], "cuda", "fake", False)


def an_order(scoring: RayScoring) -> EvalOrder:
    return EvalOrder(id="1", task=TASK, task_digest="t", evaluator_digest="d", files={"kernel.py": ""})


def test_an_evaluator_that_dies_leaves_rotation_and_the_order_runs_on_another() -> None:
    dead, alive = FakeEvaluator("dies"), FakeEvaluator("ok:right", "ok:right")
    scoring = fake_cluster((dead, "cuda"), (alive, "cuda"))
    placed = scoring.send(find_task(TASK, FIXTURES), an_order(scoring))
    assert placed.score.verdict == "pass" and placed.placement.attempts == 2
    assert "died" in placed.placement.note and dead.killed and not alive.killed
    again = scoring.send(find_task(TASK, FIXTURES), an_order(scoring))
    assert again.placement.attempts == 1 and dead.orders == 1, "a dead evaluator takes no more orders"


def test_an_evaluator_whose_gpu_fails_is_retired_and_retries_stop_at_the_cap() -> None:
    fault = "infra:CUDA error: GPU is lost (Xid 79)"
    evaluators = [FakeEvaluator(fault) for _ in range(4)]
    scoring = fake_cluster(*((e, "cuda") for e in evaluators))
    placed = scoring.send(find_task(TASK, FIXTURES), an_order(scoring))
    assert placed.score.verdict == "infra_error" and placed.placement.attempts == 3
    assert sum(e.killed for e in evaluators) == 3 and sum(e.orders for e in evaluators) == 3
    assert placed.placement.note.count("left rotation") == 3


def test_a_hip_task_goes_to_an_amd_evaluator_and_else_runs_as_hip_on_cuda_and_says_so() -> None:
    hip, triton = find_task("hip2hip/gemv_fp32"), find_task(TASK, FIXTURES)
    mixed = fake_cluster((FakeEvaluator(), "cuda"), (FakeEvaluator(), "rocm"))
    assert mixed._route(hip).backend == "rocm" and mixed._route(hip).hip_on_cuda is False
    assert mixed._route(triton).backend == "cuda" and mixed._route(triton).note == ""
    nvidia = fake_cluster((FakeEvaluator(), "cuda"))
    assert (nvidia._route(hip).backend, nvidia._route(hip).note) == ("cuda", "HIP on CUDA: the cluster has no AMD GPU")
    assert nvidia._route(hip).hip_on_cuda is True


def with_hardware(task_id: str, hardware: str, tmp_path: Path) -> object:
    import shutil

    from crucible.toolkit.task import TASKS_ROOT, load_task

    folder = tmp_path / task_id.replace("/", "__")
    shutil.copytree(TASKS_ROOT / task_id, folder)
    (folder / "task.toml").write_text((folder / "task.toml").read_text() + "\n" + hardware)
    return load_task(folder)


def test_a_task_that_needs_amd_goes_only_to_amd_evaluators_falls_back_where_allowed_else_is_refused(
        tmp_path: Path) -> None:
    strict = with_hardware("hip2hip/gemv_fp32", '[hardware]\nvendor = "amd"\n', tmp_path / "a")
    lenient = with_hardware("hip2hip/gemv_fp32", '[hardware]\nvendor = "amd"\nfallback = "hip-on-cuda"\n',
                            tmp_path / "b")
    nvidia, amd = FakeEvaluator(*["ok:right"] * 3), FakeEvaluator(*["ok:right"] * 3)
    mixed = fake_cluster((nvidia, "cuda"), (amd, "rocm"))
    placed = [mixed.send(strict, an_order(mixed)) for _ in range(3)]  # type: ignore[arg-type]
    assert amd.orders == 3 and nvidia.orders == 0
    assert all(p.score.verdict == "pass" and p.placement.hip_on_cuda is False for p in placed)

    cuda_only = FakeEvaluator("ok:right")
    fallback = fake_cluster((cuda_only, "cuda")).send(lenient, an_order(mixed))  # type: ignore[arg-type]
    assert fallback.score.verdict == "pass" and cuda_only.orders == 1
    assert fallback.placement.hip_on_cuda is True and "fallback" in fallback.placement.note

    untouched = FakeEvaluator("ok:right")
    refused = fake_cluster((untouched, "cuda")).send(strict, an_order(mixed))  # type: ignore[arg-type]
    assert refused.score.verdict == "infra_error" and untouched.orders == 0
    assert "needs an AMD GPU" in refused.score.message and "the cluster has NVIDIA (cuda)" in refused.score.message
    assert refused.placement.attempts == 0 and refused.evaluation is None


def test_an_evaluator_routes_by_its_declared_vendor_and_a_wrong_declaration_is_named() -> None:
    def info(backend: str, vendor: str | None) -> EvaluatorInfo:
        return EvaluatorInfo(backend=backend, gpu=0, gpu_name="g", host="node", evaluator_digest="d",  # type: ignore[arg-type]
                             vendor=vendor)

    assert info("cuda", None).kind == "cuda" and info("rocm", "amd").kind == "rocm"
    assert info("cpu", "amd").kind == "rocm" and info("cpu", None).kind == "cpu"  # no GPU seen: the declaration
    assert info("cuda", "nvidia").mismatch() is None
    assert "declared gpu_vendor_amd but its evaluator found a cuda GPU" in (info("cuda", "amd").mismatch() or "")


def test_evaluators_take_their_nodes_vendor_resources_one_each() -> None:
    pytest.importorskip("ray", reason="pip install 'kernel-crucible[ray]' (scripts/setup.sh does)")
    from crucible.harness.ray_backend import start_evaluators

    started: list[dict] = []

    class Remote:
        def options(self, **kw: object) -> Remote:
            started.append(kw)
            return self

        def remote(self, env: dict) -> str:
            return "actor"

    class Nodes:
        def remote(self, cls: type) -> Remote:
            return Remote()

        def nodes(self) -> list[dict]:
            node_id = "a" * 56
            return [{"Alive": True, "NodeID": node_id, "Resources": {"GPU": 3.0, "gpu_vendor_amd": 2.0}},
                    {"Alive": True, "NodeID": node_id, "Resources": {"GPU": 1.0}},
                    {"Alive": False, "NodeID": node_id, "Resources": {"GPU": 8.0, "gpu_vendor_nvidia": 8.0}}]

    assert len(start_evaluators(Nodes())) == 4
    assert [kw.get("resources") for kw in started] == [{"gpu_vendor_amd": 1}, {"gpu_vendor_amd": 1}, None, None]
    assert all(kw["num_gpus"] == 1 for kw in started)


# ---------------------------------------------------------------- on a local cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayScoring]:
    pytest.importorskip("ray", reason="pip install 'kernel-crucible[ray]' (scripts/setup.sh does)")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CRUCIBLE_TASKS", str(FIXTURES))
        mp.setenv("CRUCIBLE_BACKEND", "cpu")
        scoring = RayScoring.connect("local:2")
        try:
            yield scoring
        finally:
            scoring.close()


def solution_files() -> dict[str, str]:
    task = find_task(TASK, FIXTURES)
    return {task.spec.candidate: task.file("solution.py").read_text()}


def test_each_declared_gpu_gets_one_evaluator_of_its_own(cluster: RayScoring) -> None:
    infos = [info for _, info in cluster.evaluators]
    assert sorted(i.gpu for i in infos) == [0, 1]  # type: ignore[type-var]
    assert {i.backend for i in infos} == {"cpu"} and cluster.backend == "cpu"
    assert "2 evaluator(s) on 1 host(s)" in cluster.where


def test_an_evaluator_refuses_an_order_for_another_copy_of_the_task(cluster: RayScoring,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    task = find_task(TASK)
    order = cluster.order(task, solution_files()).model_copy(update={"task_digest": "0" * 64})
    placed = cluster.send(task, order)
    assert placed.score.verdict == "infra_error"
    assert "another copy" in placed.score.message and placed.evaluation is None


def test_rays_own_cost_per_order_is_under_50_ms(cluster: RayScoring, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    order = cluster.order(find_task(TASK), solution_files())
    times = [cluster.ping(order) for _ in range(20)]
    assert statistics.median(times) < 0.050, times


def test_a_cancelled_order_ends_as_infra_error_and_its_evaluator_stays_in_rotation(
        cluster: RayScoring, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    task = find_task(TASK)
    hang = (HERE / "planted" / "vadd_hang.py").read_text()
    cancel = threading.Event()
    timer = threading.Timer(3.0, cancel.set)
    timer.start()
    placed = cluster.send(task, cluster.order(task, {task.spec.candidate: hang}), cancel)
    timer.cancel()
    assert placed.score.verdict == "infra_error" and "cancelled" in placed.score.message
    assert placed.placement.host is not None and placed.placement.gpu in (0, 1)
    assert all(cluster._alive.values()), "cancelling kills the judge, not the evaluator"


@pytest.mark.slow  # two evaluations in the interpreter
def test_a_results_store_left_on_one_evaluators_host_helps_no_later_order_and_a_cheat_is_flagged(
        cluster: RayScoring, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))
    task = find_task(TASK)
    store = (HERE / "redteam" / "state" / "triton_leftover_files.py").read_text()
    timer = (HERE / "redteam" / "tampering" / "triton_timer_patch.py").read_text()
    first = cluster.send(task, cluster.order(task, {task.spec.candidate: store}))
    second = cluster.send(task, cluster.order(task, {task.spec.candidate: store}))
    flagged = cluster.send(task, cluster.order(task, {task.spec.candidate: timer}))
    assert first.score.verdict == second.score.verdict == "incorrect"
    assert flagged.score.verdict == "flagged", flagged.score.message


@pytest.mark.slow  # a local Ray cluster and four whole sessions on 2 cores: a minute or two
def test_crucible_run_with_ray_scores_every_session_on_the_clusters_evaluators(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="pip install 'kernel-crucible[ray]' (scripts/setup.sh does)")
    out = tmp_path / "run"
    env = {**os.environ, "CRUCIBLE_TASKS": str(FIXTURES), "CRUCIBLE_BACKEND": "cpu"}
    proc = subprocess.run([sys.executable, "-m", "crucible.harness.cli", "run", "--ray", "local:2",
                           "--tasks", TASK, "--repeats", "2", "--concurrency", "2", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "scoring: Ray cluster local:2: 2 evaluator(s)" in proc.stdout
    store = Store(out / STORE_FILE, read_only=True)
    rows = [store.score(s.id) for s in store.sessions()]
    store.close()
    assert len(rows) == 2 and all(r is not None and r.score.verdict == "pass" for r in rows)
    placements = [r.placement for r in rows if r is not None]
    assert all(p is not None and p.host and p.gpu in (0, 1) and p.attempts == 1 for p in placements)
    result = json.loads(next((out / "sessions").glob("*/result.json")).read_text())
    assert result["score"]["placement"]["host"]



@pytest.mark.gpu
def test_on_a_gpu_host_each_gpu_gets_an_evaluator_that_scores_on_it(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="pip install 'kernel-crucible[ray]' (scripts/setup.sh does)")
    from crucible.harness.placement import list_gpus

    devices = {d.index: d.name for d in list_gpus("cuda")}
    task = find_task("triton2triton/softmax")
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / task.spec.candidate).write_bytes(task.file(task.spec.solution or "").read_bytes())
    scoring = RayScoring.connect("local")
    try:
        infos = [info for _, info in scoring.evaluators]
        assert scoring.backend == "cuda" and sorted(i.gpu for i in infos) == sorted(devices)  # type: ignore[type-var]
        placed = scoring.score(task, sub, "cuda")
    finally:
        scoring.close()
    assert placed.score.verdict == "pass", placed.score.message
    assert placed.placement.gpu in devices and placed.evaluation is not None and placed.evaluation.timing_comparable
    listed = devices[placed.placement.gpu]  # type: ignore[index]
    assert placed.placement.gpu_name and (listed in placed.placement.gpu_name or placed.placement.gpu_name in listed)
