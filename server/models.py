"""What the tools take and give: argument types and result models (each becomes an MCP schema).

Results are built from the engine's models (toolkit/results.py, toolkit/toolchains) by the `*_report`
functions below, which pass them through the session's AgentView (toolkit/agent_view.py: no hidden config,
no line of hidden.toml or the solution, no path outside the workspace, the agent's own frames first), then
keep what an agent acts on and drop what it cannot use (the worker's isolation details). The `profile` tool
returns toolkit/profiling.py's `Profile`, through the same view.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from crucible.toolkit.agent_view import AgentView
from crucible.toolkit.results import EVALUATOR_VERSION, ConfigResult, Evaluation, Status
from crucible.toolkit.toolchains import BuildResult, Diagnostic, KernelResources

# ---------------------------------------------------------------- arguments

ConfigName = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ConfigsArg = Annotated[list[ConfigName] | None, Field(
    default=None, min_length=1, max_length=64,
    description="Visible config names to test (see get_task); omit for all visible configs.")]
SeedsArg = Annotated[int | None, Field(
    default=None, ge=1, le=16, description="Random input sets per config (default: the task's).")]
ProfileConfigArg = Annotated[ConfigName | None, Field(
    default=None, description="The visible config to profile; omit for the task's first config.")]
NcuArg = Annotated[bool, Field(
    default=False, description="Also collect Nsight Compute counters (slow; only where `ncu` exists).")]
NoteArg = Annotated[str | None, Field(
    default=None, max_length=2000, description="Optional: what this version does, for the record.")]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _name_non_finite(x: object) -> object:
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


Value = Annotated[float | Literal["nan", "inf", "-inf"], BeforeValidator(_name_non_finite)]
"""A number that may be NaN or infinite (JSON has neither): those are sent as the strings."""


# ---------------------------------------------------------------- get_task


class Argument(Model):
    name: str
    role: Literal["input", "output", "param"]
    dtype: str
    """A dtype name; `{dtype}` means the config's `dtype` value. Params: their scalar type."""
    shape: list[int | str] | None = None
    """Outputs: each dimension a number or an expression over the config's values."""


class ConfigInfo(Model):
    name: str
    values: dict[str, int | float | str | bool]


class ToleranceInfo(Model):
    dtype: str
    atol: float
    rtol: float


class MetricsInfo(Model):
    flops: str
    """FLOPs of one call: an expression over config values."""
    bytes: str
    """Compulsory bytes moved by one call (each input read once, each output written once)."""


class DeviceView(Model):
    backend: str
    """cuda, rocm, or cpu (Triton's interpreter: correct, but timings are not comparable)."""
    arch: str
    """What compile targets (sm_90 on the cpu backend, for the resource report)."""
    timing_comparable: bool


class LimitsInfo(Model):
    worker_timeout_s: float
    """One evaluation worker's wall-clock limit; a kernel that runs longer ends as `timeout`."""
    memory_mb: int
    tool_limits_s: dict[str, float]
    """Each tool call's own limit, build included."""


class TaskInfo(Model):
    """The task as the agent may see it (never the hidden configs or the expert solution)."""

    id: str
    title: str
    category: str
    language: str
    prompt: str
    """PROMPT.md, the statement."""
    entry: str
    signature: str
    """How the harness calls your entry point."""
    calling_convention: str
    arguments: list[Argument]
    candidate_file: str
    """The file to edit, in the workspace."""
    baseline_file: str | None
    """X2X tasks: the given kernel (the speedup is measured against it)."""
    reference_file: str
    configs: list[ConfigInfo]
    """The visible configs. Hidden ones (other shapes, tails, dtypes) are scored after the session."""
    tolerances: list[ToleranceInfo]
    """Per output dtype: |out - ref| <= atol + rtol * |ref| elementwise; integers and bools compare exactly."""
    tolerance_reason: str
    seeds: int
    metrics: MetricsInfo
    forbidden_ops: list[str]
    device: DeviceView
    limits: LimitsInfo
    workspace: str


# ---------------------------------------------------------------- compile


class CompileReport(Model):
    ok: bool
    message: str
    language: str
    backend: str
    target: str
    """The architecture compiled for."""
    diagnostics: list[Diagnostic]
    """The compiler's messages, with file and line."""
    kernels: list[KernelResources]
    """Per kernel: registers, shared memory, spills."""
    log_tail: str
    seconds: float
    cached: bool
    source_hash: str


def compile_report(build: BuildResult, source_hash: str, view: AgentView) -> CompileReport:
    build = view.build(build)
    errors = [d for d in build.diagnostics if d.severity == "error"]
    if build.ok:
        message = f"compiled for {build.target.arch}: {len(build.kernels)} kernel(s)"
    elif errors:
        e = errors[0]
        message = f"does not compile: {e.file}:{e.line if e.line is not None else '?'}: {e.message}"
    else:
        message = "does not compile; see log_tail"
    return CompileReport(ok=build.ok, message=message, language=build.language, backend=build.target.backend,
                         target=build.target.arch, diagnostics=build.diagnostics, kernels=build.kernels,
                         log_tail=build.log, seconds=round(build.seconds, 3), cached=build.cached,
                         source_hash=source_hash)


# ---------------------------------------------------------------- run_tests


class MismatchAt(Model):
    output: str
    seed: int
    index: list[int]
    """Row-major index into the output."""
    got: Value
    """`nan` where the kernel left the element unwritten (outputs are poisoned with NaN)."""
    expected: Value


class ConfigReport(Model):
    config: str
    status: Literal["pass", "fail", "error", "skipped"]
    message: str
    max_abs_err: Value | None
    max_rel_err: Value | None
    first_mismatch: MismatchAt | None
    problems: list[str]
    """Rule violations other than wrong values (mutated inputs, replaced outputs, runs that disagree)."""
    integrity: list[str] = Field(default_factory=list)
    """What the runtime defences saw (`runtime:DEFENCE CONFIG: evidence`): in final scoring any but
    nondeterminism makes the verdict `flagged`."""
    candidate_us: float | None
    """Median time of your kernel, microseconds."""
    baseline_us: float | None
    speedup: float | None
    """baseline_us / candidate_us."""


class RunTestsReport(Model):
    status: Status
    """ok, incorrect, compile_error, crash, timeout, exit, oom, error, infra, not_run, cancelled."""
    message: str
    correct: bool | None
    """Every checked config passes; null when nothing ran."""
    configs: list[ConfigReport]
    speedup: float | None
    """Geometric mean over timed configs."""
    speedup_against: str | None
    """`baseline` (the given kernel) or `eager` (PyTorch)."""
    timing_comparable: bool
    timing_note: str
    diagnostics: list[Diagnostic]
    """When the candidate does not compile: the compiler's errors."""
    output_tail: str
    """When the kernel crashed or errored: the end of the worker's stderr."""
    backend: str
    source_hash: str
    seconds: float
    phases: dict[str, float] = Field(default_factory=dict)
    """Where the seconds went (build, worker, checks, timing)."""
    evaluator_version: str = EVALUATOR_VERSION


def _config_report(c: ConfigResult) -> ConfigReport:
    first = None
    for seed in c.seeds:
        bad = next((o for o in seed.outputs if o.first_mismatch is not None), None)
        if bad is not None and bad.first_mismatch is not None:
            m = bad.first_mismatch
            first = MismatchAt(output=bad.name, seed=seed.seed, index=m.index, got=m.got, expected=m.expected)
            break
    return ConfigReport(
        config=c.config, status=c.status, message=c.message, max_abs_err=c.max_abs_err,
        max_rel_err=c.max_rel_err, first_mismatch=first,
        problems=sorted({p for s in c.seeds for p in s.problems}), integrity=[f.flag() for f in c.integrity],
        candidate_us=c.candidate.median_us if c.candidate else None,
        baseline_us=c.baseline.median_us if c.baseline else None, speedup=c.speedup)


def run_tests_report(ev: Evaluation, view: AgentView) -> RunTestsReport:
    ev = view.evaluation(ev)  # its texts are cut to fit with the agent's own frames first: no more slicing
    if ev.timing_comparable:
        note = "timed on the device (quick timing; `profile` times carefully)"
    elif ev.backend == "cpu":
        note = "the cpu backend runs Triton's interpreter: timings say nothing about GPU speed"
    else:
        note = "no comparable timing"
    diagnostics = []
    if ev.build is not None:
        diagnostics = [Diagnostic.model_validate(d) for d in ev.build.get("diagnostics", [])
                       if d.get("severity") == "error"]
    crashed = ev.status in ("crash", "error", "exit", "oom", "timeout")
    return RunTestsReport(status=ev.status, message=ev.message, correct=ev.correct,
                      configs=[_config_report(c) for c in ev.configs], speedup=ev.speedup,
                      speedup_against=ev.speedup_against, timing_comparable=ev.timing_comparable,
                      timing_note=note, diagnostics=diagnostics,
                      output_tail=ev.stderr_tail if crashed else "", backend=ev.backend,
                      source_hash=ev.snapshot, seconds=round(ev.seconds, 3), phases=ev.phases)


# ---------------------------------------------------------------- submit


class SubmitReport(Model):
    accepted: bool
    submission: int
    """1, 2, ...: the last submission is your answer."""
    source_hash: str
    stored_at: str
    """A frozen copy of what was submitted, outside the workspace: later edits do not change it."""
    message: str
    verdict: RunTestsReport
    """The re-check on the visible configs (quick timing)."""
    hidden: str
