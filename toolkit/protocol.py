"""The typed contracts across processes: the evaluation job (engine -> judge) and the judge <-> runner protocol.

    engine (trusted) ──EvalJob / CompileJob──▶ judge (trusted; never loads candidate code)
    judge ──Request──▶ runner (untrusted; one per kernel owner, fresh per evaluation)
    judge ◀──Reply─── runner        every reply is a claim: parsed here, checked by the judge against what it
                                    asked (kind, sequence number, counts, sizes) and what it measured itself

A runner speaks over one SOCK_SEQPACKET socket: one JSON message per packet, file descriptors (shared
arenas, toolkit/shared_memory.py) as SCM_RIGHTS beside the `bind` request. Both sides import this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_MESSAGE_BYTES = 128 << 10
MAX_SETS = 16
"""The most input/output sets an arena holds (calls in one timed window)."""
"""A reply longer than this is a protocol violation (a runner may not flood the judge); under the socket's
default buffer (about 208 KiB), which bounds one SOCK_SEQPACKET message anyway."""
Backend = Literal["cpu", "cuda", "rocm"]
Timing = Literal["none", "quick", "careful"]
IntegrityLevel = Literal["full", "checks", "off"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ------------------------------------------------------------------------------------------ kernels

class KernelSpec(Model):
    """What a runner loads: a file the language's loader understands and the function to call."""

    language: str
    """A key of toolkit/toolchains (triton, cuda, hip)."""
    loader: Literal["python_module", "shared_library", "reference"]
    """How it is called (toolchains declare theirs): a Python function, an `extern "C"` function of a
    shared library, or the task's PyTorch reference wrapped in the destination-passing call."""
    path: str
    entry: str
    compiled: bool = False
    """Wrap the function in torch.compile (the torch2X `compiled` baseline)."""


class ParamType(Model):
    name: str
    type: Literal["int32", "int64", "float32", "float64"]


class CallSignature(Model):
    """The destination-passing call: entry(*inputs, *outputs, **params) or its C form."""

    inputs: list[str]
    outputs: list[str]
    params: list[ParamType]


class KernelCache(Model):
    """Where one kernel's Triton builds are kept by content (toolkit/judge/triton_cache.py): its runner's
    private Triton cache starts as a copy of `store`, and what the runner compiled goes back only if `keep`."""

    store: str
    """A folder of the engine's cache named by the kernel's content and the toolchain's versions; never
    readable by a runner (it gets a copy)."""
    keep: bool
    """Harvest the runner's new builds into `store` when it ends: only for a trusted kernel (the baseline)
    or a candidate that saw nothing it may not show the agent (visible configs only), since a runner can
    write anything into its cache."""


# ------------------------------------------------------------------------------------------ the job

class EvalJob(Model):
    """Engine -> judge: check (and time) one snapshot on some configs."""

    task_root: str
    snapshot_root: str
    """The snapshot the runner may read (its only view of the agent's files)."""
    configs: list[str]
    seeds: list[int]
    candidate: KernelSpec
    baseline: KernelSpec | None
    """The X2X baseline kernel, the torch2X reference, or None (no timing)."""
    compiled_baseline: KernelSpec | None = None
    timing: Timing = "quick"
    backend: Backend
    profile_reps: int = 0
    """The profile tool: how many calls its kernel breakdown averages (0: none asked)."""
    integrity: IntegrityLevel = "checks"
    runner_timeout_s: float = 300
    memory_mb: int = 16384
    max_processes: int = 256
    timing_options: dict[str, float | int | bool] = Field(default_factory=dict)
    """Overrides of the TimingOptions chosen by `timing` (benchmarks only)."""
    candidate_cache: KernelCache | None = None
    """The candidate's Triton builds by content (None: a cold, private cache)."""
    baseline_cache: KernelCache | None = None


class CompileJob(Model):
    """Engine -> judge: trace a Triton candidate on the smallest visible config and compile its kernels."""

    task_root: str
    snapshot_root: str
    config: str
    candidate: KernelSpec
    backend: Backend
    arch: str
    runner_timeout_s: float = 120
    memory_mb: int = 16384
    max_processes: int = 256
    candidate_cache: KernelCache | None = None


# ------------------------------------------------------------------------------------------ requests

class TensorLayout(Model):
    name: str
    role: Literal["input", "output"]
    dtype: str
    shape: list[int]
    offset: int
    """Bytes into the arena's data region."""


class Hello(Model):
    """The first request: the sandbox the runner applies to itself before loading anything."""

    op: Literal["hello"] = "hello"
    device: Literal["cpu", "cuda"]
    readable: list[str]
    writable: list[str]
    rlimits: dict[str, int | list[int]]


class Load(Model):
    op: Literal["load"] = "load"
    name: str
    """The runner's name for this kernel (candidate, baseline, compiled)."""
    kernel: KernelSpec
    signature: CallSignature


class Bind(Model):
    """Map the arena whose fd rides with this message; the tensors are views into it. With `sets` > 1 the
    arena holds that many copies of the layout, `set_bytes` apart (timed windows of several calls, each on
    inputs of its own); checks and profiles use the first."""

    op: Literal["bind"] = "bind"
    nbytes: int
    tensors: list[TensorLayout]
    sets: int = Field(1, ge=1, le=MAX_SETS)
    set_bytes: int = Field(0, ge=0)


class Call(Model):
    """One call on the bound tensors; the runner synchronizes its device before replying."""

    op: Literal["call"] = "call"
    kernel: str | None
    """None: answer without calling anything (the judge measures the round trip's own cost)."""
    seq: int
    params: dict[str, int | float]


class TimeBatch(Model):
    """GPU: queue `count` windows, window k gated on the arena's go word reaching first_seq + k and followed
    by the done word set to it; a window is `per_go` calls back to back, call i on set i of the arena. The
    judge's stream refills the inputs and times each window from outside: the handshake's cost, the same
    for one call or several, is shared by `per_go` calls."""

    op: Literal["time"] = "time"
    kernel: str | None
    """None: an empty call (measures the handshake's own cost)."""
    first_seq: int
    count: int
    params: dict[str, int | float]
    per_go: int = Field(1, ge=1, le=MAX_SETS)


class Profile(Model):
    op: Literal["profile"] = "profile"
    kernel: str
    reps: int
    params: dict[str, int | float]


class Trace(Model):
    """The compile tool: record the Triton launches of one call, compile each for `arch`."""

    op: Literal["trace"] = "trace"
    kernel: str
    arch: str
    params: dict[str, int | float]


class Stop(Model):
    op: Literal["stop"] = "stop"


Request = Annotated[Hello | Load | Bind | Call | TimeBatch | Profile | Trace | Stop, Field(discriminator="op")]
REQUEST = TypeAdapter(Request)


# ------------------------------------------------------------------------------------------ replies

class Ready(Model):
    reply: Literal["ready"] = "ready"
    isolation: dict[str, str]


class Done(Model):
    """load, bind, stop: done."""

    reply: Literal["done"] = "done"


class Called(Model):
    reply: Literal["called"] = "called"
    seq: int
    us: float = Field(ge=0)
    """The runner's own measure of the call (a claim; the judge times the round trip itself)."""


class Timed(Model):
    reply: Literal["timed"] = "timed"
    first_seq: int
    us: list[Annotated[float, Field(ge=0)]]
    """Per call, the runner's device events around it (claims, bounded by the judge's own events)."""


class KernelClaim(Model):
    name: str
    us: float = Field(ge=0)
    """Device time per call (on the CPU: host time of the op)."""
    calls: float = Field(ge=0)
    elements: int = Field(default=0, ge=0)
    """CPU host ops: elements touched per call (the smallest tensor input of each run of the op, summed)."""


class Profiled(Model):
    reply: Literal["profiled"] = "profiled"
    kernels: list[KernelClaim] = Field(max_length=200)
    """Device kernels (on the CPU: host ops) of one call, as the runner's profiler saw them."""
    interpreter_launches: float | None = None
    """Triton's CPU interpreter: kernel launches per call."""
    ops: list[str] = Field(default_factory=list, max_length=200)
    """Host ops the call ran (aten::mm, ...), on every backend: for the task's forbidden ops."""


class Traced(Model):
    reply: Literal["traced"] = "traced"
    kernels: list[dict] = Field(max_length=50)
    """KernelResources (toolkit/toolchains) per compiled launch."""
    diagnostics: list[dict] = Field(max_length=50)
    log: str = Field(max_length=20000)


class Failed(Model):
    """The candidate raised (loading or calling it); `error` is its own text, shown to the agent filtered."""

    reply: Literal["failed"] = "failed"
    error: str = Field(max_length=20000)
    cuda_error: bool = False
    """The error left the CUDA context unusable (the runner cannot go on)."""
    oom: bool = False
    """It ran out of memory (host or device)."""


GPU_OOM_MARKS = ("CUDA out of memory", "HIP out of memory", "cudaErrorMemoryAllocation", "hipErrorOutOfMemory")


def is_gpu_oom(text: str) -> bool:
    """The text of an error from a GPU allocator that ran out (torch's caching allocator, the runtime's own)."""
    return any(mark in text for mark in GPU_OOM_MARKS)


Reply = Annotated[Ready | Done | Called | Timed | Profiled | Traced | Failed, Field(discriminator="reply")]
REPLY = TypeAdapter(Reply)


def runner_paths(snapshot_root: str | Path, *files: str | Path) -> list[str]:
    """What a runner may read besides the interpreter and libraries: its snapshot and named files."""
    return [str(Path(snapshot_root).resolve()), *(str(Path(f).resolve()) for f in files)]
