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
    with gpu_lease("cuda", 0), gpu_lease("cuda", 1), gpu_lease("cpu", None):
        pass


def test_a_cancelled_waiter_gives_up() -> None:
    cancel = threading.Event()
    with gpu_lease("cuda", 5):
        cancel.set()
        with pytest.raises(LeaseCancelled), gpu_lease("cuda", 5, cancel):
            pass
