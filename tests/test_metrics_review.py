"""The review of tasks' flops and bytes formulas against what their references really do."""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.toolkit.metrics_review import review_metrics
from crucible.toolkit.task import Metrics, Task, discover_tasks, find_task, suite_root

VADD = Path(__file__).parent / "fixtures/tasks/triton2triton/vadd"


def with_metrics(task: Task, **fields: str) -> Task:
    metrics = task.spec.metrics.model_copy(update=fields)
    return task.model_copy(update={"spec": task.spec.model_copy(update={"metrics": Metrics.model_validate(
        metrics.model_dump())})})


def problems(task: Task) -> list[str]:
    return [p for review in review_metrics(task) for p in review.problems]


@pytest.fixture(scope="module")
def vadd() -> Task:
    return find_task("triton2triton/vadd", VADD.parent.parent)


@pytest.fixture(scope="module")
def matmul() -> Task:
    return find_task("triton2triton/matmul", suite_root())


def test_honest_formulas_pass_and_every_small_config_is_run(vadd: Task) -> None:
    reviews = review_metrics(vadd)
    assert reviews and not problems(vadd)
    assert all(r.tensor_bytes == r.bytes and r.output_bytes == r.bytes / 3 for r in reviews)


def test_bytes_counted_twice_are_caught(vadd: Task) -> None:
    found = problems(with_metrics(vadd, bytes="6 * N * itemsize"))
    assert found and all("more than every input and output once" in p for p in found)


def test_bytes_below_the_outputs_are_caught_even_with_a_note(vadd: Task) -> None:
    found = problems(with_metrics(vadd, bytes="0.5 * N * itemsize", bytes_note="trust me"))
    assert found and all("less than the outputs alone" in p for p in found)


def test_bytes_below_the_tensors_need_a_note(vadd: Task) -> None:
    fewer = with_metrics(vadd, bytes="2 * N * itemsize")
    assert problems(fewer) and all("bytes_note" in p for p in problems(fewer))
    assert not problems(with_metrics(fewer, bytes_note="b is read only where a is nonzero"))


def test_matmul_flops_are_held_to_the_flop_counter(matmul: Task) -> None:
    assert not problems(matmul)
    doubled = problems(with_metrics(matmul, flops=f"2 * ({matmul.spec.metrics.flops})"))
    assert doubled and all("more than the reference's matmul-like operations" in p for p in doubled)
    halved = with_metrics(matmul, flops=f"({matmul.spec.metrics.flops}) / 2")
    assert problems(halved) and all("flops_note" in p for p in problems(halved))
    # A note excuses doing less than the reference, never more.
    assert not problems(with_metrics(halved, flops_note="the second half is known to be zero"))


@pytest.mark.slow
def test_every_task_of_the_suite_passes_its_metrics_review() -> None:
    tasks, errors = discover_tasks()
    assert not errors and tasks
    found = {t.id: problems(t) for t in tasks}
    assert {tid: p for tid, p in found.items() if p} == {}
