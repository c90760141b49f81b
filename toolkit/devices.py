"""One evaluation at a time per GPU, across threads and processes: a lease is an exclusive file lock.

Sessions of a harness run (and standalone servers) share GPUs; timing two kernels at once on one device
makes both figures wrong. Every worker job on a GPU backend holds the device's lease while it runs. The
harness places evaluations on the GPUs of a host (harness/placement.py) and asks `lease_free` which of
them no other process holds at the moment, so it does not queue behind another run on a busy one.
"""

from __future__ import annotations

import fcntl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .workspace import cache_root


class LeaseCancelled(Exception):
    """The caller cancelled while waiting for the device."""


def _lock_path(backend: str, gpu: int) -> Path:
    folder = cache_root() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{backend}{gpu}.lock"


def lease_free(backend: str, gpu: int) -> bool:
    """Whether no process holds GPU `gpu`'s lease now (a hint: another may take it the next moment)."""
    with open(_lock_path(backend, gpu), "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


@contextmanager
def gpu_lease(backend: str, gpu: int | None, cancel: threading.Event | None = None) -> Iterator[None]:
    """Hold GPU `gpu` exclusively; a no-op on the cpu backend. Waits (polling `cancel`) while another
    evaluation holds it."""
    if backend == "cpu" or gpu is None:
        yield
        return
    with open(_lock_path(backend, gpu), "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if cancel is not None and cancel.is_set():
                    raise LeaseCancelled(f"cancelled while waiting for {backend} device {gpu}") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
