"""Verdicts per minute: the reward service (harness/rewards.py) against final scoring one at a time, and
what Ray adds per evaluation.

    one_at_a_time   LocalScoring.score, one request after the other (final scoring as `crucible score` does
                    it: a judge started ahead, one evaluation at a time)
    service_local   RewardService.local(): a batch, one evaluation per GPU at a time (on the CPU, two)
    service_ray     RewardService.on_ray("local:K"): the same batch on a local Ray cluster, K GPUs declared
    ray_overhead    per order: the median round trip of an order to an evaluator that does not evaluate
                    (Ray's own cost, pydantic both ways); what an order costs besides (the submission's
                    files read and written again, the task's digest on both sides, the folder removed);
                    and one evaluation at a time through Ray and through the local path, alternating (so
                    both see the same load), each after `--settle` seconds idle (so each finds its judge
                    started ahead: the local path keeps one, the Ray path one per evaluator), the median
                    of each and of the differences of the pairs

Every request is the task's expert solution; every verdict must be `pass`. On the CPU the evaluations run
in Triton's interpreter, so the figures measure the service's plumbing and the judge's start-up, not a
GPU's throughput. Writes benchmarks/results/reward_service_<backend>.json.

The figures in results/ were taken on the fixture suite's vadd (quick in the interpreter):
CRUCIBLE_TASKS=tests/fixtures/tasks python3 benchmarks/reward_service.py --task triton2triton/vadd

Run: python3 benchmarks/reward_service.py [--task ID] [--n N] [--gpus K] [--overhead-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parent.parent

from common import RESULTS, write  # noqa: E402

from crucible.harness.rewards import RewardRequest, RewardService  # noqa: E402
from crucible.harness.scoring import LocalScoring  # noqa: E402
from crucible.toolkit.evaluation import resolve_backend  # noqa: E402
from crucible.toolkit.task import Task, find_task  # noqa: E402


def one_at_a_time(task: Task, source: str, n: int, scorer: object) -> tuple[float, list[float], list[str]]:
    backend = resolve_backend("auto")
    seconds, verdicts = [], []
    with tempfile.TemporaryDirectory(prefix="crucible-bench-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        (sub / task.spec.candidate).write_text(source)
        started = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            placed = scorer.score(task, sub, backend)  # type: ignore[attr-defined]
            seconds.append(time.perf_counter() - t0)
            verdicts.append(placed.score.verdict)
    return time.perf_counter() - started, seconds, verdicts


def batch(service: RewardService, task: Task, source: str, n: int) -> tuple[float, list[str]]:
    started = time.perf_counter()
    rewards = service.score([RewardRequest(task=task.id, source=source) for _ in range(n)])
    return time.perf_counter() - started, [r.score.verdict for r in rewards]


def bookkeeping_ms(task: Task, source: str, n: int = 50) -> float:
    """What the Ray path does per order besides Ray and the evaluation, head and evaluator together."""
    from crucible.harness.ray_backend import EvalOrder, _remove, submission_files, write_files
    from crucible.harness.session import evaluator_digest, task_digest

    times = []
    with tempfile.TemporaryDirectory(prefix="crucible-bench-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        (sub / task.spec.candidate).write_text(source)
        for i in range(n):
            t0 = time.perf_counter()
            order = EvalOrder(id=str(i), task=task.id, task_digest=task_digest(task),
                              evaluator_digest=evaluator_digest(), files=submission_files(sub))
            order = EvalOrder.model_validate(order.model_dump(mode="json"))
            assert task_digest(task) == order.task_digest
            folder = Path(tempfile.mkdtemp(prefix="crucible-order-", dir=tmp))
            write_files(folder / "submission", order.files)
            _remove(folder)
            times.append(time.perf_counter() - t0)
    return round(1000 * statistics.median(times), 2)


def per_minute(n: int, seconds: float) -> float:
    return round(60 * n / seconds, 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="triton2triton/softmax")
    p.add_argument("--n", type=int, default=6, help="requests per mode")
    p.add_argument("--gpus", type=int, default=2, help="GPUs the local Ray cluster declares")
    p.add_argument("--settle", type=float, default=10.0, help="idle seconds before each paired evaluation")
    p.add_argument("--overhead-only", action="store_true", help="only ray_overhead; keeps the other figures")
    args = p.parse_args()
    backend = resolve_backend("auto")
    task = find_task(args.task)
    source = task.file(task.spec.solution or "").read_text()
    figures: dict = {"backend": backend, "task": task.id, "suite": os.path.relpath(task.root.parent.parent, ROOT)}
    command = "python3 " + " ".join(sys.argv)

    out = RESULTS / f"reward_service_{backend}.json"
    if args.overhead_only and out.exists():
        earlier = json.loads(out.read_text())
        figures = {**earlier["figures"], **figures}
        command = f"{earlier['command'].split(' ; then ')[0]} ; then {command}"
    else:
        local = LocalScoring()
        one_at_a_time(task, source, 1, local)  # warm: builds cached, a judge started ahead
        total, _, verdicts = one_at_a_time(task, source, args.n, local)
        local.close()
        figures["one_at_a_time"] = {"requests": args.n, "seconds": round(total, 2), "verdicts_per_min": per_minute(args.n, total),
                                    "verdicts": verdicts}
        print(f"one at a time: {figures['one_at_a_time']}", flush=True)
        with RewardService.local() as service:
            batch(service, task, source, 1)
            total, verdicts = batch(service, task, source, args.n)
        figures["service_local"] = {"requests": args.n, "seconds": round(total, 2), "verdicts_per_min": per_minute(args.n, total),
                                    "verdicts": verdicts}
        print(f"service, local: {figures['service_local']}", flush=True)
    try:
        from crucible.harness.ray_backend import RayScoring
    except ImportError:
        print("no Ray: pip install 'kernel-crucible[ray]' for the Ray figures")
        write(f"reward_service_{backend}", figures, command)
        return
    with RewardService.on_ray(f"local:{args.gpus}") as service:
        ray_scoring: RayScoring = service.scorer  # type: ignore[assignment]
        batch(service, task, source, args.gpus)  # warm every evaluator
        if not args.overhead_only:
            total, verdicts = batch(service, task, source, args.n)
            figures["service_ray"] = {"requests": args.n, "seconds": round(total, 2), "verdicts_per_min": per_minute(args.n, total),
                                      "evaluators": len(ray_scoring.evaluators), "verdicts": verdicts}
            print(f"service, Ray: {figures['service_ray']}", flush=True)
        order = ray_scoring.order(task, {task.spec.candidate: source})
        pings = [ray_scoring.ping(order) for _ in range(50)]
        local = LocalScoring()
        one_at_a_time(task, source, 1, local)
        local_each, ray_each, verdicts = [], [], []
        for _ in range(args.n):  # alternating, so that both paths see the same load
            for scorer, times in ((local, local_each), (ray_scoring, ray_each)):
                time.sleep(args.settle)
                _, each, v = one_at_a_time(task, source, 1, scorer)
                times += each
                verdicts += v
        local.close()
    figures["ray_overhead"] = {
        "round_trip_ms_median": round(1000 * statistics.median(pings), 2),
        "round_trip_ms_max": round(1000 * max(pings), 2),
        "evaluation_s_local_median": round(statistics.median(local_each), 3),
        "evaluation_s_ray_median": round(statistics.median(ray_each), 3),
        "evaluation_ms_added_median_of_pairs": round(
            1000 * statistics.median(r - x for r, x in zip(ray_each, local_each, strict=True)), 1),
        "order_bookkeeping_ms_median": bookkeeping_ms(task, source),
        "pairs": args.n, "settle_s": args.settle, "goal_ms": 50, "verdicts": verdicts}
    print(f"Ray overhead: {figures['ray_overhead']}", flush=True)
    write(f"reward_service_{backend}", figures, command)


if __name__ == "__main__":
    main()
