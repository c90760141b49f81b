"""Kinds of GPU on a real local Ray cluster (no GPU needed): a node that declares one NVIDIA and one AMD GPU
as custom resources gets an evaluator holding each, Ray's accounting shows them taken, and an order for a
task that needs AMD hardware goes to the AMD evaluator only. Its own file: the cluster of
tests/test_ray_scoring.py lives for that module, and Ray has one cluster per process."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.harness.ray_backend import RayScoring
from crucible.toolkit.task import Task, find_task

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"
TASK = "triton2triton/vadd"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture suite, its task asking for AMD hardware (a Triton task may: Triton runs there)."""
    root = tmp_path_factory.mktemp("suite")
    shutil.copytree(FIXTURES / TASK, root / TASK)
    toml = root / TASK / "task.toml"
    toml.write_text(toml.read_text() + '\n[hardware]\nvendor = "amd"\n')
    return root


@pytest.fixture(scope="module")
def kinds_cluster(suite: Path) -> Iterator[RayScoring]:
    ray = pytest.importorskip("ray", reason="pip install 'kernel-crucible[ray]' (scripts/setup.sh does)")
    if ray.is_initialized():
        pytest.skip("a Ray cluster is already up in this process")
    env = {"CRUCIBLE_TASKS": str(suite), "CRUCIBLE_BACKEND": "cpu"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        ray.init(num_gpus=2, resources={"gpu_vendor_nvidia": 1, "gpu_vendor_amd": 1}, include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": env})
        try:
            scoring = RayScoring.connect("local-with-kinds")
            try:
                yield scoring
            finally:
                scoring.close()
        finally:
            ray.shutdown()


def test_each_evaluator_holds_its_nodes_vendor_resource(kinds_cluster: RayScoring) -> None:
    import ray

    infos = [info for _, info in kinds_cluster.evaluators]
    assert sorted(i.vendor for i in infos) == ["amd", "nvidia"]  # type: ignore[type-var]
    assert kinds_cluster.kinds() == {"cuda", "rocm"}
    free = ray.available_resources()
    assert free.get("gpu_vendor_amd", 0) == 0 and free.get("gpu_vendor_nvidia", 0) == 0, "held by the evaluators"


def test_an_order_for_a_task_that_needs_amd_goes_to_the_amd_evaluator(kinds_cluster: RayScoring, suite: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(suite))
    task: Task = find_task(TASK)
    amd_gpu = next(i.gpu for _, i in kinds_cluster.evaluators if i.vendor == "amd")
    # An order the evaluator refuses (another copy of the task) comes back at once, saying who answered:
    # routing seen without an evaluation.
    for _ in range(3):
        order = kinds_cluster.order(task, {task.spec.candidate: ""}).model_copy(update={"task_digest": "0" * 64})
        placed = kinds_cluster.send(task, order)
        assert placed.score.verdict == "infra_error" and "another copy" in placed.score.message
        assert placed.placement.gpu == amd_gpu
