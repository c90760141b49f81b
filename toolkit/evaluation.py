"""The engine's front door: build a snapshot, then check and time it with a judge and its runners.

    evaluate(task, snapshot, request)
        build (toolchains/, trusted: compilers only, no candidate code runs)
          -> judge job "evaluate" (an EvalJob, toolkit/protocol.py; toolkit/judge/, trusted)
               -> runners (toolkit/runner/, sandboxed): the candidate in one, the baseline in another
          -> Evaluation (results.py)

Every failure ends in a status and a message that says what happened and what to do; a crash, hang or
early exit of candidate code kills only its runner.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .devices import LeaseCancelled, gpu_lease
from .hardware import datasheet_for, limit_seconds, peak_fraction
from .integrity import finding as integrity_finding
from .protocol import CompileJob, EvalJob, KernelCache, KernelSpec
from .results import ConfigResult, DeviceInfo, Evaluation, KernelTime, Status
from .task import MAX_TIMEOUT_S, Config, Task, output_shape, task_metrics
from .toolchains import BuildResult, BuildTarget, Diagnostic, KernelResources, get_toolchain
from .toolchains.triton import cached_trace, content_key, jit_store, store_trace
from .worker import WorkerLimits, WorkerOutcome, WorkerPool, run_job
from .workspace import Snapshot, cache_root

Backend = Literal["cpu", "cuda", "rocm"]


class EvalRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    configs: list[str] | Literal["visible", "hidden", "all"] = "visible"
    """Config names, or a set of them."""
    seeds: int | None = Field(default=None, ge=1, le=16)
    """How many seeds per config (default: the task's)."""
    timing: Literal["none", "quick", "careful"] = "quick"
    compiled_baseline: bool = False
    """torch2X tasks: also time `torch.compile` of the reference (slow to compile)."""
    backend: Literal["auto", "cpu", "cuda", "rocm"] = "auto"
    gpu: int | None = None
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """Override the task's worker time limit."""
    timing_options: dict[str, float | int | bool] = Field(default_factory=dict)
    """Fields of TimingOptions over the timing's own (e.g. {"calls_per_window": 4}); unknown names are refused."""

    @field_validator("timing_options")
    @classmethod
    def _known_options(cls, value: dict[str, float | int | bool]) -> dict[str, float | int | bool]:
        from .timing import TimingOptions

        TimingOptions.model_validate(value)  # names and ranges, with the model's own message
        return value
    integrity: Literal["full", "checks", "off"] | None = None
    """The runtime defences (toolkit/integrity.py). `checks`: the float64 oracle, determinism, fresh values
    at the same addresses, patched functions; `full`: also a profiled call per config (own kernels,
    forbidden ops, the timing cross-check); `off`: none of these (to measure what they cost). None: `full`
    with careful timing, else `checks`, so `run_tests` stays quick; final scoring asks for `full`."""


@cache
def detect_backend() -> Backend:
    """`$CRUCIBLE_BACKEND`, else cuda when an NVIDIA GPU is visible, else rocm with hipcc, else cpu."""
    forced = os.environ.get("CRUCIBLE_BACKEND")
    if forced in ("cpu", "cuda", "rocm"):
        return forced  # type: ignore[return-value]
    if shutil.which("nvidia-smi") and _nvidia_arch() is not None:
        return "cuda"
    if shutil.which("rocminfo") and shutil.which("hipcc"):
        return "rocm"
    return "cpu"


@cache
def _nvidia_arch() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"sm_{out[0].replace('.', '')}" if out else None


def resolve_backend(requested: str) -> Backend:
    return detect_backend() if requested == "auto" else requested  # type: ignore[return-value]


def build_target(backend: Backend) -> BuildTarget:
    """What to compile for: the device's arch; on the cpu backend sm_90 (the H200), for the resource report."""
    arch = os.environ.get("CRUCIBLE_ARCH")
    if arch is None:
        arch = (_nvidia_arch() if backend == "cuda" else None) or ("gfx942" if backend == "rocm" else "sm_90")
    return BuildTarget(backend=backend, arch=arch)


def compile_error_message(build_result: BuildResult) -> str:
    first = next((d for d in build_result.diagnostics if d.severity == "error"), None)
    where = f" ({first.file}:{first.line}: {first.message})" if first else ""
    return f"the candidate does not compile{where}"


def build_dir() -> Path:
    return cache_root() / "builds"


def build(task: Task, source_dir: Path, file: str, backend: Backend) -> BuildResult:
    """Compile one source file of a snapshot (or of the trusted task folder) for this backend."""
    return get_toolchain(task.spec.language).build(source_dir, file, build_target(backend), build_dir())


def _worker_env() -> dict[str, str]:
    # The judge itself compiles no candidate kernel; runners get a private cache each (judge/link.py).
    triton_cache = cache_root() / "triton"
    triton_cache.mkdir(parents=True, exist_ok=True)
    return {"TRITON_CACHE_DIR": str(triton_cache)}


JUDGE_GRACE_S = 60.0
"""The judge outlives its runners' deadline by this much, so it can say what happened to them."""


def _limits(task: Task, timeout_s: float | None) -> WorkerLimits:
    lim = task.spec.limits
    return WorkerLimits(timeout_s=(timeout_s or lim.timeout_s) + JUDGE_GRACE_S, memory_mb=lim.memory_mb,
                        max_processes=lim.max_processes)


def kernel_spec(task: Task, build_result: BuildResult | None, source: Path) -> KernelSpec:
    """What a runner loads: the built artifact (a shared library), or the module itself."""
    chain = get_toolchain(task.spec.language)
    path = build_result.artifact if build_result is not None and chain.loader == "shared_library" else source
    return KernelSpec(language=task.spec.language, loader=chain.loader, path=str(path), entry=task.spec.entry)


def reference_spec(task: Task, compiled: bool = False) -> KernelSpec:
    """The torch2X baseline: the task's reference (its `compiled` twin through torch.compile)."""
    return KernelSpec(language="torch", loader="reference", path=str(task.file("reference.py")),
                      entry="reference", compiled=compiled)


def candidate_cache(task: Task, snapshot: Snapshot, backend: Backend, visible_only: bool) -> KernelCache | None:
    """The candidate's Triton builds by its snapshot's content; kept only from a runner that saw visible
    configs alone (toolkit/judge/triton_cache.py says why)."""
    if task.spec.language != "triton":
        return None
    store = jit_store(build_dir(), "candidate", snapshot.digest, build_target(backend))
    return KernelCache(store=str(store), keep=visible_only)


def baseline_cache(task: Task, spec: KernelSpec, backend: Backend) -> KernelCache | None:
    """The baseline's (or reference's) Triton builds: trusted task code, so always kept."""
    if task.spec.language != "triton":
        return None
    content = hashlib.sha256(task.id.encode() + b"\0" + Path(spec.path).read_bytes()).hexdigest()
    return KernelCache(store=str(jit_store(build_dir(), "baseline", content, build_target(backend))), keep=True)


def _config_names(task: Task, which: list[str] | str) -> list[str]:
    if isinstance(which, str):
        return [c.name for c in task.configs(which)]  # type: ignore[arg-type]
    for name in which:
        task.config(name)  # raises KeyError naming the known configs
    return list(which)


CPU_MAX_ELEMENTS = 1 << 18
CPU_MAX_BYTES = 1 << 25
"""The interpreter runs ~1e5 elements per second per kernel: configs past either bound are GPU-only (a
reduction's output is small, its input need not be)."""
CPU_LIMIT = (f"too large for the CPU interpreter (more than {CPU_MAX_ELEMENTS:,} output elements or "
             f"{CPU_MAX_BYTES >> 20} MiB of compulsory bytes); it runs on a GPU")


def output_elements(task: Task, config: Config) -> int:
    return sum(math.prod(output_shape(o, config)) for o in task.spec.signature.outputs)


def fits_cpu(task: Task, config: Config) -> bool:
    """Small enough for the CPU interpreter: evaluation, profiling and validation all skip the rest."""
    return (output_elements(task, config) <= CPU_MAX_ELEMENTS
            and task_metrics(task.spec, config)[1] <= CPU_MAX_BYTES)


OUTCOME_STATUS: dict[str, Status] = {"crash": "crash", "timeout": "timeout", "exit": "exit", "oom": "oom",
                                     "error": "error", "cancelled": "cancelled", "infra": "infra"}


def evaluate(task: Task, snapshot: Snapshot, request: EvalRequest | None = None, *,
             on_progress: Callable[[dict], None] | None = None,
             cancel: threading.Event | None = None, profile_reps: int = 0,
             pool: WorkerPool | None = None) -> Evaluation:
    """Build the snapshot, then check (and time) it on the requested configs in a fresh worker."""
    request = request or EvalRequest()
    started = time.perf_counter()
    backend = resolve_backend(request.backend)
    names = _config_names(task, request.configs)
    skipped: list[ConfigResult] = []
    if backend == "cpu":
        too_big = [n for n in names if not fits_cpu(task, task.config(n))]
        names = [n for n in names if n not in too_big]
        skipped = [ConfigResult(config=n, status="skipped", message=CPU_LIMIT) for n in too_big]
    base = {"task": task.id, "snapshot": snapshot.digest, "backend": backend}

    def finish(status: Status, message: str, **extra: object) -> Evaluation:
        return Evaluation(**base, status=status, message=message, seconds=time.perf_counter() - started,
                          **extra)  # type: ignore[arg-type]

    cand_build = build(task, snapshot.root, task.spec.candidate, backend)
    built = time.perf_counter()
    if not names and cand_build.ok:
        return finish("not_run", "every requested config is too large for this backend", configs=skipped,
                      build=cand_build.model_dump(mode="json"))
    build_dump = cand_build.model_dump(mode="json")
    if not cand_build.ok:
        return finish("compile_error", compile_error_message(cand_build), build=build_dump)
    if not get_toolchain(task.spec.language).runs_on_cpu and backend == "cpu":
        return finish("not_run", f"the {task.spec.language.upper()} kernel compiled for "
                      f"{cand_build.target.arch}; running it needs a GPU, and this machine has none "
                      "(the cpu backend runs Triton kernels only)", build=build_dump)

    baseline: KernelSpec | None = None
    if request.timing == "none":
        pass
    elif task.spec.is_torch_task:
        baseline = reference_spec(task)
    elif task.spec.baseline:
        base_build = build(task, task.root, task.spec.baseline, backend)
        if not base_build.ok:
            return finish("infra", f"the task's own baseline does not build: {base_build.log[-500:]}",
                          build=build_dump)
        baseline = kernel_spec(task, base_build, task.file(task.spec.baseline))
    lim = task.spec.limits
    visible_only = set(names) <= {c.name for c in task.spec.configs}
    job = EvalJob(
        task_root=str(task.root), snapshot_root=str(snapshot.root), configs=names,
        seeds=list(range(request.seeds or task.spec.seeds)),
        candidate=kernel_spec(task, cand_build, snapshot.root / task.spec.candidate), baseline=baseline,
        compiled_baseline=reference_spec(task, compiled=True) if request.compiled_baseline and
        task.spec.is_torch_task and request.timing != "none" else None,
        timing=request.timing, timing_options=request.timing_options, backend=backend, profile_reps=profile_reps,
        integrity=request.integrity or ("full" if request.timing == "careful" else "checks"),
        runner_timeout_s=request.timeout_s or lim.timeout_s, memory_mb=lim.memory_mb,
        max_processes=lim.max_processes, candidate_cache=candidate_cache(task, snapshot, backend, visible_only),
        baseline_cache=baseline_cache(task, baseline, backend) if baseline else None)
    outcome = _run(task, "evaluate", job.model_dump(mode="json"), backend, request, on_progress, cancel, pool)
    extra = {"build": build_dump, "isolation": outcome.isolation, "stderr_tail": outcome.stderr_tail}
    if outcome.status != "ok" or outcome.result is None:
        return finish(OUTCOME_STATUS.get(outcome.status, "error"), outcome.message, **extra)
    result = outcome.result
    if "infra" in result:
        return finish("infra", result["infra"], **extra)
    extra.update(isolation={**outcome.isolation, **result.get("isolation", {})},
                 stderr_tail=result.get("output_tail", ""))
    phases = {"build_s": round(built - started, 4), "worker_s": round(outcome.seconds, 4), **result.get("phases", {})}
    device = DeviceInfo.model_validate(result["device"])
    found = [integrity_finding("protocol", "", result["protocol"])] if "protocol" in result else []
    if "load_error" in result:
        return finish("error", "loading the candidate failed:\n" + result["load_error"], device=device,
                      integrity=found, **extra)
    configs = [with_peak_fraction(ConfigResult.model_validate(c), device, task)
               for c in result.get("configs", [])] + skipped
    kernels = {name: [KernelTime.model_validate(k) for k in rows] for name, rows in result.get("kernels", {}).items()}
    ended = result.get("ended")
    if ended:  # the candidate's runner died, hung or left: that is the evaluation's status
        status = ended["status"] if ended["status"] in OUTCOME_STATUS else "error"
        return finish(status, ended["message"], configs=configs, device=device, kernels=kernels,  # type: ignore[arg-type]
                      phases=phases, correct=False, **extra)
    return finish(*summarize(configs, task), configs=configs, device=device, kernels=kernels, phases=phases,
                  correct=all(c.status in ("pass", "skipped") for c in configs), **speedups(configs, task, backend), **extra)


def with_peak_fraction(result: ConfigResult, device: DeviceInfo, task: Task) -> ConfigResult:
    """Peak fractions are computed here, in the trusted parent, against the ceilings it knows (measured or
    built-in, for the roofline) and against the datasheet: the speed of light (the SOL score and the physics
    check)."""
    dtype, sheet = task.config(result.config).dtype, datasheet_for(device)
    sol_us = sheet and limit_seconds(sheet, dtype, result.flops, result.bytes) * 1e6
    cand = result.candidate
    if cand is None or not cand.comparable or cand.median_us <= 0:
        return result.model_copy(update={"sol_us": sol_us})
    # The time the speedup uses (the reported median, raised to the judge's bound): a runner that reports
    # a little under the judge's clock gains no SOL either. The physics check reads the reported median.
    seconds = (cand.scored_us or cand.median_us) * 1e-6
    return result.model_copy(update={
        "sol_us": sol_us, "peak_fraction": peak_fraction(device, dtype, result.flops, result.bytes, seconds),
        "sol_fraction": sol_us and sol_us * 1e-6 / seconds})


def _run(task: Task, kind: str, payload: dict, backend: Backend, request: EvalRequest,
         on_progress: Callable[[dict], None] | None, cancel: threading.Event | None,
         pool: WorkerPool | None = None) -> WorkerOutcome:
    gpu = request.gpu if request.gpu is not None else (0 if backend != "cpu" else None)
    if pool is not None and pool.backend == backend:
        gpu = pool.gpu  # the pool's judges were started on their GPU: the lease must be the same one
    try:
        with gpu_lease(backend, gpu, cancel):
            if pool is not None and pool.backend == backend:
                return pool.run_job(kind, payload, timeout_s=_limits(task, request.timeout_s).timeout_s,
                                    on_progress=on_progress, cancel=cancel)
            with tempfile.TemporaryDirectory(prefix="crucible-worker-") as scratch:
                return run_job(kind, payload, limits=_limits(task, request.timeout_s), backend=backend, gpu=gpu,
                               scratch=Path(scratch), env=_worker_env(), on_progress=on_progress, cancel=cancel)
    except LeaseCancelled as exc:
        return WorkerOutcome(status="cancelled", result=None, message=str(exc), exit_code=None, signal=None,
                             stderr_tail="", seconds=0.0, isolation={})


def summarize(configs: list[ConfigResult], task: Task) -> tuple[Status, str]:
    ran = [c for c in configs if c.status != "skipped"]
    errors = [c for c in configs if c.status == "error"]
    fails = [c for c in configs if c.status == "fail"]
    if errors:
        c = errors[0]
        return "error", f"config {c.config}: the candidate raised an error:\n{c.message}"
    if fails:
        c = fails[0]
        names = ", ".join(f.config for f in fails)
        return "incorrect", f"wrong on {len(fails)} of {len(ran)} configs ({names}); {c.config}: {c.message}"
    skipped = len(configs) - len(ran)
    return "ok", f"correct on all {len(ran)} configs" + (f" ({skipped} skipped)" if skipped else "")


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def speedups(configs: list[ConfigResult], task: Task, backend: str) -> dict:
    timed = [c for c in configs if c.speedup is not None]
    return {
        "speedup": geomean([c.speedup for c in timed if c.speedup]),
        "speedup_vs_compiled": geomean([c.speedup_vs_compiled for c in configs if c.speedup_vs_compiled]),
        "speedup_against": ("eager" if task.spec.is_torch_task else "baseline") if timed else None,
        "timing_comparable": bool(timed) and all(c.candidate is not None and c.candidate.comparable
                                                 for c in timed),
    }


def worker_pool(task: Task, backend: Backend | Literal["auto"] = "auto", gpu: int | None = None,
                spares: int = 2) -> WorkerPool:
    """A pool that keeps preloaded judges ahead of need for this task (the MCP server): with two, an
    agent's `compile` and the `run_tests` right after it each find one started."""
    backend = resolve_backend(backend)
    return WorkerPool(limits=_limits(task, None), backend=backend,
                      gpu=None if backend == "cpu" else gpu if gpu is not None else 0, env=_worker_env(),
                      spares=spares)


def judge_pool(backend: Backend, gpu: int | None = None) -> WorkerPool:
    """A pool of judges for any task (each job gets its task's time limit): final scoring keeps one per
    backend, so every evaluation but the first finds its judge and runners started."""
    return WorkerPool(limits=WorkerLimits(), backend=backend,
                      gpu=gpu if gpu is not None else (0 if backend != "cpu" else None), env=_worker_env())


def compile_snapshot(task: Task, snapshot: Snapshot, backend: Backend | Literal["auto"] = "auto",
                     cancel: threading.Event | None = None, pool: WorkerPool | None = None) -> BuildResult:
    """The `compile` tool: build, and for Triton also import, trace and compile each launched kernel
    for the target architecture (in a worker, since importing runs candidate code)."""
    backend = resolve_backend(backend)
    result = build(task, snapshot.root, task.spec.candidate, backend)
    if not get_toolchain(task.spec.language).traced_build or not result.ok:
        return result
    # The same snapshot of the same task traces the same way: answer from the earlier trace, no runner.
    # Its root is in the key too: a trace's log may name its files, and another session's path is not this one's.
    key = content_key("traced", task.id, json.dumps(task.spec.visible(), sort_keys=True), snapshot.digest,
                      str(snapshot.root), result.target.model_dump_json())
    earlier = cached_trace(build_dir(), key)
    if earlier is not None:
        return earlier.model_copy(update={"seconds": result.seconds})
    smallest = min(task.spec.configs, key=lambda c: sum(v for v in c.values.values()
                                                         if isinstance(v, int) and not isinstance(v, bool)))
    lim = task.spec.limits
    job = CompileJob(task_root=str(task.root), snapshot_root=str(snapshot.root), config=smallest.name,
                     candidate=kernel_spec(task, None, snapshot.root / task.spec.candidate), backend=backend,
                     arch=result.target.arch, runner_timeout_s=lim.timeout_s, memory_mb=lim.memory_mb,
                     max_processes=lim.max_processes,
                     candidate_cache=candidate_cache(task, snapshot, backend, visible_only=True))
    started = time.perf_counter()
    outcome = _run(task, "compile", job.model_dump(mode="json"), backend, EvalRequest(), None, cancel, pool)
    seconds = result.seconds + time.perf_counter() - started
    if outcome.status != "ok" or outcome.result is None:
        diag = Diagnostic(file=task.spec.candidate, line=None, column=None, severity="error",
                          message=f"tracing the kernels failed: {outcome.message}")
        return result.model_copy(update={"ok": False, "diagnostics": [*result.diagnostics, diag],
                                         "log": outcome.stderr_tail, "seconds": seconds})
    res = outcome.result
    diags = [Diagnostic.model_validate(d) for d in res["diagnostics"]]
    kernels = [KernelResources.model_validate(k) for k in res["kernels"]]
    traced = result.model_copy(update={"ok": not any(d.severity == "error" for d in diags),
                                       "diagnostics": [*result.diagnostics, *diags], "kernels": kernels,
                                       "log": res["log"], "seconds": seconds})
    if traced.ok:  # a failure may be passing (a timeout, a flaky import): traced again next time
        store_trace(build_dir(), key, traced)
    return traced
