"""GPU leases: one evaluation at a time per device, across threads and processes."""

from __future__ import annotations

import threading
import time

import pytest

from crucible.toolkit.devices import LeaseCancelled, gpu_lease


def test_two_holders_of_one_gpu_never_overlap() -> None:
    active, peak = 0, 0
    lock = threading.Lock()

    def hold() -> None:
        nonlocal active, peak
        with gpu_lease("cuda", 3):
            with lock:
                active += 1
                peak = max(peak, active)
            time.sleep(0.1)
            with lock:
                active -= 1

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 1


def test_different_gpus_and_the_cpu_do_not_wait_for_each_other() -> None:
    got: list[str] = []
    give_up = threading.Event()  # a waiter that would block gives up, and says so, instead of hanging the test

    def take(backend: str, gpu: int | None) -> None:
        try:
            with gpu_lease(backend, gpu, give_up):
                got.append(f"{backend}{gpu}")
        except LeaseCancelled:
            got.append(f"{backend}{gpu} waited")

    with gpu_lease("cuda", 0):  # held here while the others are taken from other threads
        threads = [threading.Thread(target=take, args=a) for a in (("cuda", 1), ("cpu", None), ("cuda", 0))]
        for t in threads:
            t.start()
        threads[0].join(5)
        threads[1].join(5)
        give_up.set()
        threads[2].join(5)
    assert sorted(got) == ["cpuNone", "cuda0 waited", "cuda1"]


def test_a_cancelled_waiter_gives_up() -> None:
    cancel = threading.Event()
    with gpu_lease("cuda", 5):
        cancel.set()
        with pytest.raises(LeaseCancelled), gpu_lease("cuda", 5, cancel):
            pass
