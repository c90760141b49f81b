"""The evaluation worker's entry point: `python -m crucible.toolkit.worker_main JOB_FD RESULT_FD`.

Runs untrusted candidate code (inside the job), so it only ever reports through RESULT_FD, a private
pipe, as JSON lines; stdout and stderr are the candidate's and are only kept as a log tail.

    parent writes {"kind", "target", "payload", "rlimits", "landlock"} to JOB_FD and closes it
    worker  -> {"type": "started", "isolation": {...}}     rlimits and Landlock applied
            -> {"type": "progress", "progress": {...}}*    from the job's progress callback
            -> one of: {"type": "result", "result": {...}}   the job returned
                       {"type": "error", "message", "traceback"}  the job raised
                       {"type": "oom", "message"}             MemoryError (or a framework's OOM error)
                       {"type": "exit_attempt", "code"}       the job raised SystemExit
                       {"type": "infra", "message"}           the worker itself failed
    supervisor -> {"type": "status", "exit_code", "signal"}   the worker's true exit status (see _supervise)

After its last message the worker leaves with os._exit, so no atexit handler of the candidate runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import importlib
import json
import math
import os
import random
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from .jobs import LANDLOCK_IN_CHILD
from .sandbox import apply_rlimits, restrict_filesystem

EXIT_ERROR, EXIT_INFRA, EXIT_SYSTEM_EXIT, EXIT_OOM = 3, 4, 5, 6
TRACEBACK_CHARS = 3000
STACK_SIGNAL = signal.SIGUSR1
"""Sent to the worker's group when its time is up, just before it is killed: the worker writes every
thread's stack to stderr, so a hang says where it hung (the supervisor ignores it)."""
class Channel:
    """The write end of the result pipe; thread-safe, whole messages only."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self.lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]


def _move_high(fd: int) -> int:
    """Move `fd` to a random high number, not inheritable, so the candidate does not find it at 3 or 4
    and exec'd grandchildren do not get it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = min(soft, 4096) - 1
    for _ in range(100):
        target = random.randint(max(top // 2, 64), top)
        try:
            os.fstat(target)
        except OSError:
            new = os.dup2(fd, target, inheritable=False)
            os.close(fd)
            return new
    os.set_inheritable(fd, False)
    return fd


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:  # field 4, after "(comm) state"
                kids.append(int(entry))
    return kids


def _kill_descendants() -> None:
    """SIGKILL every descendant: as a subreaper (or pid 1) we inherit orphans, so kill our children,
    reap, and repeat until none is left."""
    for _ in range(100):
        kids = _children(os.getpid())
        if not kids:
            return
        for kid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(kid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(0.005)


def _supervise(channel: Channel) -> None:
    """Fork the real worker; this process stays as its supervisor and returns only in the worker.

    As pid 1 of a pid namespace the worker could not die of a signal it sends itself (abort() would turn
    into SIGSEGV), so it must not be pid 1. Elsewhere the supervisor is a child subreaper, so orphans the
    candidate leaves behind (even after setsid) come to it. When the worker ends, the supervisor kills
    every descendant, reports the worker's true exit status over the channel, and exits.
    """
    if os.getpid() != 1:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    pid = os.fork()
    if pid == 0:
        faulthandler.register(STACK_SIGNAL, all_threads=True)
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STACK_SIGNAL, signal.SIG_IGN)
    while True:
        try:
            done, status = os.wait()
        except ChildProcessError:
            os._exit(EXIT_INFRA)
        if done == pid:
            break
    _kill_descendants()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        channel.send({"type": "status", "exit_code": None, "signal": sig})
        os._exit(128 + sig)
    code = os.WEXITSTATUS(status)
    channel.send({"type": "status", "exit_code": code, "signal": None})
    os._exit(code)


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    # torch.OutOfMemoryError (CUDA) and the CPU allocator's RuntimeError are not MemoryErrors.
    names = {cls.__name__ for cls in type(exc).__mro__}
    return "OutOfMemoryError" in names or "can't allocate memory" in str(exc)


def _load(target: str) -> Callable[[dict[str, Any], Callable[[dict[str, Any]], None]], dict[str, Any]]:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def _run(channel: Channel, job: dict[str, Any]) -> None:
    rlimits = dict(job.get("rlimits") or {})
    if "CPU" in rlimits:  # the job's CPU time, like its wall clock (toolkit/worker.py), counts from its start:
        # RLIMIT_CPU counts this process's whole life, and a loaded machine's imports took half of it
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = math.ceil(used.ru_utime + used.ru_stime)
        value = rlimits["CPU"]
        rlimits["CPU"] = [v + spent for v in value] if isinstance(value, list) else value + spent
    isolation = apply_rlimits(rlimits)
    landlock = job.get("landlock")
    if landlock and job["kind"] in LANDLOCK_IN_CHILD:
        job["payload"]["landlock_writable"] = landlock["writable"]
        isolation["filesystem"] = ("Landlock in the process that runs the candidate (read-only except "
                                   f"{', '.join(landlock['writable'])}); the job's own tool runs outside it")
    elif landlock:
        try:
            isolation["filesystem"] = restrict_filesystem(landlock["writable"])
        except OSError as exc:
            isolation["filesystem"] = f"NOT restricted: {exc}"
    channel.send({"type": "started", "isolation": isolation})
    try:
        fn = _load(job["target"])
    except (ImportError, AttributeError) as exc:
        channel.send({"type": "infra", "message": f"the job {job['kind']!r} ({job['target']}) could not be "
                                                  f"loaded: {exc!r}; check crucible.toolkit.jobs.JOBS"})
        os._exit(EXIT_INFRA)

    def progress(data: dict[str, Any]) -> None:
        channel.send({"type": "progress", "progress": data})

    try:
        result = fn(job["payload"], progress)
        if not isinstance(result, dict):
            raise TypeError(f"the job {job['kind']!r} returned {type(result).__name__}, not a dict")
        data = json.dumps({"type": "result", "result": result}, separators=(",", ":"))
    except SystemExit as exc:
        channel.send({"type": "exit_attempt", "code": exc.code if isinstance(exc.code, int | None)
                      else str(exc.code)})
        os._exit(EXIT_SYSTEM_EXIT)
    except BaseException as exc:  # the job is arbitrary code: every failure becomes a verdict
        tb = traceback.format_exc()[-TRACEBACK_CHARS:]
        if _is_oom(exc):
            channel.send({"type": "oom", "message": f"{type(exc).__name__}: {exc}"[:500], "traceback": tb})
            os._exit(EXIT_OOM)
        channel.send({"type": "error", "message": f"{type(exc).__name__}: {exc}"[:1000], "traceback": tb})
        os._exit(EXIT_ERROR)
    with channel.lock:
        view = memoryview((data + "\n").encode())
        while view:
            view = view[os.write(channel.fd, view):]
    os._exit(0)


def _preload(what: str) -> None:
    """A worker started ahead of its job does the slow start-up while it waits: imports, and on a GPU the
    CUDA context (after the supervisor's fork: a CUDA context does not survive a fork)."""
    if not what:
        return
    import torch
    import triton  # noqa: F401

    if what == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
    runners = os.environ.pop("CRUCIBLE_WORKER_RUNNERS", "")
    if runners:  # a judge started ahead: its runners start ahead too
        from .judge.link import prestart

        prestart(runners)


def main() -> None:
    job_fd, result_fd = _move_high(int(sys.argv[1])), _move_high(int(sys.argv[2]))
    channel = Channel(result_fd)
    try:
        _supervise(channel)
        _preload(os.environ.pop("CRUCIBLE_WORKER_PRELOAD", ""))
        job = json.loads(_read_all(job_fd))
        _run(channel, job)
    except BaseException:  # top level: whatever broke, the parent gets it as an infra failure
        try:
            channel.send({"type": "infra", "message": "the worker failed before running the job: "
                                                      + traceback.format_exc()[-TRACEBACK_CHARS:]})
        finally:
            os._exit(EXIT_INFRA)


if __name__ == "__main__":
    main()
