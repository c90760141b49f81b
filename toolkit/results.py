"""The result models of an evaluation, shared by the worker (which fills them) and the server and harness
(which read them). Everything an agent is told comes from these."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr

EVALUATOR_VERSION = "0.2.0"
"""Bump when checking or timing changes meaning; recorded with every result."""


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Mismatch(Model):
    index: list[int]
    """Where the first mismatch is (row-major index into the output)."""
    got: float
    expected: float


class OutputCheck(Model):
    name: str
    ok: bool
    max_abs_err: float
    max_rel_err: float
    mismatched: int
    """Elements outside the tolerance (NaN and Inf included)."""
    total: int
    unwritten: int
    """Elements still holding the poison the harness wrote before the run."""
    first_mismatch: Mismatch | None = None
    atol: float
    rtol: float
    p_value: float | None = None
    """Sampled outputs (check = "sample"): the chance that draws from the reference's probabilities look at
    least this unlike them (a Kolmogorov-Smirnov test); max_abs_err is its statistic D."""
    _transforms: list[Any] = PrivateAttr(default_factory=list)
    """Sampled outputs: the draws' two probability integral transforms (toolkit/checking.py), kept for a
    test pooled over every checked call of the config; never serialized."""


class SeedCheck(Model):
    seed: int
    ok: bool
    outputs: list[OutputCheck]
    problems: list[str] = Field(default_factory=list)
    """Rule violations other than wrong values: mutated inputs, replaced outputs, runs that disagree."""


Defence = Literal["input_mutation", "timed_recheck", "stale_results", "precision", "nondeterminism",
                  "no_own_kernel", "library_time", "forbidden_op", "timing_bound", "contention", "protocol",
                  "process_exit"]
AUDIT_ONLY: frozenset[str] = frozenset({"nondeterminism"})
"""Defences whose findings are flags for a person; every other finding makes the verdict `flagged`."""


class IntegrityFinding(Model):
    """A runtime defence saw something (toolkit/integrity.py): which defence, on which config, what."""

    defence: Defence
    config: str | None = None
    evidence: str

    @property
    def caught(self) -> bool:
        return self.defence not in AUDIT_ONLY

    def flag(self) -> str:
        return f"runtime:{self.defence}" + (f" {self.config}" if self.config else "") + f": {self.evidence}"


TimingMethod = Literal["gated_events", "cuda_graph", "cuda_events", "cpu_wall"]
"""gated_events: the runner's device events around each call, queued while gated by the judge (the
figure for candidates and baselines); cuda_graph, cuda_events: the judge's in-process timer (calibration);
cpu_wall: host clock."""


class TimingStats(Model):
    median_us: float
    min_us: float
    max_us: float
    iqr_us: float
    """Interquartile range: the spread of the middle half."""
    rse: float
    """Relative standard error of the median (the stopping rule's target)."""
    reps: int
    method: TimingMethod
    comparable: bool
    """False on the cpu backend: interpreter timings say nothing about GPU speed."""
    input_sets: int = 1
    """How many input sets the repetitions used: with the judge's timer every timed call had fresh inputs
    of its own; the in-process timer (calibration) rotates a few sets that overflow the L2."""
    overhead_us: float = 0
    """Subtracted: what an empty region measures (the runner's events around nothing, taken off every
    reported time), plus for `judged_us` the judge's handshake with the runner."""
    scored_us: float | None = None
    """What the speedup uses: the reported median, raised to the judge's bound when under it, and never
    under 0.5 us."""
    judged_us: float | None = None
    """The judge's own median per call, from its clock around the runner's work, net of `overhead_us`:
    the bound the reported median must agree with (else the finding `timing_bound`)."""


class ConfigResult(Model):
    config: str
    status: Literal["pass", "fail", "error", "skipped"]
    message: str = ""
    seeds: list[SeedCheck] = Field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    candidate: TimingStats | None = None
    baseline: TimingStats | None = None
    """The X2X baseline kernel, or eager PyTorch for torch2X tasks."""
    compiled: TimingStats | None = None
    """torch2X tasks: `torch.compile` of the reference."""
    speedup: float | None = None
    """baseline median / candidate median."""
    speedup_vs_compiled: float | None = None
    flops: float = 0
    bytes: float = 0
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    peak_fraction: float | None = None
    """Achieved rate over the device's ceiling (the larger of the compute and memory fractions)."""
    sol_us: float | None = None
    """Speed of light: the time one call would take at the device's datasheet limits, the larger of the
    task's bytes over the memory bandwidth and its flops over the dtype's peak; None for a device the
    datasheet table does not know (the CPU)."""
    sol_fraction: float | None = Field(default=None, validation_alias=AliasChoices("sol_fraction",
                                                                                    "datasheet_fraction"))
    """sol_us over the kernel's time: 1 is the limit, above 1 physically impossible. (Named
    `datasheet_fraction` in evaluations written before the speed-of-light score.)"""
    integrity: list[IntegrityFinding] = Field(default_factory=list)
    """What the runtime defences saw on this config (empty: nothing)."""


class KernelTime(Model):
    """One device kernel (or, on the CPU, one host op) of a call, from the profiler."""

    name: str
    calls: int
    """Launches per call of the entry point."""
    total_us: float
    """Time per call of the entry point spent in this kernel."""
    mean_us: float
    share: float
    """Fraction of the call's kernel time."""


class DeviceInfo(Model):
    backend: Literal["cpu", "cuda", "rocm"]
    name: str
    arch: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    torch: str
    triton: str | None = None
    cuda: str | None = None


Status = Literal["ok", "compile_error", "incorrect", "crash", "timeout", "exit", "oom", "error", "infra",
                 "not_run", "cancelled"]


class Evaluation(Model):
    """The answer to: does it build, is it right, how fast is it, can we trust that answer."""

    task: str
    snapshot: str
    backend: str
    status: Status
    message: str
    correct: bool | None = None
    """All checked configs pass; None when nothing ran."""
    configs: list[ConfigResult] = Field(default_factory=list)
    speedup: float | None = None
    """Geometric mean over timed configs of baseline / candidate."""
    speedup_vs_compiled: float | None = None
    speedup_against: str | None = None
    """What `speedup` compares with: `baseline` (the given kernel) or `eager` (PyTorch)."""
    timing_comparable: bool = False
    device: DeviceInfo | None = None
    build: dict | None = None
    """The BuildResult of the candidate (see toolkit/toolchains)."""
    integrity: list[IntegrityFinding] = Field(default_factory=list)
    """Findings that belong to no config (a protocol violation while loading)."""
    kernels: dict[str, list[KernelTime]] = Field(default_factory=dict)
    """Per config, when a profile was asked for: the kernels one call ran."""
    isolation: dict[str, str] = Field(default_factory=dict)
    stderr_tail: str = ""
    seconds: float = 0
    phases: dict[str, float] = Field(default_factory=dict)
    """Where `seconds` went: build_s and worker_s (the job's wall time, start-up included) here; inside the
    worker load_s, check_s, timing_s, and the defences' own work: oracle_s (float64 reference, determinism),
    integrity_s (the profiled calls), recheck_s (fresh values in the timed path). For turnaround work and
    the defences' cost, not scores."""
    evaluator_version: str = EVALUATOR_VERSION
