"""The judge's end of one runner: start it sandboxed, ask it things, believe nothing it says unchecked.

    RunnerLink.start(...)            socketpair; launch prefix (cgroup, namespaces, no capabilities) +
                                     python -m crucible.toolkit.runner.main FD; `hello` makes the runner
                                     restrict itself (rlimits, filesystem allow-list) before any load
    link.ask(request, Expected)      one reply, parsed (toolkit/protocol.py) and matched to the question:
        Expected        -> returned
        Failed          -> CandidateFailed (the candidate raised: its own text)
        anything else   -> ProtocolViolation (a reply nobody asked for: the candidate's failure)
        EOF / deadline  -> RunnerEnded (crash, exit, timeout, oom: from the process's end)
    link.close()                     kill the group and the cgroup, remove the scratch

A runner has a session of its own (a signal to its process group reaches nothing else) in a pid namespace
where one exists, and dies with the judge (parent-death signal on its outermost process, whose namespace
dies with it), so the engine killing the judge's group on a timeout takes every runner with it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ..protocol import (
    MAX_MESSAGE_BYTES,
    REPLY,
    CompileJob,
    Done,
    EvalJob,
    Failed,
    Hello,
    KernelCache,
    Ready,
    Stop,
)
from ..sandbox import RunCgroup, exposing, launch_prefix, probe, runner_readable
from ..worker import SIGNAL_HINTS, TAIL_CHARS, WorkerLimits, _child_env, _pump, _signal_name, _Tail
from . import triton_cache

R = TypeVar("R")
SETPRIV = shutil.which("setpriv")
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
"""A CPU runner computes on one thread, so its CPU time bounds its wall time (the judge's check on the CPU)."""
FILE_LIMIT_BYTES = 1 << 30
"""RLIMIT_FSIZE of a runner: no file it writes grows past this."""


class RunnerEnded(Exception):
    """The runner process is gone (or was killed at its deadline); `status` says how, for the Evaluation."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class CandidateFailed(Exception):
    def __init__(self, error: str, cuda_error: bool = False, oom: bool = False) -> None:
        super().__init__(error)
        self.error, self.cuda_error, self.oom = error, cuda_error, oom


class ProtocolViolation(Exception):
    """A reply that does not answer the question asked: forged, malformed, oversized or out of order."""


class RunnerLink:
    def __init__(self, role: str, proc: subprocess.Popen, sock: socket.socket, scratch: Path,
                 cgroup: RunCgroup | None, deadline: float, limits: WorkerLimits) -> None:
        self.role, self.proc, self.sock, self.scratch, self.cgroup = role, proc, sock, scratch, cgroup
        self.deadline, self.limits = deadline, limits
        self.isolation: dict[str, str] = {}
        self.tail = _Tail()
        self.stop_pump = threading.Event()
        assert proc.stdout is not None
        self.pump = threading.Thread(target=_pump, args=(proc.stdout.fileno(), self.tail.feed, self.stop_pump),
                                     daemon=True)
        self.pump.start()
        self.closed = False
        self.pending_ready = False
        self.backend = "cpu"
        self.cache: KernelCache | None = None

    # ------------------------------------------------------------------ start

    @classmethod
    def launch(cls, role: str, *, backend: str, gpu: str | None, limits: WorkerLimits) -> RunnerLink:
        """Start a runner process: it imports torch (and makes its CUDA context) and waits for `hello`.
        Nothing of a kernel is known yet, so a runner can be started ahead of its job."""
        scratch = Path(tempfile.mkdtemp(prefix=f"crucible-{role}-")).resolve()
        (scratch / "triton").mkdir()
        caps = probe()
        cgroup = RunCgroup.create(caps, memory_mb=None if backend == "cpu" else limits.memory_mb,
                                  max_processes=limits.max_processes, cpu_accounting=backend == "cpu",
                                  freezer=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = _child_env(backend, gpu, scratch, {"TRITON_CACHE_DIR": str(scratch / "triton"),  # private
                                                 "CRUCIBLE_RUNNER_DEVICE": "cuda" if backend == "cuda" else "cpu",
                                                 **ONE_THREAD})
        # A session of its own, so a signal to its process group reaches no judge and no other runner; and
        # death with the judge (whose group the engine kills on a timeout) by the parent-death signal.
        orphan_guard = [SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []
        command = [*orphan_guard, *launch_prefix(limits, caps, cgroup), sys.executable, "-P", "-s", "-X",
                   "faulthandler", "-m", "crucible.toolkit.runner.main", str(theirs.fileno())]
        try:
            proc = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=scratch, env=env,
                                    start_new_session=True)
        except OSError as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            if cgroup:
                cgroup.remove()
            raise RunnerEnded("infra", f"the {role} runner could not be started: {exc}") from None
        finally:
            theirs.close()
        link = cls(role, proc, ours, scratch, cgroup, math.inf, limits)
        link.backend = backend
        return link

    def hello(self, *, readable: list[str], limits: WorkerLimits, deadline: float,
              cache: KernelCache | None = None, secret: str | None = None) -> None:
        """Give the runner its job's sandbox and limits: it restricts itself before any kernel loads.
        `readable`: its snapshot and the files of its kernel, nothing of the task. `cache`: its kernel's
        Triton builds by content, copied into its private cache now (nothing of a kernel has run yet).
        `secret`: a folder the runner must not be able to read (the task's): refused if the list holds it."""
        allowed = runner_readable([*readable, str(self.scratch)])
        held_by = exposing(secret, allowed) if secret else None
        if held_by:
            raise RunnerEnded("infra", f"the task folder {secret} lies inside {held_by}, which a runner may read: "
                              "its hidden configs and solutions would be open to the candidate. Keep the task "
                              "suite (CRUCIBLE_TASKS, or this checkout) outside the system, Python and toolkit "
                              "folders")
        self.limits, self.deadline, self.cache = limits, deadline, cache
        if cache is not None:
            with contextlib.suppress(OSError):  # a cache that cannot be read costs a compile, nothing more
                triton_cache.seed(Path(cache.store), self.scratch / "triton")
        if self.cgroup and self.backend != "cpu":
            self.cgroup.set_limits(memory_mb=limits.memory_mb, max_processes=limits.max_processes)
        elif self.cgroup:
            self.cgroup.set_limits(memory_mb=None, max_processes=limits.max_processes)
        cpu_s = limits.cpu_s or int(2 * limits.timeout_s)
        rlimits: dict[str, int | list[int]] = {"CPU": [cpu_s, cpu_s + 5], "CORE": 0, "FSIZE": FILE_LIMIT_BYTES}
        if self.backend == "cpu":
            rlimits["AS"] = limits.memory_mb << 20
        elif not (self.cgroup and self.cgroup.memory_dir):
            rlimits["DATA"] = limits.memory_mb << 20
        self.send(Hello(device="cuda" if self.backend == "cuda" else "cpu",
                        readable=allowed, writable=[str(self.scratch)],
                        rlimits=rlimits))
        self.pending_ready = True  # the judge goes on; the first ask() reads the runner's Ready

    @classmethod
    def start(cls, role: str, *, backend: str, gpu: str | None, limits: WorkerLimits, readable: list[str],
              deadline: float, cache: KernelCache | None = None) -> RunnerLink:
        """Launch a runner and hello it at once."""
        link = cls.launch(role, backend=backend, gpu=gpu, limits=limits)
        link.hello(readable=readable, limits=limits, deadline=deadline, cache=cache)
        return link

    # ------------------------------------------------------------------ asking

    def send(self, request: Any, fds: list[int] | None = None) -> None:
        data = request.model_dump_json().encode()
        try:
            if fds:
                socket.send_fds(self.sock, [data], fds)
            else:
                self.sock.sendall(data)
        except OSError:
            raise self.ended() from None

    def receive(self, expected: type[R]) -> R:
        """The next reply, which must be `expected` (or Failed)."""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RunnerEnded("timeout", f"the {self.role} ran past its {self.limits.timeout_s:g} s limit "
                                  "and was killed with every process it started; make it faster or look for a "
                                  "hang")
            ready, _, _ = select.select([self.sock], [], [], min(left, 0.5))
            if ready:
                break
        try:
            data = self.sock.recv(MAX_MESSAGE_BYTES + 1, socket.MSG_TRUNC)
        except OSError:
            data = b""
        if not data:
            raise self.ended()
        if len(data) > MAX_MESSAGE_BYTES:
            self.kill()
            raise ProtocolViolation(f"the {self.role} sent a message of over {MAX_MESSAGE_BYTES} bytes")
        try:
            reply = REPLY.validate_python(json.loads(data))
        except (ValueError, ValidationError) as exc:
            self.kill()
            raise ProtocolViolation(f"the {self.role} sent a malformed message: {str(exc)[:300]}") from None
        if isinstance(reply, Failed):
            raise CandidateFailed(reply.error, reply.cuda_error, reply.oom)
        if not isinstance(reply, expected):
            self.kill()
            raise ProtocolViolation(f"the {self.role} answered {type(reply).__name__} where "
                                    f"{expected.__name__} was asked for")
        return reply

    def ask(self, request: Any, expected: type[R], fds: list[int] | None = None,
            meanwhile: Callable[[], None] | None = None) -> R:
        """Send `request` and read its reply; `meanwhile` runs in between (the judge's own work while the
        runner computes)."""
        self.ready()
        self.send(request, fds)
        if meanwhile is not None:
            meanwhile()
        return self.receive(expected)

    def ready(self) -> None:
        if self.pending_ready:
            self.pending_ready = False
            ready = self.receive(Ready)
            self.isolation = {"runner_" + k: v for k, v in ready.isolation.items()}

    # ------------------------------------------------------------------ ending

    def ended(self) -> RunnerEnded:
        """Why the runner's end of the socket closed: wait for the process and read its status."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        oom = self.cgroup.oom_killed() if self.cgroup else False
        self.kill()
        if oom:
            return RunnerEnded("oom", f"the {self.role} was killed for exceeding its {self.limits.memory_mb} MiB "
                               "memory limit; use less host memory")
        if code < 0:
            sig = -code
            if sig == signal.SIGXCPU:
                return RunnerEnded("timeout", f"the {self.role} used more than its CPU time and was killed; "
                                   "look for a busy loop")
            hint = SIGNAL_HINTS.get(sig, "a fatal signal")
            return RunnerEnded("crash", f"the {self.role} crashed with {_signal_name(sig)}: {hint}; check the "
                               "kernel's memory accesses (the output below may hold a traceback)")
        return RunnerEnded("exit", f"the {self.role} process ended (exit code {code}) in the middle of the "
                           "evaluation: the candidate ended it early (sys.exit, os._exit or similar); exiting "
                           "early is a failure")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        if self.cgroup:
            self.cgroup.kill_all()

    def _signal_all(self, sig: int) -> None:
        """Signal every process of the runner: its cgroup's when it has one (a child that left the session
        is still in it), else its process group."""
        pids = self.cgroup.pids() if self.cgroup else []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if not pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def cpu_seconds(self) -> float:
        """CPU time used so far by the runner's processes, from the kernel: the judge's own measure of a CPU
        runner's work, which waiting does not inflate. Work done by a process that then exits must stay
        counted (a helper per call that computes and dies would otherwise take its time with it): the
        cgroup's CPU accounting where there is one; else every live process's clock plus the time of the
        children it reaped (in its pid namespace the runner reaps every orphan)."""
        counted = self.cgroup.cpu_seconds() if self.cgroup else None
        if counted is not None:
            return counted
        total = 0.0
        for pid in (self.cgroup.pids() if self.cgroup else []) or [self.proc.pid, *_children(self.proc.pid)]:
            with contextlib.suppress(OSError):
                total += time.clock_gettime(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
            total += _reaped_children_seconds(pid)
        return total

    def suspend(self) -> None:
        """Stop every process of the runner (while another runner is timed: no CPU hog between calls): its
        cgroup frozen where there is a freezer (a process that keeps forking escapes signals sent one pid
        at a time: its newest child is always not yet signalled), and every process sent SIGSTOP."""
        if self.cgroup:
            self.cgroup.freeze(True)
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        if self.cgroup:
            self.cgroup.freeze(False)
        self._signal_all(signal.SIGCONT)

    def output(self) -> str:
        return self.tail.text()[-TAIL_CHARS:]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.proc.poll() is None:
            with contextlib.suppress(RunnerEnded, ProtocolViolation, CandidateFailed, OSError):
                self.deadline = min(self.deadline, time.monotonic() + 2)
                self.ask(Stop(), Done)
        self.kill()
        self.proc.wait()
        self.pump.join(2)
        self.stop_pump.set()
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        if self.cgroup:
            self.cgroup.remove()
        if self.cache is not None and self.cache.keep:  # every process of the runner is gone by now
            with contextlib.suppress(OSError):  # nothing kept: the next runner compiles again
                triton_cache.harvest(self.scratch / "triton", Path(self.cache.store))
        shutil.rmtree(self.scratch, ignore_errors=True)


def _reaped_children_seconds(pid: int) -> float:
    """cutime + cstime of /proc/PID/stat: what the children it has waited for spent (clock ticks)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _children(pid: int) -> list[int]:
    """The process tree under `pid` (the runner sits under its launch prefix's processes)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                kids = [int(k) for k in task.read_text().split()]
                found += kids
                todo += kids
    return found


def runner_limits(timeout_s: float, memory_mb: int, max_processes: int) -> WorkerLimits:
    return WorkerLimits(timeout_s=timeout_s, memory_mb=memory_mb, max_processes=max_processes)


SPARES: dict[str, RunnerLink] = {}
"""Runners started ahead of their job by a preloaded judge (prestart): taken by the next Runners."""


def prestart(backend: str) -> None:
    """In a judge started ahead of its job: start its runners now, so their start-up is not in the job's."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES") if backend == "cuda" else None
    for role in ("candidate", "baseline"):
        SPARES[role] = RunnerLink.launch(role, backend=backend, gpu=gpu, limits=WorkerLimits())


class Runners:
    """The runners of one job, started before the judge imports torch so that both start-ups overlap (or
    taken from those a preloaded judge started ahead)."""

    def __init__(self, job: EvalJob | CompileJob, *, timing: bool) -> None:
        self.started = time.perf_counter()
        deadline = time.monotonic() + job.runner_timeout_s
        limits = runner_limits(job.runner_timeout_s, job.memory_mb, job.max_processes)
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES") if job.backend == "cuda" else None
        self.links: list[RunnerLink] = []

        def start(role: str, readable: list[str], cache: KernelCache | None, secret: str | None = None) -> RunnerLink:
            spare = SPARES.pop(role, None)
            if spare is not None and (spare.backend != job.backend or spare.proc.poll() is not None):
                spare.close()
                spare = None
            link = spare or RunnerLink.launch(role, backend=job.backend, gpu=gpu, limits=limits)
            self.links.append(link)
            link.hello(readable=readable, limits=limits, deadline=deadline, cache=cache, secret=secret)
            return link

        try:
            self.candidate = start("candidate", [job.snapshot_root, job.candidate.path], job.candidate_cache,
                                   secret=job.task_root)
            self.baseline: RunnerLink | None = None
            if timing and isinstance(job, EvalJob) and job.baseline is not None:
                extra = [job.baseline.path] + ([job.compiled_baseline.path] if job.compiled_baseline else [])
                self.baseline = start("baseline", extra, job.baseline_cache)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for link in [*self.links, *SPARES.values()]:  # a spare this job did not need goes too
            link.close()
        SPARES.clear()
