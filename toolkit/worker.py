"""Run one job in a sandboxed evaluation worker and turn whatever happens into a WorkerOutcome.

    run_job(kind, payload)
      JOBS[kind] -> "module:function"          resolved here, in the trusted parent
      launch: sandbox prefix + python -m crucible.toolkit.worker_main JOB_FD RESULT_FD
        JOB_FD    <- the job as JSON (a thread writes it; the payload may exceed a pipe's buffer)
        RESULT_FD -> JSON lines (a thread reads them; progress is forwarded from the caller's thread)
        stdout+stderr -> a thread keeps the tail (the candidate's prints, never a result)
      wait for exit, timeout or cancel -> SIGKILL the process group (and cgroup) -> reap -> verdict

A crash, hang or early exit of the candidate is a verdict, never an exception of the caller.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .jobs import JOBS, TRUSTED_JOBS
from .leftovers import mark_owner
from .protocol import is_gpu_oom
from .sandbox import RunCgroup, SandboxCaps, describe, launch_prefix, probe
from .worker_main import STACK_SIGNAL

Status = Literal["ok", "error", "crash", "timeout", "exit", "oom", "cancelled", "infra"]
Backend = Literal["cpu", "cuda", "rocm"]

TAIL_CHARS = 4000
MAX_CHANNEL_BYTES = 256 << 20
"""More than this over the result channel is treated as an attack on the parent's memory."""
REAP_GRACE_S = 2.0
STACK_GRACE_S = 3.0
"""The longest a worker past its time gets to write its stacks before it is killed: it is killed as soon as
its output has been quiet for STACK_QUIET_S after the stacks began (on a loaded machine a worker that had
begun writing was killed half a line in, at a fixed 0.5 s)."""
STACK_QUIET_S = 0.5
FINAL_GRACE_S = 10.0
"""How long a worker that has sent its final message gets to exit before it is killed. The message decides
the verdict: a judge whose exit then hangs in the GPU driver (a context torn down behind a dead runner's)
cannot turn a decided evaluation into a timeout."""
FINAL_MESSAGES = frozenset({"result", "error", "oom", "exit_attempt", "infra"})
STARTUP_LIMIT_S = 30.0
"""How long a worker may take, after its job is sent, to start it (its "started" message). The job's own
wall-clock limit counts from there: on a loaded machine the interpreter's start-up is not the candidate's
time, and a limit that expired during the imports would leave no stack to say where the job was."""


class WorkerLimits(BaseModel):
    """Resource limits of one worker run."""

    model_config = ConfigDict(frozen=True)

    timeout_s: float = Field(300, gt=0)
    """Wall-clock seconds the job may run, from its start (see STARTUP_LIMIT_S for the worker's start-up)."""
    """Wall clock; on expiry the whole process group is killed."""
    memory_mb: int = Field(16384, gt=0)
    """Host memory: RLIMIT_AS on the cpu backend; a memory cgroup (else RLIMIT_DATA) on GPU backends,
    where RLIMIT_AS breaks the driver's huge address-space reservations."""
    cpu_s: int | None = Field(None, gt=0)
    """CPU seconds (RLIMIT_CPU); None means 2 * timeout_s."""
    max_processes: int = Field(256, gt=0)
    """Processes and threads: a pids cgroup where available (RLIMIT_NPROC is per user and ignores root)."""
    network: bool = False
    """False runs the worker in its own network namespace."""


class WorkerOutcome(BaseModel):
    """What happened to one worker run."""

    status: Status
    """ok: the job returned a result; error: it raised; crash: killed by a signal; timeout: wall clock
    (or CPU time) exceeded; exit: the process ended without sending its result; oom: out of memory;
    cancelled: the caller cancelled; infra: the worker could not be started or run its job."""
    result: dict[str, Any] | None
    """The job's returned dict, only when status is ok."""
    message: str
    """What happened and what to do about it, for a user or an agent."""
    exit_code: int | None
    """The worker's exit code, when it exited rather than being killed by a signal."""
    signal: str | None
    """The signal that killed the worker, e.g. "SIGSEGV"."""
    stderr_tail: str
    """The last characters of the worker's stdout and stderr (the candidate's prints go there)."""
    seconds: float
    """Wall-clock seconds from launch to reaping."""
    isolation: dict[str, str]
    """What isolation was applied, by mechanism (e.g. "network": "netns (unshare -n)")."""


SIGNAL_HINTS: dict[int, str] = {
    signal.SIGSEGV: "an invalid memory access (segmentation fault)",
    signal.SIGBUS: "a bus error (a misaligned access or a truncated mapped file)",
    signal.SIGABRT: "an abort (a failed assertion or a fatal error inside a library)",
    signal.SIGILL: "an illegal instruction",
    signal.SIGFPE: "an arithmetic fault (such as an integer division by zero)",
    signal.SIGKILL: "SIGKILL from outside the worker (possibly the kernel's out-of-memory killer)",
}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# ------------------------------------------------------------------------------------------- plumbing

def _pump(fd: int, on_chunk: Callable[[bytes], bool], stop: threading.Event) -> None:
    """Read `fd` until EOF, or until `stop` is set and nothing more is ready; on_chunk False stops too."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        if not poller.poll(50):
            if stop.is_set():
                return
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk or not on_chunk(chunk):
            return


class _Messages:
    """Splits the result channel into JSON messages and queues them for the caller's thread."""

    def __init__(self) -> None:
        self.queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self.buffer = bytearray()
        self.total = 0
        self.garbled = 0

    def feed(self, chunk: bytes) -> bool:
        self.total += len(chunk)
        if self.total > MAX_CHANNEL_BYTES:
            self.queue.put({"type": "_overflow"})
            return False
        start = len(self.buffer)  # search only the new bytes: a 5 MB line arrives in 80 chunks
        self.buffer += chunk
        while (end := self.buffer.find(b"\n", start)) >= 0:
            line, self.buffer = bytes(self.buffer[:end]), self.buffer[end + 1:]
            start = 0
            try:
                message = json.loads(line)
            except ValueError:
                self.garbled += 1
                continue
            if isinstance(message, dict):
                self.queue.put(message)
        return True


class _Tail:
    """Keeps the last bytes of the worker's output."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.fed = 0
        """Bytes fed so far (data keeps only the last ones)."""

    def feed(self, chunk: bytes) -> bool:
        self.data += chunk
        self.fed += len(chunk)
        if len(self.data) > 16 * TAIL_CHARS:
            del self.data[:-4 * TAIL_CHARS]
        return True

    def text(self) -> str:
        return self.data.decode(errors="replace")[-TAIL_CHARS:]


def _write_job(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb", closefd=True) as pipe:
            pipe.write(data)
    except BrokenPipeError:  # the worker died before reading its job: the verdict says why
        pass


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# ------------------------------------------------------------------------------------------- planning

def _plan(limits: WorkerLimits, caps: SandboxCaps, backend: Backend,
          cgroup: RunCgroup | None) -> tuple[dict[str, Any], dict[str, str]]:
    """The rlimits the worker applies to itself, and the isolation record."""
    isolation = describe(limits, caps, cgroup)
    memory = limits.memory_mb << 20
    cpu_s = limits.cpu_s or math.ceil(2 * limits.timeout_s)
    rlimits: dict[str, Any] = {"CPU": [cpu_s, cpu_s + 5], "CORE": 0}
    if backend == "cpu":
        rlimits["AS"] = memory
        isolation["memory"] = f"RLIMIT_AS {limits.memory_mb} MiB"
    elif not (cgroup and cgroup.memory_dir):
        rlimits["DATA"] = memory
        isolation["memory"] = (f"RLIMIT_DATA {limits.memory_mb} MiB (no memory cgroup; RLIMIT_AS would break "
                               "the GPU driver's address-space reservations)")
    if not (cgroup and cgroup.pids_dir):
        if caps.is_root:
            isolation["pids"] = "NOT limited: no pids cgroup, and RLIMIT_NPROC does not apply to root"
        else:
            rlimits["NPROC"] = limits.max_processes
            isolation["pids"] = f"RLIMIT_NPROC {limits.max_processes} (counts all processes of the user)"
    isolation["cpu"] = f"RLIMIT_CPU {cpu_s} s"
    isolation["filesystem"] = ("Landlock requested" if caps.landlock_abi >= 1
                               else "NOT restricted: Landlock is not available on this kernel")
    return rlimits, isolation


def _child_env(backend: Backend, gpu: int | None, scratch: Path, env: dict[str, str] | None) -> dict[str, str]:
    """A clean environment: nothing of the parent's leaks (API keys) but what Python needs."""
    extra = dict(env or {})
    child = {"PATH": os.environ.get("PATH", os.defpath), "LANG": os.environ.get("LANG", "C.UTF-8"),
             "HOME": str(scratch), "TMPDIR": str(scratch), "PYTHONUNBUFFERED": "1",
             "PYTHONDONTWRITEBYTECODE": "1"}
    paths = [p for p in (extra.pop("PYTHONPATH", ""), os.environ.get("PYTHONPATH", "")) if p]
    if paths:
        child["PYTHONPATH"] = os.pathsep.join(paths)
    if backend == "cpu":
        child.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    elif backend == "cuda":
        child["CUDA_VISIBLE_DEVICES"] = str(gpu)
    else:
        child["ROCR_VISIBLE_DEVICES"] = str(gpu)
    child.update(extra)
    return child


# ------------------------------------------------------------------------------------------- verdict


def _verdict(reason: str | None, messages: dict[str, dict[str, Any]], returncode: int,
             limits: WorkerLimits, oom_killed: bool, cpu_s: int,
             ) -> tuple[Status, dict[str, Any] | None, str, int | None, str | None]:
    status_msg = messages.get("status")  # from the supervisor: the worker's true status
    if status_msg:
        exit_code, signum = status_msg.get("exit_code"), status_msg.get("signal")
    else:
        exit_code, signum = (None, -returncode) if returncode < 0 else (returncode, None)
    sig = _signal_name(signum) if signum else None
    if reason == "cancelled":
        return "cancelled", None, "the evaluation was cancelled by the caller", exit_code, sig
    if reason == "timeout":
        return ("timeout", None, f"the evaluation ran past its {limits.timeout_s:g} s wall-clock limit and was "
                f"killed with every process it started; make it faster or look for a hang (the worker's stacks "
                f"at the limit end stderr_tail)", exit_code, sig)
    if reason == "no_start":
        return ("infra", None, f"the worker did not start its job within {STARTUP_LIMIT_S:g} s of receiving it "
                "(its start-up hung or the machine is overloaded); nothing of the job ran, so run it again "
                "(stderr_tail ends with the worker's stacks)", exit_code, sig)
    if reason == "overflow":
        return ("error", None, f"the worker sent more than {MAX_CHANNEL_BYTES >> 20} MiB over its result "
                "channel and was killed; return smaller results", exit_code, sig)
    if "result" in messages:
        result = messages["result"].get("result")
        if isinstance(result, dict):
            return "ok", result, "the job finished and sent its result", exit_code, sig
    if "exit_attempt" in messages:
        code = messages["exit_attempt"].get("code")
        return ("exit", None, f"the candidate called sys.exit({code!r}) before the evaluation finished; "
                "exiting early is a failure", exit_code, sig)
    if "oom" in messages:
        said = str(messages["oom"].get("message"))
        if is_gpu_oom(said):  # the device's memory has no limit of ours: the host's limit is beside the point
            return "oom", None, f"the evaluation ran out of GPU memory: {said}; use less memory", exit_code, sig
        return ("oom", None, f"the evaluation ran out of host memory (limit {limits.memory_mb} MiB): "
                f"{said}; use less memory", exit_code, sig)
    if "error" in messages:
        err = messages["error"]
        return ("error", None, f"the job raised {err.get('message')}\n{err.get('traceback', '')}",
                exit_code, sig)
    if "infra" in messages:
        return "infra", None, str(messages["infra"].get("message")), exit_code, sig
    if oom_killed:
        return ("oom", None, f"the worker was killed by the kernel for exceeding its {limits.memory_mb} MiB "
                "memory limit; use less host memory", exit_code, sig)
    if signum == signal.SIGXCPU:
        return ("timeout", None, f"the evaluation used more than its {cpu_s} s of CPU time and was killed; "
                "make it faster or look for a busy loop", exit_code, sig)
    if "started" not in messages:
        return ("infra", None, f"the worker could not be started (exit code {exit_code}, signal {sig}); "
                "see stderr_tail", exit_code, sig)
    if signum:
        hint = SIGNAL_HINTS.get(signum, "a fatal signal")
        return ("crash", None, f"the worker crashed with {sig}: {hint}; check the candidate's memory accesses "
                "(stderr_tail may hold a Python traceback)", exit_code, sig)
    return ("exit", None, f"the worker process ended (exit code {exit_code}) without sending its result: "
            "the candidate ended the process early (sys.exit, os._exit or similar); exiting early is a "
            "failure", exit_code, sig)


# ------------------------------------------------------------------------------------------- run_job

def run_job(kind: str, payload: dict[str, Any], *, limits: WorkerLimits, backend: Backend,
            gpu: int | None = None, scratch: Path, env: dict[str, str] | None = None,
            on_progress: Callable[[dict[str, Any]], None] | None = None,
            cancel: threading.Event | None = None) -> WorkerOutcome:
    """Run the job `kind` (a key of crucible.toolkit.jobs.JOBS) on `payload` in a sandboxed worker.

    on_progress is called in the caller's thread. Raises ValueError only for caller bugs (an unknown
    kind, a GPU backend without a GPU); everything the worker does becomes the outcome's status.
    """
    _check_kind(kind)
    worker = start_worker(limits=limits, backend=backend, gpu=gpu, scratch=scratch, env=env,
                          trusted=kind in TRUSTED_JOBS)
    if isinstance(worker, WorkerOutcome):
        return worker
    return worker.run(kind, payload, on_progress=on_progress, cancel=cancel)


def _check_kind(kind: str) -> str:
    target = JOBS.get(kind)
    if target is None:
        raise ValueError(f"unknown job kind {kind!r}; known: {sorted(JOBS)}")
    return target


def start_worker(*, limits: WorkerLimits, backend: Backend, gpu: int | None = None, scratch: Path,
                 env: dict[str, str] | None = None, preload: bool = False,
                 trusted: bool = False) -> Worker | WorkerOutcome:
    """Start a worker that waits for its one job: sandboxed, or with `trusted` (a judge: it runs no
    candidate code and starts sandboxed runners itself) only in a process group of its own, with its
    rlimits. With `preload` it imports torch and Triton (and initialises CUDA on a GPU backend) while it
    waits, so a worker started ahead of time answers its job without paying for a fresh interpreter's
    imports. Returns an "infra" outcome if it cannot start."""
    if backend != "cpu" and gpu is None:
        raise ValueError(f"the {backend} backend needs a gpu index")
    started = time.monotonic()
    scratch = Path(scratch).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    mark_owner(scratch)  # a later start removes it if this process dies without doing so (leftovers.py)
    caps = probe()
    cgroup = None if trusted else RunCgroup.create(caps, memory_mb=None if backend == "cpu" else limits.memory_mb,
                                                   max_processes=limits.max_processes)
    writable = [str(scratch), "/dev"]  # /dev: GPU device files and /dev/shm
    if env and env.get("TRITON_CACHE_DIR"):
        writable.append(env["TRITON_CACHE_DIR"])
    rlimits, isolation = _plan(limits, caps, backend, cgroup)
    if trusted:  # the judge: its runners carry the sandbox (and their own memory limits)
        rlimits = {k: v for k, v in rlimits.items() if k in ("CPU", "CORE")}
        isolation = {"process_group": isolation["process_group"], "judge": "trusted: runs no candidate code"}
    child_env = _child_env(backend, gpu, scratch, env)
    if preload:
        child_env["CRUCIBLE_WORKER_PRELOAD"] = "cuda" if backend == "cuda" else "imports"
        if trusted:
            child_env["CRUCIBLE_WORKER_RUNNERS"] = backend

    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    prefix = [] if trusted else launch_prefix(limits, caps, cgroup)
    command = [*prefix, sys.executable, "-P", "-s", "-X", "faulthandler",
               "-m", "crucible.toolkit.worker_main", str(job_r), str(res_w)]
    try:
        proc = subprocess.Popen(command, pass_fds=(job_r, res_w), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=scratch,
                                env=child_env, start_new_session=True)
    except OSError as exc:
        for fd in (job_r, job_w, res_r, res_w):
            os.close(fd)
        if cgroup:
            cgroup.remove()
        return WorkerOutcome(status="infra", result=None, message=f"the worker could not be started: {exc}",
                             exit_code=None, signal=None, stderr_tail="",
                             seconds=time.monotonic() - started, isolation=isolation)
    os.close(job_r)
    os.close(res_w)
    return Worker(proc=proc, job_w=job_w, res_r=res_r, cgroup=cgroup, limits=limits, rlimits=rlimits,
                  isolation=isolation,
                  landlock={"writable": writable} if caps.landlock_abi >= 1 and not trusted else None,
                  started=started)


class Worker:
    """A started worker process waiting for its one job (see start_worker)."""

    def __init__(self, *, proc: subprocess.Popen, job_w: int, res_r: int, cgroup: RunCgroup | None,
                 limits: WorkerLimits, rlimits: dict[str, Any], isolation: dict[str, str],
                 landlock: dict[str, Any] | None, started: float) -> None:
        self.proc, self.job_w, self.res_r, self.cgroup = proc, job_w, res_r, cgroup
        self.limits, self.rlimits, self.isolation, self.landlock = limits, rlimits, isolation, landlock
        self.started = started
        self.used = False
        assert proc.stdout is not None
        self.stop = threading.Event()
        self.msgs, self.tail = _Messages(), _Tail()
        self.pumps = [threading.Thread(target=_pump, args=(res_r, self.msgs.feed, self.stop), daemon=True),
                      threading.Thread(target=_pump, args=(proc.stdout.fileno(), self.tail.feed, self.stop),
                                       daemon=True)]
        for t in self.pumps:
            t.start()

    def alive(self) -> bool:
        return not self.used and self.proc.poll() is None

    def discard(self) -> None:
        """Kill a worker that will not get a job."""
        if not self.used:
            self.used = True
            with contextlib.suppress(OSError):
                os.close(self.job_w)
            self._reap()

    def run(self, kind: str, payload: dict[str, Any], *, timeout_s: float | None = None,
            on_progress: Callable[[dict[str, Any]], None] | None = None,
            cancel: threading.Event | None = None) -> WorkerOutcome:
        """Send the job, wait for its end (or the timeout, or cancel), kill what is left, give the verdict."""
        if self.used:
            raise RuntimeError("a worker runs exactly one job")
        self.used = True
        target = _check_kind(kind)
        job = {"kind": kind, "target": target, "payload": payload, "rlimits": self.rlimits,
               "landlock": self.landlock}
        try:
            job_data = json.dumps(job).encode()
        except (TypeError, ValueError) as exc:
            self.used = False
            self.discard()
            raise ValueError(f"the payload of job {kind!r} is not JSON-serializable: {exc}") from exc
        began = time.monotonic()
        writer = threading.Thread(target=_write_job, args=(self.job_w, job_data), daemon=True)
        writer.start()
        messages: dict[str, dict[str, Any]] = {}
        reason: str | None = None
        final_at = math.inf
        limit_s = timeout_s or self.limits.timeout_s
        deadline = began + STARTUP_LIMIT_S

        def dispatch(message: dict[str, Any]) -> None:
            nonlocal reason, final_at, deadline
            kind_ = str(message.get("type"))
            if kind_ == "started" and "started" not in messages:
                deadline = time.monotonic() + limit_s
            if kind_ == "progress":
                if on_progress is not None and isinstance(message.get("progress"), dict):
                    on_progress(message["progress"])
            elif kind_ == "_overflow":
                reason = "overflow"
            else:
                messages[kind_] = message
                if kind_ in FINAL_MESSAGES:
                    final_at = min(final_at, time.monotonic())

        limits = self.limits if timeout_s is None else self.limits.model_copy(update={"timeout_s": timeout_s})
        try:
            while reason is None and self.proc.poll() is None:
                if time.monotonic() > final_at + FINAL_GRACE_S:
                    break  # decided: _reap kills what is left
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                elif time.monotonic() > deadline:
                    reason = "timeout" if "started" in messages else "no_start"
                    self._dump_stacks()
                else:
                    with contextlib.suppress(queue.Empty):
                        dispatch(self.msgs.queue.get(timeout=0.05))
        finally:
            oom_killed = self._reap(writer)
        while not self.msgs.queue.empty():
            dispatch(self.msgs.queue.get_nowait())

        cpu_s = limits.cpu_s or math.ceil(2 * limits.timeout_s)
        status, result, message, exit_code, sig = _verdict(reason, messages, self.proc.returncode, limits,
                                                           oom_killed, cpu_s)
        isolation = dict(self.isolation)
        if "started" in messages:
            isolation.update({k: str(v) for k, v in messages["started"].get("isolation", {}).items()})
        return WorkerOutcome(status=status, result=result, message=message, exit_code=exit_code, signal=sig,
                             stderr_tail=self.tail.text(), seconds=round(time.monotonic() - began, 3),
                             isolation=isolation)

    def _dump_stacks(self) -> None:
        """Ask the worker for its threads' stacks (worker_main.STACK_SIGNAL) and give it a moment to write
        them to stderr, where the outcome's tail keeps them: a timeout then says where the job hung."""
        before = self.tail.fed
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, STACK_SIGNAL)
            end = time.monotonic() + STACK_GRACE_S
            seen, changed = before, time.monotonic()
            while time.monotonic() < end:
                time.sleep(0.05)
                if self.tail.fed != seen:
                    seen, changed = self.tail.fed, time.monotonic()
                elif seen > before and time.monotonic() - changed > STACK_QUIET_S:
                    break  # the stacks began and have stopped coming

    def _reap(self, writer: threading.Thread | None = None) -> bool:
        """Kill the group (also after a normal exit: grandchildren the candidate left behind die with it),
        reap, drain the pipes; True when the memory cgroup killed something."""
        proc, cgroup = self.proc, self.cgroup
        _kill_group(proc.pid)
        if cgroup:
            cgroup.kill_all()
        proc.wait()
        _kill_group(proc.pid)
        self.pumps[0].join(REAP_GRACE_S)  # EOF arrives once every holder of the pipe is dead
        self.stop.set()
        for t in [*self.pumps, *([writer] if writer else [])]:
            t.join(REAP_GRACE_S)
        assert proc.stdout is not None
        proc.stdout.close()
        with contextlib.suppress(OSError):
            os.close(self.res_r)
        oom_killed = cgroup.oom_killed() if cgroup else False
        if cgroup:
            cgroup.remove()
        return oom_killed


class WorkerPool:
    """Keeps `spares` workers started ahead of need, preloaded, for a long-lived caller (the MCP server).

    Every job still gets a fresh process that runs nothing else; only the wait for the interpreter, its
    imports and the CUDA context moves out of the evaluation's path. A spare is replaced when its job ends
    (so no start-up competes with the job for the CPU), or at once when it was the last one. Two spares
    cover an agent's `compile` followed at once by `run_tests` (each takes one; both are started again
    while the agent reads the results). Limits and environment are fixed per pool; a per-call timeout may
    be given to `run_job`.
    """

    def __init__(self, *, limits: WorkerLimits, backend: Backend, gpu: int | None = None,
                 env: dict[str, str] | None = None, trusted: bool = True, spares: int = 1) -> None:
        self.limits, self.backend, self.gpu, self.env = limits, backend, gpu, env
        self.trusted = trusted
        """A pool of judges (the evaluate and compile jobs) by default."""
        self.size = spares
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._spares: list[tuple[Worker, Path]] = []
        self._filling = 0
        self._closed = False
        self._refill()

    def _start(self) -> tuple[Worker, Path] | None:
        scratch = Path(tempfile.mkdtemp(prefix="crucible-worker-"))
        worker = start_worker(limits=self.limits, backend=self.backend, gpu=self.gpu, scratch=scratch,
                              env=self.env, preload=True, trusted=self.trusted)
        if isinstance(worker, WorkerOutcome):
            shutil.rmtree(scratch, ignore_errors=True)
            return None
        return worker, scratch

    def _refill(self) -> None:
        """Start the spares that are missing, each in a thread of its own (a start takes a moment)."""
        with self._lock:
            missing = 0 if self._closed else self.size - len(self._spares) - self._filling
            self._filling += max(missing, 0)

        def fill() -> None:
            started = None
            try:
                started = self._start()
            finally:
                self._filled(started)

        for _ in range(max(missing, 0)):
            threading.Thread(target=fill, daemon=True).start()

    def _filled(self, started: tuple[Worker, Path] | None) -> None:
        """A start ended (None: it failed): keep the worker as a spare, or discard it."""
        with self._lock:
            self._filling -= 1
            keep = not self._closed and started is not None and len(self._spares) < self.size
            if keep:
                self._spares.append(started)  # type: ignore[arg-type]
            self._changed.notify_all()
        if started is not None and not keep:
            started[0].discard()
            shutil.rmtree(started[1], ignore_errors=True)

    def _take(self) -> tuple[Worker, Path] | None:
        """The oldest live spare (the furthest along its start-up), waiting for one being started rather
        than starting another; dead ones are thrown away. None when there is none to wait for."""
        while True:
            with self._changed:
                while not self._spares and self._filling:
                    self._changed.wait(1.0)
                spare = self._spares.pop(0) if self._spares else None
            if spare is None or spare[0].alive():
                return spare
            spare[0].discard()
            shutil.rmtree(spare[1], ignore_errors=True)

    def run_job(self, kind: str, payload: dict[str, Any], *, timeout_s: float | None = None,
                on_progress: Callable[[dict[str, Any]], None] | None = None,
                cancel: threading.Event | None = None) -> WorkerOutcome:
        _check_kind(kind)
        spare = self._take() or self._start()
        if spare is None:
            self._refill()
            return WorkerOutcome(status="infra", result=None, message="the worker could not be started",
                                 exit_code=None, signal=None, stderr_tail="", seconds=0.0, isolation={})
        worker, scratch = spare
        with self._lock:
            empty = not self._spares and not self._filling
        if empty:  # the next job would find nothing: start its worker now, beside this one
            self._refill()
        try:
            return worker.run(kind, payload, timeout_s=timeout_s, on_progress=on_progress, cancel=cancel)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            # The rest after the job, not beside it: a start-up (torch's import) takes CPU the job would
            # miss, and a call that comes at once finds the spare left.
            self._refill()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            spares, self._spares = self._spares, []
        for worker, scratch in spares:
            worker.discard()
            shutil.rmtree(scratch, ignore_errors=True)
