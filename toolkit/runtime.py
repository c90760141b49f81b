"""Inside the evaluation worker: load the candidate, check it against the reference, time it.

    for each config:
        for each seed:   inputs (random offset and scale) -> candidate -> reference (on a clone) -> candidate
                         outputs poisoned before each candidate run; inputs checked for mutation;
                         outputs checked for replacement; reference outputs kept alive throughout
        if every seed passed and timing was asked for:
                         candidate and baseline interleaved over rotated input sets (toolkit/timing.py),
                         then the timed path is re-run once and its outputs re-checked

This module runs untrusted code; it only ever reports through the worker's private channel.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import math
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import integrity
from .checking import compare, describe, poison_
from .results import ConfigResult, DeviceInfo, IntegrityFinding, SeedCheck, TimingStats
from .task import Config, Task, load_task, output_shape, resolve_dtype, task_metrics
from .timing import CAREFUL, QUICK, TimingOptions, time_subjects

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
          "uint8": torch.uint8, "bool": torch.bool}
CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}

_perf_counter = time.perf_counter  # bound before candidate code runs (it may patch time.perf_counter)

Kernel = Callable[[list[torch.Tensor], list[torch.Tensor], dict[str, Any]], None]
"""Destination-passing call: kernel(inputs, outputs, params)."""


class CandidateError(Exception):
    """The candidate could not be loaded or called as the task's signature says."""


# ---------------------------------------------------------------- loading

def import_file(path: Path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CandidateError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's jit resolves globals through the module
    spec.loader.exec_module(module)
    return module


def python_kernel(path: Path, entry: str, module_name: str) -> Kernel:
    module = import_file(path, module_name)
    fn = getattr(module, entry, None)
    if not callable(fn):
        raise CandidateError(f"{path.name} defines no function {entry!r}; the task's entry point is {entry}(...)")

    def call(inputs: list[torch.Tensor], outputs: list[torch.Tensor], params: dict[str, Any]) -> None:
        returned = fn(*inputs, *outputs, **params)
        if returned is not None:
            raise CandidateError(f"{entry}() returned a value; write the results into the output tensors "
                                 "it is given and return None")
    return call


def library_kernel(path: Path, entry: str, task: Task) -> Kernel:
    """A CUDA/HIP shared library exporting `extern "C" int entry(ptrs..., params..., stream)`."""
    lib = ctypes.CDLL(str(path))
    try:
        fn = getattr(lib, entry)
    except AttributeError:
        raise CandidateError(f"the library exports no function {entry!r}: declare it "
                             f'`extern "C" int {entry}(...)`') from None
    sig = task.spec.signature
    fn.restype = ctypes.c_int
    fn.argtypes = ([ctypes.c_void_p] * (len(sig.inputs) + len(sig.outputs))
                   + [CTYPES[p.type] for p in sig.params] + [ctypes.c_void_p])

    def call(inputs: list[torch.Tensor], outputs: list[torch.Tensor], params: dict[str, Any]) -> None:
        stream = torch.cuda.current_stream().cuda_stream if inputs[0].is_cuda else 0
        args = [t.data_ptr() for t in inputs + outputs] + [params[p.name] for p in sig.params] + [stream]
        code = fn(*args)
        if code != 0:
            raise CandidateError(f"{entry}() returned error code {code}: {cuda_error_name(code)}")
    return call


def cuda_error_name(code: int) -> str:
    try:
        return str(torch.cuda.cudart().cudaGetErrorString(code))
    except (RuntimeError, AttributeError):
        return "unknown error"


def reference_kernel(module: types.ModuleType, task: Task) -> Kernel:
    """The PyTorch reference wrapped in the candidates' calling convention (the torch2X baseline)."""
    def call(inputs: list[torch.Tensor], outputs: list[torch.Tensor], params: dict[str, Any]) -> None:
        results = as_tuple(module.reference(*inputs, **params))
        for out, res in zip(outputs, results, strict=True):
            out.copy_(res)
    return call


def as_tuple(value: object) -> tuple[torch.Tensor, ...]:
    return tuple(value) if isinstance(value, tuple | list) else (value,)  # type: ignore[arg-type]


def load_kernel(desc: dict, task: Task, name: str) -> Kernel:
    """desc: {"language", "path", "entry"} from the parent (a built library, or a Python module)."""
    path = Path(desc["path"])
    if desc["language"] == "triton":
        sys.path.insert(0, str(path.parent))  # a candidate may import its own helper modules
        return python_kernel(path, desc["entry"], name)
    return library_kernel(path, desc["entry"], task)


# ---------------------------------------------------------------- inputs and outputs

class Case:
    """One config on one seed: inputs, poisoned outputs, params."""

    def __init__(self, task: Task, ref: types.ModuleType, config: Config, seed: int, device: torch.device):
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        made = ref.make_inputs(dict(config.values), gen, device)
        sig = task.spec.signature
        missing = [t.name for t in sig.inputs if t.name not in made]
        if missing:
            raise RuntimeError(f"reference.make_inputs gave no {missing} for config {config.name}")
        # A random offset and scale per seed: an identity or approximate kernel cannot hide under it.
        pert = torch.Generator().manual_seed(seed * 7919 + 17)
        self.input_names = [t.name for t in sig.inputs]
        self.inputs = []
        for spec in sig.inputs:
            t = made[spec.name]
            if spec.perturb and t.dtype.is_floating_point:
                scale = math.exp(float(torch.empty(1).uniform_(-0.7, 0.7, generator=pert)))
                offset = float(torch.empty(1).uniform_(-0.5, 0.5, generator=pert))
                t = (t.float() * scale + offset).to(t.dtype)
            self.inputs.append(t.contiguous())
        self.params = {p.name: config.values[p.name] for p in sig.params}
        self.out_specs = [(output_shape(o, config), DTYPES[resolve_dtype(o.dtype, config)]) for o in sig.outputs]
        self.device = device

    def new_outputs(self) -> list[torch.Tensor]:
        outs = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.out_specs]
        for t in outs:
            poison_(t)
        return outs

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.inputs)


def _fingerprint(t: torch.Tensor) -> tuple:
    return (type(t), t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device)


def _bits(t: torch.Tensor) -> torch.Tensor:
    # reshape(-1) first: a "contiguous" tensor may keep odd strides on size-1 dimensions, which view(dtype)
    # refuses; the flat copy or view has stride 1.
    return t.detach().contiguous().reshape(-1).view(torch.uint8) if t.dtype != torch.bool else t.detach().clone()


def run_checked(kernel: Kernel, case: Case, outputs: list[torch.Tensor]) -> list[tuple[str, str]]:
    """Call the kernel once; return rule violations as (defence, what it saw): mutated inputs, replaced
    outputs."""
    before_in = [_bits(t).clone() for t in case.inputs]
    prints = [_fingerprint(t) for t in outputs]
    for t in outputs:
        poison_(t)
    kernel(case.inputs, outputs, case.params)
    if case.device.type == "cuda":
        torch.cuda.synchronize()  # surface asynchronous errors here, attributed to the candidate
    problems = []
    for name, t, b in zip(case.input_names, case.inputs, before_in, strict=True):
        if not torch.equal(_bits(t), b):
            problems.append(("input_mutation", f"the candidate modified input {name!r}; inputs are read-only"))
    for i, (t, fp) in enumerate(zip(outputs, prints, strict=True)):
        if _fingerprint(t) != fp:
            problems.append(("output_replaced",
                             f"output #{i} was resized, re-pointed or replaced; write into it in place"))
    return problems


class Laps:
    """Seconds per phase of one job: `lap(phase)` adds the time since the previous lap to `phase`. The
    defences' own work has phases of its own (oracle_s, integrity_s, recheck_s), so their cost is read off
    an evaluation directly."""

    def __init__(self) -> None:
        self.clock = _perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = _perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.clock
        self.clock = now


# ---------------------------------------------------------------- one config

def check_config(task: Task, ref: types.ModuleType, kernel: Kernel, config: Config, seeds: list[int],
                 device: torch.device, oracles: bool = True,
                 laps: Laps | None = None) -> tuple[list[SeedCheck], list[IntegrityFinding]]:
    """Returns the per-seed checks and what the runtime defences saw (rule violations; on the first seed,
    precision and determinism)."""
    checks = []
    findings: list[IntegrityFinding] = []
    names = [o.name for o in task.spec.signature.outputs]
    for seed in seeds:
        case = Case(task, ref, config, seed, device)
        outs_before = case.new_outputs()
        problems = run_checked(kernel, case, outs_before)
        # The reference's outputs stay alive while the candidate runs again, so memory the reference freed
        # cannot hand the candidate a ready answer.
        refs = reference_outputs(ref, case)
        outs_after = case.new_outputs()
        problems += run_checked(kernel, case, outs_after)
        findings += [integrity.finding(d, config.name, text) for d, text in sorted(set(problems))]
        outputs = []
        for (spec, before, after, r) in zip(task.spec.signature.outputs, outs_before, outs_after, refs,
                                            strict=True):
            tol = task.spec.tolerance.for_dtype(resolve_dtype(spec.dtype, config))
            c_before = compare(spec.name, before, r, tol.atol, tol.rtol)
            c_after = compare(spec.name, after, r, tol.atol, tol.rtol)
            # Before and after the reference must both be right: report the first that is not.
            outputs.append(c_after if c_before.ok else c_before)
        texts = sorted({text for _, text in problems})
        ok = all(o.ok for o in outputs) and not texts
        checks.append(SeedCheck(seed=seed, ok=ok, outputs=outputs, problems=texts))
        if seed == seeds[0] and ok and oracles:  # the oracles mean something only on outputs that passed
            if laps:
                laps.lap("check_s")
            findings += integrity.precision_findings(ref.reference, case.inputs, case.params, outs_after,
                                                     refs, names, config.name)
            findings += integrity.nondeterminism_findings(outs_before, outs_after, names, config.name)
            if laps:
                laps.lap("oracle_s")
    return checks, _unique(findings)


def reference_outputs(ref: types.ModuleType, case: Case) -> list[torch.Tensor]:
    """The reference's outputs on the case's inputs; it works on clones, so it cannot disturb them."""
    with torch.no_grad():
        return [r.detach() for r in as_tuple(ref.reference(*[t.clone() for t in case.inputs], **case.params))]


def _unique(findings: list[IntegrityFinding]) -> list[IntegrityFinding]:
    seen, out = set(), []
    for f in findings:
        if (f.defence, f.evidence) not in seen:
            seen.add((f.defence, f.evidence))
            out.append(f)
    return out


def time_config(task: Task, ref: types.ModuleType, subjects_k: dict[str, Kernel], config: Config,
                case0: Case, refs0: list[torch.Tensor], opts: TimingOptions,
                device: torch.device, fresh_recheck: bool = True,
                laps: Laps | None = None) -> tuple[dict[str, TimingStats], IntegrityFinding | None]:
    """Interleaved timing over rotated input sets; returns stats and what the re-checks of the timed path
    found, if anything: a wrong result on the checked inputs (timed_recheck), or on fresh values written
    into the same input buffers (stale_results: results memoized on input identity)."""
    per_set = max(case0.nbytes(), 1)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 0
    n_sets = 1 if device.type != "cuda" else max(2, min(8, math.ceil(2 * l2 / per_set)))
    if per_set * n_sets > (8 << 30):
        n_sets = 1
    cases = [case0] + [Case(task, ref, config, 1000 + i, device) for i in range(1, n_sets)]
    outs = {name: [c.new_outputs() for c in cases] for name in subjects_k}
    subjects = {name: (lambda i, k=k, o=outs[name]: k(cases[i].inputs, o[i], cases[i].params))
                for name, k in subjects_k.items()}
    stats, timed = time_subjects(subjects, n_sets, opts, device)
    # Re-check what the timed path computed (a graph replay may differ from the checked call).
    wrong = _recheck(task, config, timed["candidate"], outs["candidate"][0], refs0, device)
    if wrong:
        return stats, integrity.finding(
            "timed_recheck", config.name, "the timed runs (CUDA-graph replays of the call) computed a wrong "
            f"result: {wrong}. Launch all work on the current stream (or join side streams back to it)")
    if not fresh_recheck:
        return stats, None
    if laps:
        laps.lap("timing_s")
    found = _fresh_recheck(task, ref, config, case0, refs0, timed["candidate"], outs["candidate"][0], device)
    if laps:
        laps.lap("recheck_s")
    return stats, found


def _fresh_recheck(task: Task, ref: types.ModuleType, config: Config, case0: Case, refs0: list[torch.Tensor],
                   run: Callable[[int], None], outs: list[torch.Tensor],
                   device: torch.device) -> IntegrityFinding | None:
    """Fresh values at the same addresses: an honest kernel follows them, a memoized one does not."""
    fresh = Case(task, ref, config, 777_777, device)
    for dst, src in zip(case0.inputs, fresh.inputs, strict=True):
        dst.copy_(src)
    del fresh
    refs_fresh = reference_outputs(ref, case0)
    wrong = _recheck(task, config, run, outs, refs_fresh, device)
    if not wrong:
        return None
    # Stale: what came out is the answer to the old values. Otherwise the kernel is merely wrong on these
    # values (e.g. a precision shortcut that misses the tolerance on another draw).
    stale = _first_wrong(task, config, outs, refs0) is None
    return integrity.finding(
        "stale_results" if stale else "timed_recheck", config.name,
        ("new values written into the same input buffers gave the result for the old ones: "
         f"{wrong}. Compute from the inputs on every call; never cache results between calls") if stale else
        f"the timed path computed a wrong result on fresh input values: {wrong}")


def _recheck(task: Task, config: Config, run: Callable[[int], None], outs: list[torch.Tensor],
             refs: list[torch.Tensor], device: torch.device) -> str | None:
    """Poison the outputs of input set 0, run the timed path once, compare; None when right."""
    for t in outs:
        poison_(t)
    run(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return _first_wrong(task, config, outs, refs)


def _first_wrong(task: Task, config: Config, outs: list[torch.Tensor], refs: list[torch.Tensor]) -> str | None:
    """The first output outside the tolerance, described; None when all are right."""
    for spec, out, r in zip(task.spec.signature.outputs, outs, refs, strict=True):
        tol = task.spec.tolerance.for_dtype(resolve_dtype(spec.dtype, config))
        check = compare(spec.name, out, r, tol.atol, tol.rtol)
        if not check.ok:
            return describe(check)
    return None


def device_info(device: torch.device) -> DeviceInfo:
    import triton

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        major, minor = torch.cuda.get_device_capability(device)
        return DeviceInfo(backend="cuda", name=props.name, arch=f"sm_{major}{minor}",
                          sm_count=props.multi_processor_count, l2_bytes=int(props.L2_cache_size),
                          torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda)
    return DeviceInfo(backend="cpu", name="cpu (Triton interpreter)", torch=torch.__version__,
                      triton=triton.__version__)


def _error_text(exc: BaseException, limit: int = 3000) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-limit:]


# ---------------------------------------------------------------- the job

def run_evaluation(payload: dict, progress: Callable[[dict], None]) -> dict:
    """Worker job "evaluate". Payload: task_root, configs (names), seeds, candidate {language, path,
    entry}, baseline (same shape, or "reference" for torch2X, or None), timing ("none"|"quick"|
    "careful"), compiled_baseline (bool), backend."""
    laps = Laps()
    lap = laps.lap
    task = load_task(Path(payload["task_root"]))
    device = torch.device("cuda" if payload["backend"] == "cuda" else "cpu")
    info = device_info(device)
    torch.manual_seed(0)
    ref = import_file(task.file("reference.py"), "crucible_reference")
    trusted = integrity.runtime_snapshot()
    defences = payload.get("integrity", "checks")
    try:
        candidate = load_kernel(payload["candidate"], task, "crucible_candidate")
    except (MemoryError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as exc:  # import-time failures of candidate code are the candidate's
        return {"device": info.model_dump(), "load_error": _error_text(exc)}
    baseline_desc = payload.get("baseline")
    baseline: Kernel | None = None
    if baseline_desc == "reference":
        baseline = reference_kernel(ref, task)
    elif baseline_desc:
        baseline = load_kernel(baseline_desc, task, "crucible_baseline")
    lap("load_s")
    opts = {"quick": QUICK, "careful": CAREFUL}.get(payload.get("timing", "none"))
    if opts is not None and payload.get("timing_options"):
        opts = opts.model_copy(update=payload["timing_options"])

    configs = [task.config(name) for name in payload["configs"]]
    on_gpu = device.type == "cuda"
    results: dict[str, ConfigResult] = {}
    poisoned: str | None = None  # the config of a sticky CUDA error: the context is lost, nothing more runs

    def failed(name: str, exc: Exception, what: str = "") -> None:
        nonlocal poisoned
        results[name] = results[name].model_copy(update={"status": "error", "message": what + _error_text(exc)})
        if on_gpu and "CUDA error" in str(exc):
            poisoned = poisoned or name

    # Three passes: correctness on every config, then one profiled session over the configs that passed,
    # then timing. Each pass makes its inputs afresh (seed 0 again for the timed set): keeping every
    # config's inputs alive between passes would not fit in memory.
    steps = len(configs) * (2 if opts is not None else 1)  # progress: the checks, then the timing, per config
    for n, config in enumerate(configs):
        progress({"stage": "config", "config": config.name, "done": n, "total": steps})
        flops, nbytes = task_metrics(task.spec, config)
        results[config.name] = ConfigResult(config=config.name, status="pass", flops=flops, bytes=nbytes)
        try:
            seeds, findings = check_config(task, ref, candidate, config, payload["seeds"], device,
                                           oracles=defences != "off", laps=laps)
        except (MemoryError, torch.cuda.OutOfMemoryError):
            raise  # the worker reports these as "oom"
        except Exception as exc:  # the candidate raised, or a CUDA error surfaced during its run
            failed(config.name, exc)
            if poisoned:
                break
            continue
        finally:
            lap("check_s")
        bad = [s for s in seeds if not s.ok]
        worst = [o for s in seeds for o in s.outputs]
        if defences != "off":
            findings += integrity.patched_findings(trusted, config.name)
        update: dict[str, Any] = {"seeds": seeds, "integrity": findings,
                                  "max_abs_err": max(o.max_abs_err for o in worst),
                                  "max_rel_err": max(o.max_rel_err for o in worst)}
        if bad:
            s = bad[0]
            why = s.problems + [describe(o) for o in s.outputs if not o.ok]
            update.update(status="fail", message=f"seed {s.seed}: " + "; ".join(why))
        results[config.name] = results[config.name].model_copy(update=update)

    def still_passing() -> list[Config]:
        return [c for c in configs if not poisoned and c.name in results and results[c.name].status == "pass"]

    profiles: dict[str, dict[str, Any]] = {}
    kernel_profiles: dict[str, list[dict]] = {}
    profile_reps = int(payload.get("profile_reps") or 0)
    if opts is not None and (defences == "full" or profile_reps) and still_passing():
        # What one call runs, before timing, on unchanged inputs: for the defences and the profile tool.
        progress({"stage": "integrity" if defences == "full" else "profile", "done": len(configs), "total": steps})

        def prepared_call(name: str) -> Callable[[], None]:
            case = Case(task, ref, task.config(name), 0, device)
            return functools.partial(candidate, case.inputs, case.new_outputs(), case.params)

        profiles, errors = integrity.profile_calls([c.name for c in still_passing()], prepared_call, device,
                                                   reps=max(profile_reps, 3 if on_gpu else 1))
        for name, exc in errors.items():
            failed(name, exc, "profiled call failed: ")
        for name, prof in profiles.items():
            if profile_reps:  # the `profile` tool's breakdown, from the same profiled calls
                kernel_profiles[name] = kernel_breakdown(prof, on_gpu)
            if defences == "full":
                seen = integrity.what_ran_findings(prof, list(task.spec.forbid_ops), task.spec.language, on_gpu,
                                                   name)
                results[name] = results[name].model_copy(update={"integrity": results[name].integrity + seen})
        lap("integrity_s")

    subjects = {"candidate": candidate}
    if baseline is not None:
        subjects["baseline"] = baseline
    if payload.get("compiled_baseline") and task.spec.is_torch_task:
        compiled_ref = types.SimpleNamespace(reference=torch.compile(ref.reference))
        subjects["compiled"] = reference_kernel(compiled_ref, task)  # type: ignore[arg-type]
    for config in still_passing() if opts is not None else []:
        if poisoned:
            break
        progress({"stage": "timing", "config": config.name, "total": steps,
                  "done": len(configs) + configs.index(config)})
        result = results[config.name]
        try:
            case0 = Case(task, ref, config, 0, device)
            stats, recheck = time_config(task, ref, subjects, config, case0, reference_outputs(ref, case0), opts,
                                         device, fresh_recheck=defences != "off", laps=laps)
        except (MemoryError, torch.cuda.OutOfMemoryError):
            raise
        except Exception as exc:
            failed(config.name, exc, "timing failed: ")
            lap("timing_s")
            continue
        cand = stats["candidate"]
        findings = list(result.integrity)
        update = {"candidate": cand, "baseline": stats.get("baseline"), "compiled": stats.get("compiled")}
        if recheck:
            findings.append(recheck)
            update.update(status="fail", message=recheck.evidence)
        elif defences == "full" and config.name in profiles and cand.comparable:
            findings += integrity.crosscheck_findings(profiles[config.name], cand.median_us, config.name)
        update["integrity"] = findings
        if "baseline" in stats:
            update["speedup"] = stats["baseline"].median_us / max(cand.median_us, 1e-9)
        if "compiled" in stats:
            update["speedup_vs_compiled"] = stats["compiled"].median_us / max(cand.median_us, 1e-9)
        if cand.median_us > 0:
            update["achieved_tflops"] = result.flops / (cand.median_us * 1e-6) / 1e12
            update["achieved_gbps"] = result.bytes / (cand.median_us * 1e-6) / 1e9
        results[config.name] = result.model_copy(update=update)
        lap("timing_s")
    for name in list(kernel_profiles):
        if results[name].status != "pass":
            del kernel_profiles[name]  # a breakdown of a wrong kernel says nothing useful
    if poisoned and opts is not None:  # correct, but the lost context left them untimed: say so
        for name, result in results.items():
            if result.status == "pass" and result.candidate is None:
                results[name] = result.model_copy(update={
                    "message": f"not timed: a CUDA error on config {poisoned} lost the GPU context"})
    progress({"stage": "done", "done": steps, "total": steps})
    return {"device": info.model_dump(), "configs": [r.model_dump() for r in results.values()],
            "kernels": kernel_profiles, "phases": {k: round(v, 4) for k, v in laps.seconds.items()}}


def kernel_breakdown(prof: dict[str, Any], on_gpu: bool) -> list[dict]:
    """From a profiled call (integrity.profile_calls): which device kernels one call launches and how long
    each takes, or on the CPU the host ops the interpreter spends its time in. KernelTime-shaped dicts."""
    times, calls = (prof["kernels"], prof["kernel_calls"]) if on_gpu else (prof["host_us"], prof["host_calls"])
    rows = [{"name": name, "calls": max(1, round(calls[name])), "total_us": us,
             "mean_us": us / max(calls[name], 1e-9)} for name, us in times.items() if us > 0]
    grand = sum(r["total_us"] for r in rows) or 1.0
    rows.sort(key=lambda r: -r["total_us"])
    for r in rows:
        r["share"] = r["total_us"] / grand
    return rows[:30]


def run_triton_build(payload: dict, progress: Callable[[dict], None]) -> dict:
    """Worker job "triton_build": import the candidate, record the Triton kernels its entry launches on
    the smallest visible config, and compile each for the target architecture to report resources.
    Returns {"kernels": [...], "diagnostics": [...], "log": str}."""
    from .toolchains.triton import _diagnostic_from_exception, compile_records, record_launches

    task = load_task(Path(payload["task_root"]))
    device = torch.device("cuda" if payload["backend"] == "cuda" else "cpu")
    ref = import_file(task.file("reference.py"), "crucible_reference")
    source = Path(payload["candidate"]["path"])
    records: list = []
    failure = None
    try:
        kernel = load_kernel(payload["candidate"], task, "crucible_candidate")
        case = Case(task, ref, task.config(payload["config"]), 0, device)
        record_launches(lambda: kernel(case.inputs, case.new_outputs(), case.params), into=records)
    except (MemoryError, torch.cuda.OutOfMemoryError):
        raise
    except Exception as exc:  # candidate code may raise anything; the agent reads it
        failure = _diagnostic_from_exception(exc, source.parent, source.name)
        log = _error_text(exc)
    progress({"stage": "compile", "kernels": len(records)})
    kernels, diagnostics = compile_records(records, payload["arch"], source_dir=source.parent)
    if failure is not None:
        if any(d.severity == "error" for d in diagnostics):  # Triton's own compile error says it better
            failure = failure.model_copy(update={"severity": "note", "message": f"while tracing: {failure.message}"})
        diagnostics.append(failure)
    elif not records:
        from .toolchains import Diagnostic

        diagnostics.append(Diagnostic(file=source.name, line=None, column=None, severity="error",
                                      message=f"{task.spec.entry}() launched no @triton.jit kernel; "
                                              "a Triton candidate must launch one"))
        log = ""
    else:
        log = "\n".join(f"{r.launches} x {r.describe()}" for r in records)
    return {"kernels": [k.model_dump() for k in kernels], "diagnostics": [d.model_dump() for d in diagnostics],
            "log": log}
