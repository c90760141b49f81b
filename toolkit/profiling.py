"""Profiles: careful timing, which kernels ran and for how long, resources, roofline, hardware counters.

    profile(task, snapshot, config)
        build (cached) -> worker job "profile": check once, time carefully against the baseline, then run
        the candidate under the PyTorch profiler to list its kernels -> roofline from the task's formulas and
        the device's ceilings -> optional Nsight Compute metrics (slow; only when asked and `ncu` exists)

What does not apply on a backend (kernel times and counters on the CPU) is said in `notes`. Without a
`config`, the largest visible config that can run on this backend is profiled (on the CPU, the largest the
interpreter takes); when none can, the profile is `not_run` and says why (needs a GPU, or too large).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from .evaluation import CPU_LIMIT, EvalRequest, fits_cpu, output_elements
from .results import ConfigResult, DeviceInfo, KernelTime, Model
from .task import Config, Task
from .toolchains import get_toolchain
from .worker import WorkerPool
from .workspace import Snapshot


class Roofline(Model):
    flops: float
    bytes: float
    seconds: float
    achieved_tflops: float
    achieved_gbps: float
    compute_fraction: float | None = None
    memory_fraction: float | None = None
    peak_fraction: float | None = None
    bound: Literal["memory", "compute"] | None = None
    """Which ceiling is nearer: the one to work against."""
    ceilings: str = ""
    """Where the ceilings come from (measured by `crucible calibrate`, or the built-in table)."""


class Profile(Model):
    task: str
    snapshot: str
    backend: str
    config: str
    status: str
    """`ok`, or the evaluation status that stopped the profile (compile_error, incorrect, crash, ...)."""
    message: str
    timing: ConfigResult | None = None
    """Careful timing of the candidate and the baseline on this config, with the speedup."""
    kernels: list[KernelTime] = Field(default_factory=list)
    kernel_total_us: float | None = None
    resources: list[dict] = Field(default_factory=list)
    """Registers, shared memory and spills per kernel, from the build (KernelResources)."""
    roofline: Roofline | None = None
    ncu: dict[str, dict[str, float | str]] | None = None
    """Per kernel: Nsight Compute metric -> value, when asked for and available."""
    notes: list[str] = Field(default_factory=list)
    device: DeviceInfo | None = None
    seconds: float = 0


# ---------------------------------------------------------------- the front door

def roofline(device: DeviceInfo | None, dtype: str | None, flops: float, nbytes: float,
             seconds: float) -> Roofline | None:
    from .hardware import ceilings_for

    if seconds <= 0:
        return None
    roof = Roofline(flops=flops, bytes=nbytes, seconds=seconds, achieved_tflops=flops / seconds / 1e12,
                    achieved_gbps=nbytes / seconds / 1e9)
    ceil = ceilings_for(device) if device is not None and device.backend != "cpu" else None
    if ceil is None:
        return roof
    rate = ceil.flops_per_s.get(dtype or "float32", ceil.flops_per_s["float32"])
    compute = flops / seconds / rate
    memory = nbytes / seconds / ceil.memory_bytes_per_s
    return roof.model_copy(update={"compute_fraction": compute, "memory_fraction": memory,
                                   "peak_fraction": max(compute, memory),
                                   "bound": "compute" if compute > memory else "memory",
                                   "ceilings": f"{ceil.name}: {ceil.source}"})


def profile(task: Task, snapshot: Snapshot, config: str | None = None, *, ncu: bool = False,
            backend: str = "auto", on_progress: Callable[[dict], None] | None = None,
            cancel: threading.Event | None = None, pool: WorkerPool | None = None) -> Profile:
    """Careful timing, kernel breakdown, resources and roofline of the candidate on one config (default:
    the largest visible one)."""
    from .evaluation import compile_error_message, compile_snapshot, evaluate, resolve_backend

    started = time.perf_counter()
    backend_ = resolve_backend(backend)
    if config is not None:
        task.config(config)  # raises KeyError naming the known configs
    runnable = runnable_configs(task, backend_)
    largest = max(task.spec.configs, key=lambda c: output_elements(task, c)).name
    name = config or (runnable[-1].name if runnable else largest)
    base = {"task": task.id, "snapshot": snapshot.digest, "backend": backend_, "config": name}
    notes: list[str] = []
    build = compile_snapshot(task, snapshot, backend_, cancel=cancel, pool=pool)
    resources = [k.model_dump() for k in build.kernels]
    if not build.ok:
        return Profile(**base, status="compile_error", message=compile_error_message(build),
                       resources=resources, seconds=time.perf_counter() - started)
    why = cannot_run(task, backend_, name, runnable, asked=config is not None)
    if why:
        return Profile(**base, status="not_run", message=why, resources=resources,
                       seconds=time.perf_counter() - started)
    request = EvalRequest(configs=[name], timing="careful", compiled_baseline=task.spec.is_torch_task,
                          backend=backend_, seeds=1)  # type: ignore[arg-type]
    evaluation = evaluate(task, snapshot, request, on_progress=on_progress, cancel=cancel,
                          profile_reps=PROFILE_REPS, pool=pool)
    result = evaluation.configs[0] if evaluation.configs else None
    if evaluation.status != "ok" or result is None or result.status != "pass":
        return Profile(**base, status=evaluation.status, message=evaluation.message, timing=result,
                       resources=resources, device=evaluation.device, seconds=time.perf_counter() - started)
    kernels = [KernelTime.model_validate(k) for k in evaluation.kernels.get(name, [])]
    cand = result.candidate
    seconds = cand.median_us * 1e-6 if cand is not None else 0.0
    roof = roofline(evaluation.device, task.config(name).dtype, result.flops, result.bytes, seconds)
    if backend_ == "cpu":
        notes.append("cpu backend: times are the Triton interpreter's, not comparable with a GPU; the kernel "
                     "list shows host ops, not device kernels; no roofline fraction or hardware counters")
    elif roof is not None and roof.peak_fraction is None:
        notes.append(f"no ceilings known for {evaluation.device.name if evaluation.device else 'this device'}: "
                     "run `crucible calibrate` to measure them")
    ncu_metrics = None
    if ncu:
        if backend_ != "cuda":
            notes.append("Nsight Compute needs an NVIDIA GPU: not run")
        elif shutil.which("ncu") is None:
            notes.append("Nsight Compute (`ncu`) is not on PATH: not run")
        else:
            ncu_metrics, note = run_ncu(task, snapshot, name, cancel=cancel, gpu=pool.gpu if pool else None)
            if note:
                notes.append(note)
    return Profile(**base, status="ok", message=evaluation.message, timing=result, kernels=kernels,
                   kernel_total_us=sum(k.total_us for k in kernels) if kernels else None, resources=resources,
                   roofline=roof, ncu=ncu_metrics, notes=notes, device=evaluation.device,
                   seconds=time.perf_counter() - started)


def runnable_configs(task: Task, backend: str) -> list[Config]:
    """The visible configs that can run on `backend`, smallest first: on the CPU, only Triton kernels
    run (in the interpreter), on configs small enough for it (as evaluation.evaluate skips the rest)."""
    configs = sorted(task.spec.configs, key=lambda c: output_elements(task, c))
    if backend != "cpu":
        return configs
    if not get_toolchain(task.spec.language).runs_on_cpu:
        return []
    return [c for c in configs if fits_cpu(task, c)]


def cannot_run(task: Task, backend: str, name: str, runnable: list[Config], asked: bool) -> str:
    """Why config `name` cannot be profiled on this backend; empty when it can."""
    if any(c.name == name for c in runnable):
        return ""
    if not get_toolchain(task.spec.language).runs_on_cpu:
        return (f"the {task.spec.language.upper()} kernel compiled (its resources are below), but running it "
                "needs a GPU, and this machine has none: the cpu backend runs Triton kernels only")
    if asked and runnable:
        return f"config {name} is {CPU_LIMIT}. Configs that run here: {', '.join(c.name for c in runnable)}"
    return f"every visible config is {CPU_LIMIT}" if not asked else f"config {name} is {CPU_LIMIT}"


PROFILE_REPS = 5
NCU_METRICS = ["gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed", "launch__registers_per_thread",
               "sm__warps_active.avg.pct_of_peak_sustained_active", "l1tex__t_bytes.sum", "dram__bytes.sum"]


def run_ncu(task: Task, snapshot: Snapshot, config: str, cancel: threading.Event | None = None,
            gpu: int | None = None) -> tuple[dict[str, dict[str, float | str]] | None, str]:
    """Run the candidate on one config under Nsight Compute in a worker; metrics per kernel."""
    from .evaluation import EvalRequest, _run, build, kernel_spec, resolve_backend

    built = build(task, snapshot.root, task.spec.candidate, "cuda")
    payload = {"task_root": str(task.root), "config": config, "metrics": NCU_METRICS,
               "snapshot_root": str(snapshot.root),
               "candidate": kernel_spec(task, built, snapshot.root / task.spec.candidate).model_dump()}
    outcome = _run(task, "ncu", payload, resolve_backend("cuda"), EvalRequest(backend="cuda", gpu=gpu), None, cancel)
    if outcome.status != "ok" or outcome.result is None:
        return None, f"Nsight Compute run failed: {outcome.message}"
    if outcome.result.get("error"):
        return None, f"Nsight Compute run failed: {outcome.result['error']}"
    return outcome.result["kernels"], ""
