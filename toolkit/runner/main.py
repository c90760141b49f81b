"""The runner process: `python -m crucible.toolkit.runner.main SOCKET_FD`, started by the judge.

    hello  -> apply rlimits and the filesystem allow-list to itself, before anything of a candidate loads
    load   -> import the kernel (candidate code starts to run here)
    bind   -> map the arena the judge sends (fd beside the message) as the call's input and output tensors
    call   -> one call, device synchronized, with this process's own time of it
    time   -> GPU: a batch of calls gated on the arena's handshake words (see toolkit/shared_memory.py)
    profile, trace, stop

It holds nothing worth stealing: no reference, no hidden config, no result channel of the engine. Every
reply is a claim that the judge checks; a reply it did not ask for ends the evaluation as the candidate's
failure. A candidate error is answered as `failed` with its own text; anything else ends the process.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import traceback
from typing import Any

from ..protocol import (
    MAX_MESSAGE_BYTES,
    REQUEST,
    Bind,
    Call,
    Called,
    Done,
    Failed,
    Hello,
    Load,
    Profile,
    Ready,
    Reply,
    Stop,
    TimeBatch,
    Timed,
    Trace,
    Traced,
)
from ..sandbox import apply_rlimits, restrict_filesystem

ERROR_CHARS = 12000


class Runner:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.kernels: dict[str, Any] = {}
        self.signatures: dict[str, Any] = {}
        self.arena: Any = None
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.sets: list[tuple[list[Any], list[Any]]] = []
        """Every input/output set of the arena (timed windows); inputs and outputs are the first."""
        self.device: Any = None

    # ------------------------------------------------------------------ wire

    def receive(self) -> tuple[Any, list[int]]:
        data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE_BYTES, 4)
        if not data:
            raise EOFError
        return REQUEST.validate_python(json.loads(data)), fds

    def send(self, reply: Reply) -> None:
        data = reply.model_dump_json().encode()
        if len(data) > MAX_MESSAGE_BYTES:  # the judge would refuse it: say why instead
            data = Failed(error=f"the runner's {reply.reply} reply ({len(data)} bytes) is over the "
                          f"{MAX_MESSAGE_BYTES}-byte limit").model_dump_json().encode()
        self.sock.send(data)

    # ------------------------------------------------------------------ requests

    def hello(self, req: Hello) -> None:
        isolation = apply_rlimits(req.rlimits)
        try:
            isolation["filesystem"] = restrict_filesystem(req.writable, req.readable)
        except OSError as exc:
            isolation["filesystem"] = f"NOT restricted: {exc}"
        isolation["user"] = f"uid {os.getuid()}, gid {os.getgid()}, effective capabilities {_effective_caps()}"
        import torch

        self.device = torch.device("cuda", 0) if req.device == "cuda" else torch.device("cpu")
        self.send(Ready(isolation=isolation))

    def load(self, req: Load) -> None:
        from .loading import load

        self.kernels[req.name] = load(req.kernel, req.signature, req.name)
        self.signatures[req.name] = req.signature
        self.send(Done())

    def bind(self, req: Bind, fds: list[int]) -> None:
        import torch

        from ..shared_memory import Arena

        if len(fds) != 1:
            raise RuntimeError(f"bind needs one arena fd, got {len(fds)}")
        if self.arena is not None:
            self.inputs, self.outputs, self.sets = [], [], []
            self.arena.close()
        self.arena = Arena.attach(fds[0], req.nbytes, self.device)
        self.sets = []
        for s in range(req.sets):
            views = [self.arena.tensor(s * req.set_bytes + t.offset, tuple(t.shape), getattr(torch, t.dtype))
                     for t in req.tensors]
            self.sets.append(([v for v, t in zip(views, req.tensors, strict=True) if t.role == "input"],
                              [v for v, t in zip(views, req.tensors, strict=True) if t.role == "output"]))
        self.inputs, self.outputs = self.sets[0]
        self.send(Done())

    def call(self, req: Call) -> None:
        import torch

        kernel = self.kernels[req.kernel] if req.kernel else None
        t0 = time.perf_counter()
        if kernel is not None:
            kernel(self.inputs, self.outputs, req.params)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.send(Called(seq=req.seq, us=(time.perf_counter() - t0) * 1e6))

    def time(self, req: TimeBatch) -> None:
        import torch

        from ..shared_memory import DONE_WORD, GO_WORD, wait_value, write_value

        kernel = self.kernels[req.kernel] if req.kernel else None
        stream = torch.cuda.current_stream()
        go, done = self.arena.word_address(GO_WORD), self.arena.word_address(DONE_WORD)
        if req.per_go > len(self.sets):
            raise RuntimeError(f"a window of {req.per_go} calls needs as many input sets; {len(self.sets)} bound")
        events = []
        for k in range(req.count):
            wait_value(stream, go, req.first_seq + k)
            for ins, outs in self.sets[:req.per_go]:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(stream)
                if kernel is not None:
                    kernel(ins, outs, req.params)
                b.record(stream)
                events.append((a, b))
            write_value(stream, done, req.first_seq + k)
            # One window queued at a time: work left queued in this context (a side stream waiting for the
            # next call) keeps the GPU here for a whole time slice (~2 ms) after `done`, which the judge's
            # clock would count (benchmarks/cross_process_timing.py); the judge's gate leaves time to queue.
            b.synchronize()
        torch.cuda.synchronize()
        self.send(Timed(first_seq=req.first_seq, us=[a.elapsed_time(b) * 1e3 for a, b in events]))

    def profile(self, req: Profile) -> None:
        from .profiler import profile_call

        kernel = self.kernels[req.kernel]
        kernel(self.inputs, self.outputs, req.params)  # warm: JIT compiles stay out of the profile
        self.send(profile_call(lambda: kernel(self.inputs, self.outputs, req.params), req.reps,
                               self.device.type == "cuda"))

    def trace(self, req: Trace) -> None:
        from pathlib import Path

        from ..toolchains.triton import _diagnostic_from_exception, compile_records, record_launches

        kernel = self.kernels[req.kernel]
        records: list = []
        failure = None
        log = ""
        try:
            record_launches(lambda: kernel(self.inputs, self.outputs, req.params), into=records)
        except Exception as exc:  # noqa: BLE001 - the candidate's error is a diagnostic for the agent
            failure = exc
            log = error_text(exc)
        source = Path(sys.modules.get(f"crucible_{req.kernel}").__file__ or ".")  # type: ignore[union-attr]
        kernels, diagnostics = compile_records(records, req.arch, source_dir=source.parent)
        if failure is not None:
            diag = _diagnostic_from_exception(failure, source.parent, source.name)
            if any(d.severity == "error" for d in diagnostics):  # Triton's own compile error says it better
                diag = diag.model_copy(update={"severity": "note", "message": f"while tracing: {diag.message}"})
            diagnostics.append(diag)
        elif records:
            log = "\n".join(f"{r.launches} x {r.describe()}" for r in records)
        diagnostics = [d.model_copy(update={"message": d.message[:1500]}) for d in diagnostics[:50]]
        self.send(Traced(kernels=[k.model_dump() for k in kernels][:50],
                         diagnostics=[d.model_dump() for d in diagnostics], log=log[-20000:]))

    # ------------------------------------------------------------------ loop

    def serve(self) -> None:
        while True:
            req, fds = self.receive()
            if isinstance(req, Stop):
                self.send(Done())
                return
            if isinstance(req, Hello):
                self.hello(req)
                continue
            try:
                if isinstance(req, Load):
                    self.load(req)
                elif isinstance(req, Bind):
                    self.bind(req, fds)
                elif isinstance(req, Call):
                    self.call(req)
                elif isinstance(req, TimeBatch):
                    self.time(req)
                elif isinstance(req, Profile):
                    self.profile(req)
                elif isinstance(req, Trace):
                    self.trace(req)
            except Exception as exc:  # noqa: BLE001 - candidate code raised: its own words go back
                text = error_text(exc)
                self.send(Failed(error=text, cuda_error=is_cuda_error(text), oom=is_oom(exc)))


def _effective_caps() -> str:
    """CapEff of /proc/self/status: 'none', or its hex mask."""
    try:
        with open("/proc/self/status") as f:
            line = next(ln for ln in f if ln.startswith("CapEff:"))
    except (OSError, StopIteration):
        return "unknown"
    mask = int(line.split()[1], 16)
    return "none" if mask == 0 else hex(mask)


def error_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text if len(text) <= ERROR_CHARS else text[:2000] + "\n...\n" + text[-(ERROR_CHARS - 2005):]


def is_oom(exc: BaseException) -> bool:
    # torch.OutOfMemoryError (CUDA) and the CPU allocator's RuntimeError are not MemoryErrors.
    names = {cls.__name__ for cls in type(exc).__mro__}
    return isinstance(exc, MemoryError) or "OutOfMemoryError" in names or "can't allocate memory" in str(exc)


def is_cuda_error(text: str) -> bool:
    return any(s in text for s in ("CUDA error", "illegal memory access", "cudaError", "device-side assert"))


def preload(device: str) -> None:
    """Before any request: torch, Triton and the CUDA context (trusted code; a runner may be started ahead
    of its job, and this is most of its start-up)."""
    import torch
    import triton  # noqa: F401

    torch.set_num_threads(1)  # one thread: the judge bounds a CPU call's time by the CPU time it used
    if device == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        # Triton's driver builds (or loads from the cache) its C helpers on first use: here, not in the
        # candidate's first call. A failure is left for that call to report.
        with contextlib.suppress(ImportError, RuntimeError, OSError, subprocess.SubprocessError):
            from triton.runtime import driver

            _ = driver.active.utils


def main() -> None:
    preload(os.environ.pop("CRUCIBLE_RUNNER_DEVICE", "cpu"))
    sock = socket.socket(fileno=int(sys.argv[1]))
    with contextlib.suppress(EOFError):  # EOF: the judge went away
        Runner(sock).serve()
    sys.stdout.flush()
    os._exit(0)  # no atexit handler of the candidate runs after the last reply


if __name__ == "__main__":
    main()
