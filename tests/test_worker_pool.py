"""A pool keeps one preloaded worker ahead of need; every job still gets a fresh process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crucible.toolkit.jobs import JOBS
from crucible.toolkit.worker import WorkerLimits, WorkerPool

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch):
    for name in ("whoami", "segfault", "spin"):
        monkeypatch.setitem(JOBS, name, f"tests.worker_jobs:{name}")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    pool = WorkerPool(limits=WorkerLimits(timeout_s=60), backend="cpu", env=env)
    yield pool
    pool.close()


def test_each_job_gets_a_fresh_preloaded_process(pool: WorkerPool) -> None:
    first = pool.run_job("whoami", {})
    second = pool.run_job("whoami", {})
    assert first.status == "ok" and second.status == "ok", first.message + second.message
    assert first.result["scratch"] != second.result["scratch"]  # pids repeat: each has its own pid namespace
    assert second.result["torch_preloaded"] is True


def test_a_crash_in_a_pooled_worker_does_not_harm_the_next_job(pool: WorkerPool) -> None:
    assert pool.run_job("segfault", {}).status == "crash"
    assert pool.run_job("whoami", {}).status == "ok"


def test_a_per_call_timeout_kills_the_pooled_worker(pool: WorkerPool) -> None:
    outcome = pool.run_job("spin", {}, timeout_s=2)
    assert outcome.status == "timeout"
    assert pool.run_job("whoami", {}).status == "ok"


def test_closing_the_pool_leaves_no_spare_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setitem(JOBS, "whoami", "tests.worker_jobs:whoami")
    env = {"PYTHONPATH": str(ROOT)}
    pool = WorkerPool(limits=WorkerLimits(timeout_s=60), backend="cpu", env=env)
    pool.run_job("whoami", {})
    time.sleep(0.5)  # let the refill start a spare
    spares = list(pool._spares)
    pool.close()
    assert all(worker.proc.poll() is not None for worker, _ in spares)


def test_two_spares_serve_two_jobs_in_a_row_each_in_its_own_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setitem(JOBS, "whoami", "tests.worker_jobs:whoami")
    pool = WorkerPool(limits=WorkerLimits(timeout_s=60), backend="cpu", env={"PYTHONPATH": str(ROOT)}, spares=2)
    try:
        deadline = time.monotonic() + 60
        while len(pool._spares) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pool._spares) == 2
        first, second = pool.run_job("whoami", {}), pool.run_job("whoami", {})
        assert first.status == "ok" and second.status == "ok", first.message + second.message
        assert first.result["scratch"] != second.result["scratch"]
    finally:
        pool.close()


def test_a_spare_is_replaced_after_its_job_not_beside_it_while_another_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    monkeypatch.setitem(JOBS, "spin", "tests.worker_jobs:spin")
    pool = WorkerPool(limits=WorkerLimits(timeout_s=60), backend="cpu", env={"PYTHONPATH": str(ROOT)}, spares=2)

    def spares() -> int:
        with pool._lock:
            return len(pool._spares) + pool._filling  # started, or being started

    def wait_for(n: int) -> None:
        deadline = time.monotonic() + 60
        while spares() != n and time.monotonic() < deadline:
            time.sleep(0.05)

    try:
        wait_for(2)
        deadline = time.monotonic() + 60
        while len(pool._spares) < 2 and time.monotonic() < deadline:  # both started, not being started
            time.sleep(0.05)
        job = threading.Thread(target=pool.run_job, args=("spin", {}), kwargs={"timeout_s": 3})
        job.start()
        time.sleep(1)
        during = spares()  # no start-up beside the job: the other spare is there
        job.join()
        wait_for(2)
        assert during == 1 and spares() == 2
    finally:
        pool.close()
