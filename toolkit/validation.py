"""Is a task sound? The checks behind `crucible tasks validate`, run with the same engine as the tools.

    validate(task, backend)
      reference      worker job "validate_reference": per config, make_inputs and the reference twice on
                     the same seed (bitwise equal) and once on another; outputs finite, of the signature's
                     shape and dtype, not near-constant, not all zero
      float64 oracle the same job, on the smallest visible config on the CPU: the reference on float64
                     inputs returns float64 (toolkit/oracles.py), unless task.toml's `[oracle]` records
                     why it cannot; a warning when its outputs ignore the inputs' low bits (fp32 inside)
      baseline       X2X: evaluate(baseline, configs="all", timing="none"); torch2X: the reference is it
      solution       evaluate(solution, configs="all", timing="careful" on a GPU, "none" on the CPU)
      speed          from the solution's timed evaluation: speedup and peak fraction per config, geomean
      launch bound   from the same: the baseline's median per config against LAUNCH_BOUND_US
      no false alarm from the same: no runtime defence (toolkit/integrity.py) fires on the expert solution
      stub           torch2X: the stub must fail, never pass; or, where the toolchain says its stubs run
                     (stub_runs: the Python DSLs), be correct
      imported tasks (an imported.json beside task.toml, written by `crucible import`), without an expert:
        baselines    in the reference job, on the smallest visible config on the CPU: eager PyTorch within
                     the tolerance of the float64 oracle, and torch.compile of the reference within the
                     tolerance of eager
        hidden       every hidden config changes every size the importer found
        solution     `skipped` until an expert solution is named in task.toml

On the cpu backend a language whose kernels need a GPU is only compiled (CUDA/HIP for sm_90; a Python DSL
for sm_90a by its toolchain's compile_configs, where its package is installed), and one whose toolchain
runs on the CPU (Triton's interpreter) runs on the configs small enough for it (evaluation.fits_cpu);
what was not checked is reported `skipped`, with the reason. What differs per language comes from the
toolchain (toolkit/toolchains), never from the language's name here. A task passes when no check fails;
`warn` and `skipped` do not fail it.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .devices import gpu_lease
from .evaluation import (
    Backend,
    EvalRequest,
    _limits,
    _worker_env,
    build,
    evaluate,
    fits_cpu,
    geomean,
    output_elements,
    resolve_backend,
)
from .results import Evaluation
from .task import Config, Task, load_task
from .toolchains import get_toolchain
from .worker import run_job
from .workspace import Snapshot, materialize, take_snapshot

# The reference checks run in a sandboxed worker like every evaluation (a task's reference may be slow,
# hang or exhaust memory on a big config); the job is registered here so toolkit/jobs.py stays untouched.

LAUNCH_BOUND_US = 10.0
"""A baseline faster than this on a big config measures launch overhead, not the kernel."""
MIN_SPEEDUP = 1.0
"""Below this geomean speedup the expert solution fails: it proves no headroom."""
GOOD_SPEEDUP = 1.3
"""Below this it only warns: the headroom is thin."""
NEAR_CONSTANT = 1e-3
"""An output whose std / (|mean| + eps) is under this is near-constant."""
CONSTANT_GUESS_WARN = 0.99
"""Warn when a constant output (the mean) would pass the tolerance on this share of the elements."""
"""On the CPU, configs moving more compulsory bytes than this are left to the GPU."""

IMPORT_RECORD = "imported.json"
"""Written by `crucible import` beside an imported task's task.toml: its sizes and fixed numbers."""

CheckStatus = Literal["pass", "warn", "fail", "skipped"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Check(Model):
    name: str
    """reference_deterministic, reference_not_degenerate, float64_oracle, baselines_correct (imported),
    hidden_configs_differ (imported), baseline_correct, solution_correct, solution_faster, launch_overhead, no_false_alarm, stub_rejected, loads."""
    status: CheckStatus
    message: str
    figures: dict[str, Any] = Field(default_factory=dict)
    """What the check measured, for the JSON output and the table."""


class ConfigTiming(Model):
    """One config of the solution's timed evaluation (a GPU only)."""

    config: str
    hidden: bool
    baseline_us: float | None = None
    """The X2X baseline, or eager PyTorch (the reference) for torch2X tasks."""
    expert_us: float | None = None
    speedup: float | None = None
    peak_fraction: float | None = None
    launch_bound: bool = False
    """The baseline ran under LAUNCH_BOUND_US on a config bigger than the CPU interpreter's."""
    small: bool = False
    """Small on purpose (it fits the CPU interpreter): not held to the launch-overhead bar."""


class TaskValidation(Model):
    task: str
    backend: str
    status: Literal["pass", "fail"]
    checks: list[Check]
    timings: list[ConfigTiming] = Field(default_factory=list)
    baseline_us: float | None = None
    """Geometric mean over the timed configs (so expert_us / baseline_us is the geomean speedup)."""
    expert_us: float | None = None
    speedup: float | None = None
    """Geometric mean over the timed configs of baseline / expert."""
    min_speedup: float | None = None
    peak_fraction: float | None = None
    """Median over the timed configs of the expert's peak fraction."""
    device: str | None = None
    seconds: float = 0

    def check(self, name: str) -> Check:
        return next(c for c in self.checks if c.name == name)


# ---------------------------------------------------------------- the reference, in a worker

def run_reference_checks(payload: dict, progress: Callable[[dict], None]) -> dict:
    """Worker job "validate_reference". Payload: task_root, configs (names), backend, oracle_config (a name
    or None). Returns {"configs": [{config, inputs_deterministic, outputs_deterministic, problems, outputs}],
    "oracle": _float64_probe's dict or None}."""
    import torch

    from .checking import values
    from .judge.cases import DTYPES, Case
    from .runner.loading import import_file
    from .task import output_shape, resolve_dtype

    task = load_task(Path(payload["task_root"]))
    device = torch.device("cuda" if payload["backend"] == "cuda" else "cpu")
    torch.manual_seed(0)
    ref = import_file(task.file("reference.py"), "crucible_reference")

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        """Equal at zero tolerance, NaN where NaN (no byte views: a reference may return strided views)."""
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            a, b = values(a), values(b)  # FP8 as the values it holds
            return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
        return torch.equal(a, b)

    def run(case: Case) -> list[torch.Tensor]:
        with torch.no_grad():
            out = ref.reference(*[t.clone() for t in case.inputs], **case.params)
            return [r.detach() for r in (out if isinstance(out, tuple | list) else (out,))]

    rows = []
    for n, name in enumerate(payload["configs"]):
        progress({"stage": "reference", "config": name, "done": n, "total": len(payload["configs"])})
        config = task.config(name)
        first, again, other = (Case(task, ref, config, seed, device) for seed in (0, 0, 1))
        inputs_same = all(same(a, b) for a, b in zip(first.inputs, again.inputs, strict=True))
        r1, r2, r3 = run(first), run(first), run(other)
        problems = []
        if len(r1) != len(task.spec.signature.outputs):
            problems.append(f"the reference returned {len(r1)} outputs; the signature has "
                            f"{len(task.spec.signature.outputs)}")
        outputs = []
        for spec, a, b, c in zip(task.spec.signature.outputs, r1, r2, r3, strict=False):
            want_shape = output_shape(spec, config)
            want_dtype = DTYPES[resolve_dtype(spec.dtype, config)]
            if spec.check == "sample":  # the probability of every class for each draw
                if list(a.shape[:-1]) != want_shape or not a.is_floating_point() or a.dim() != len(want_shape) + 1:
                    problems.append(f"output {spec.name} is drawn (check = \"sample\"): the reference must give "
                                    f"floating probabilities of shape {want_shape} + [classes], not "
                                    f"{list(a.shape)} {a.dtype}")
                elif not bool(torch.allclose(a.double().sum(-1), torch.ones((), dtype=torch.float64), atol=1e-4)):
                    problems.append(f"output {spec.name} is drawn: the reference's probabilities must sum to 1 "
                                    "over the last dimension")
            elif list(a.shape) != want_shape or a.dtype != want_dtype:
                problems.append(f"output {spec.name}: the reference gives {list(a.shape)} {a.dtype}, the "
                                f"signature says {want_shape} {want_dtype}")
            tol = task.spec.tolerance.for_dtype(resolve_dtype(spec.dtype, config))
            outputs.append({"name": spec.name, "deterministic": same(a, b),
                            "differs_across_seeds": not same(a, c),
                            **_output_stats(a, tol.atol, tol.rtol)})
        rows.append({"config": name, "inputs_deterministic": inputs_same,
                     "outputs_deterministic": all(o["deterministic"] for o in outputs),
                     "problems": problems, "outputs": outputs})
        del first, again, other, r1, r2, r3
        if device.type == "cuda":
            torch.cuda.empty_cache()
    oracle = payload.get("oracle_config")
    result = {"configs": rows, "oracle": _float64_probe(task, ref, task.config(oracle)) if oracle else None}
    if payload.get("baselines") and oracle:
        progress({"stage": "baselines", "config": oracle})
        result["baselines"] = _baseline_probe(task, ref, task.config(oracle))
    return result


def _baseline_probe(task: Task, ref: ModuleType, config: Config) -> dict:
    """Imported torch2X tasks, on the CPU: eager PyTorch (the reference) within tolerance of the float64
    oracle, and `torch.compile` of it within tolerance of eager. Each: {"ok", "detail"} or {"error"}."""
    import torch

    from .judge.cases import Case
    from .oracles import OracleError, float64_reference
    from .task import resolve_dtype

    case = Case(task, ref, config, 0, torch.device("cpu"))
    names = [o.name for o in task.spec.signature.outputs]

    def outs(value: Any) -> list[Any]:
        return list(value) if isinstance(value, tuple | list) else [value]

    def compare(got: list[Any], want: list[Any]) -> dict:
        worst = []
        for spec, g, w in zip(task.spec.signature.outputs, got, want, strict=True):
            tol = task.spec.tolerance.for_dtype(resolve_dtype(spec.dtype, config))
            g64, w64 = g.detach().to(torch.float64), w.detach().to(torch.float64)
            bad = ~torch.isclose(g64, w64, atol=tol.atol, rtol=tol.rtol, equal_nan=True)
            worst.append(f"{spec.name}: {int(bad.sum())} of {bad.numel()} elements out of tolerance")
            if bool(bad.any()):
                return {"ok": False, "detail": "; ".join(worst)}
        return {"ok": True, "detail": "; ".join(worst)}

    with torch.no_grad():
        eager = outs(ref.reference(*case.inputs, **case.params))
    result: dict = {"config": config.name}
    try:
        result["eager"] = compare(eager, float64_reference(ref.reference, case.inputs, case.params, names))
    except OracleError as exc:
        result["eager"] = {"error": str(exc)}
    try:
        import torch._dynamo

        torch._dynamo.reset()
        compiled = torch.compile(ref.reference)
        with torch.no_grad():
            result["compile"] = compare(outs(compiled(*case.inputs, **case.params)), eager)
    except Exception as exc:  # inductor on this machine (no compiler, an unsupported op): reported, not raised
        result["compile"] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    return result


def _float64_probe(task: Task, ref: ModuleType, config: Config) -> dict:
    """The float64 oracle on the config's seed-0 inputs, on the CPU, as the judge builds it:
    {"config", "error" (the OracleError text or None), "narrowed" (outputs that ignore their inputs' low bits)}."""
    import torch

    from .judge.cases import Case
    from .oracles import OracleError, narrowed_outputs

    case = Case(task, ref, config, 0, torch.device("cpu"))
    try:
        narrowed = narrowed_outputs(ref.reference, case.inputs, case.params,
                                    [o.name for o in task.spec.signature.outputs])
    except OracleError as exc:
        return {"config": config.name, "error": str(exc), "narrowed": []}
    return {"config": config.name, "error": None, "narrowed": narrowed}


def _output_stats(t: Any, atol: float, rtol: float) -> dict:
    """Finite, all-zero, spread, and the share of elements a constant guess (the mean) gets right."""
    import torch

    x = t.detach().to(torch.float64).flatten()
    finite = bool(torch.isfinite(x).all())
    if not finite or x.numel() == 0:
        return {"numel": x.numel(), "finite": finite, "all_zero": False, "rel_std": None, "constant_guess": None}
    mean = float(x.mean())
    std = float(x.std()) if x.numel() > 1 else 0.0
    guess = float(((x - mean).abs() <= atol + rtol * x.abs()).double().mean())
    return {"numel": x.numel(), "finite": True, "all_zero": not bool(x.any()),
            "rel_std": std / (abs(mean) + 1e-12), "constant_guess": guess}


def _configs_here(task: Task, backend: Backend) -> tuple[list[str], list[str]]:
    """(configs to run, configs skipped) on this backend."""
    names = [c.name for c in task.configs("all")]
    if backend != "cpu":
        return names, []
    return ([n for n in names if fits_cpu(task, task.config(n))],
            [n for n in names if not fits_cpu(task, task.config(n))])


REFERENCE_CHECKS = ("reference_deterministic", "reference_not_degenerate", "float64_oracle")
IMPORTED_CHECKS = ("baselines_correct",)


def _reference_checks(task: Task, backend: Backend) -> list[Check]:
    names, skipped = _configs_here(task, backend)
    skip_note = f"; {len(skipped)} configs too large for the CPU skipped" if skipped else ""
    if not names:
        msg = "every config is too large for the CPU; run on a GPU"
        names_ = REFERENCE_CHECKS + (IMPORTED_CHECKS if imported_record(task) is not None else ())
        return [Check(name=n, status="skipped", message=msg) for n in names_]
    smallest = min(task.configs("visible"), key=lambda c: output_elements(task, c))
    gpu = None if backend == "cpu" else 0
    # Under the device's lease like every evaluation: tasks validated side by side must not share the GPU
    # while one of them is being timed.
    with gpu_lease(backend, gpu), tempfile.TemporaryDirectory(prefix="crucible-validate-") as scratch:
        outcome = run_job("validate_reference",
                          {"task_root": str(task.root), "configs": names, "backend": backend,
                           "oracle_config": smallest.name if fits_cpu(task, smallest) else None,
                           "baselines": imported_record(task) is not None},
                          limits=_limits(task, None), backend=backend, gpu=gpu,
                          scratch=Path(scratch), env=_worker_env())
    if outcome.status != "ok" or outcome.result is None:
        msg = f"the reference could not run ({outcome.status}): {outcome.message}"
        if outcome.stderr_tail:
            msg += "\n" + outcome.stderr_tail[-1500:]
        names_ = REFERENCE_CHECKS + (IMPORTED_CHECKS if imported_record(task) is not None else ())
        return [Check(name=n, status="fail", message=msg) for n in names_]
    rows = outcome.result["configs"]
    figures = {"configs_checked": len(rows), "configs_skipped": skipped}

    unstable = [f"{r['config']} (make_inputs)" for r in rows if not r["inputs_deterministic"]]
    unstable += [f"{r['config']} (output {o['name']})" for r in rows for o in r["outputs"] if not o["deterministic"]]
    if unstable:
        det = Check(name="reference_deterministic", status="fail", figures=figures,
                    message="two runs on the same seed differ on " + ", ".join(unstable)
                    + ": make make_inputs draw only from its generator and keep the reference free of "
                    "atomics, dropout and other nondeterminism")
    else:
        det = Check(name="reference_deterministic", status="pass", figures=figures,
                    message=f"inputs and outputs bitwise equal on the same seed, {len(rows)} configs{skip_note}")

    bad, weak = [], []
    for r in rows:
        bad += [f"{r['config']}: {p}" for p in r["problems"]]
        for o in r["outputs"]:
            where = f"{r['config']} output {o['name']}"
            if not o["finite"]:
                bad.append(f"{where} holds NaN or Inf")
            elif o["all_zero"]:
                bad.append(f"{where} is all zeros")
            elif o["numel"] > 1 and o["rel_std"] is not None and o["rel_std"] < NEAR_CONSTANT:
                bad.append(f"{where} is near-constant (std / |mean| = {o['rel_std']:.1e})")
            elif not o["differs_across_seeds"]:
                bad.append(f"{where} is the same for two seeds: the reference ignores its inputs")
            elif o["constant_guess"] is not None and o["constant_guess"] >= CONSTANT_GUESS_WARN:
                weak.append(f"{where} ({100 * o['constant_guess']:.1f}%)")
    rel = [o["rel_std"] for r in rows for o in r["outputs"] if o["rel_std"] is not None]
    figures = {**figures, "min_rel_std": min(rel) if rel else None}
    if bad:
        deg = Check(name="reference_not_degenerate", status="fail", figures=figures,
                    message="; ".join(bad) + ". Draw inputs that exercise the computation (random, not constant)")
    elif weak:
        deg = Check(name="reference_not_degenerate", status="warn", figures=figures,
                    message="a constant output (the mean) would pass the tolerance on almost every element of "
                    + ", ".join(weak) + ": consider inputs or a tolerance that a wrong kernel cannot slip under")
    else:
        deg = Check(name="reference_not_degenerate", status="pass", figures=figures,
                    message=f"outputs finite, varied and input-dependent on {len(rows)} configs{skip_note}")
    checks = [det, deg, _oracle_check(task, outcome.result.get("oracle"))]
    if imported_record(task) is not None:
        checks.append(_baselines_check(outcome.result.get("baselines")))
    return checks


def imported_record(task: Task) -> dict | None:
    """What `crucible import` decided (imported.json), for a task it wrote; None for a hand-written task."""
    path = task.root / IMPORT_RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def _baselines_check(probe: dict | None) -> Check:
    """Imported torch2X: the baselines a run compares against must themselves be correct."""
    if probe is None:
        return Check(name="baselines_correct", status="skipped",
                     message="no visible config is small enough for the CPU; run on a GPU")
    figures = {k: v for k, v in probe.items()}
    where = f"on {probe['config']} (CPU)"
    eager, compiled = probe["eager"], probe["compile"]
    if "error" in eager:
        return Check(name="baselines_correct", status="warn", figures=figures,
                     message=f"no float64 oracle to check eager PyTorch against {where}: {eager['error'][:300]}")
    if not eager["ok"]:
        return Check(name="baselines_correct", status="fail", figures=figures,
                     message=f"eager PyTorch is not within the tolerance of the float64 reference {where}: "
                     f"{eager['detail']}; widen the task's [tolerance] (with a reason) or fix the reference")
    if "error" in compiled:
        return Check(name="baselines_correct", status="warn", figures=figures,
                     message=f"eager PyTorch within tolerance of float64 {where}; torch.compile could not run: "
                     f"{compiled['error'][:300]}")
    if not compiled["ok"]:
        return Check(name="baselines_correct", status="fail", figures=figures,
                     message=f"torch.compile of the reference differs from eager beyond the tolerance {where}: "
                     f"{compiled['detail']}")
    return Check(name="baselines_correct", status="pass", figures=figures,
                 message=f"eager PyTorch within tolerance of float64, torch.compile within tolerance of eager {where}")


def _hidden_configs_check(task: Task, record: dict) -> Check:
    """Imported tasks: every hidden config changes every size, so no hard-coded size passes them all."""
    sizes = [s for s in record.get("sizes", []) if s not in record.get("follows", {})]
    visible = task.configs("visible")[0].values
    hidden = task.configs("hidden")
    same = {c.name: [s for s in sizes if c.values.get(s) == visible.get(s)] for c in hidden}
    same = {k: v for k, v in same.items() if v}
    figures = {"hidden": len(hidden), "sizes": sizes, "unchanged": same}
    if not sizes or not hidden:
        return Check(name="hidden_configs_differ", status="fail", figures=figures,
                     message=f"{len(hidden)} hidden configs over {len(sizes)} sizes: import the problem again")
    if same:
        return Check(name="hidden_configs_differ", status="fail", figures=figures,
                     message="hidden configs that leave a size at its visible value: "
                     + "; ".join(f"{k}: {', '.join(v)}" for k, v in same.items()) + "; edit the rules and import again")
    return Check(name="hidden_configs_differ", status="pass", figures=figures,
                 message=f"{len(hidden)} hidden configs, each changing all {len(sizes)} sizes ({', '.join(sizes)})")


def _oracle_check(task: Task, probe: dict | None) -> Check:
    """The float64 precision oracle must work, or task.toml must record why it cannot."""
    declared = task.spec.oracle
    if probe is None:
        return Check(name="float64_oracle", status="skipped",
                     message="no visible config is small enough for the CPU; the oracle is checked on the smallest")
    where = f"on {probe['config']} (CPU)"
    figures = {"config": probe["config"], "float64": probe["error"] is None, "narrowed": probe["narrowed"]}
    if probe["error"] is not None:
        if not declared.float64:
            return Check(name="float64_oracle", status="pass", figures=figures,
                         message=f"no float64 oracle, as task.toml's [oracle] records: {declared.reason}")
        return Check(name="float64_oracle", status="fail", figures=figures, message=f"{where}: {probe['error']}")
    if not declared.float64:
        return Check(name="float64_oracle", status="warn", figures=figures,
                     message=f"task.toml's [oracle] says the reference cannot run in float64, but it does {where}: "
                     "drop `float64 = false` so the precision oracle is used")
    if probe["narrowed"]:
        return Check(name="float64_oracle", status="warn", figures=figures,
                     message=f"{where}: " + ", ".join(probe["narrowed"]) + " of the float64 reference do not move "
                     "when the inputs move in their low bits: the reference rounds to fp32 or narrower inside "
                     "(e.g. `x.float()`); compute in float64 when the inputs are float64")
    return Check(name="float64_oracle", status="pass", figures=figures,
                 message=f"float64 inputs give float64 outputs {where}: the precision oracle works")


# ---------------------------------------------------------------- kernels, through evaluate

def snapshot_of_file(task: Task, file: str, folder: Path) -> Snapshot:
    """A snapshot of a workspace whose candidate is `file` of the task (its solution, baseline or stub)."""
    ws = folder / Path(file).stem
    materialize(task, ws, overwrite=True)
    shutil.copyfile(task.file(file), ws / task.spec.candidate)
    return take_snapshot(task, ws)


def _evaluate_file(task: Task, file: str, request: EvalRequest) -> Evaluation:
    with tempfile.TemporaryDirectory(prefix="crucible-validate-") as folder:
        return evaluate(task, snapshot_of_file(task, file, Path(folder)), request)


def _compile_only(task: Task, file: str, backend: Backend, name: str) -> Check:
    """Kernels that run only on a GPU, on the CPU: build for the target arch (a Python DSL's toolchain compiles
    the module's kernels offline, compile_configs) and report resources; running needs a GPU."""
    chain = get_toolchain(task.spec.language)
    missing = chain.available()  # a Python DSL whose package is an optional extra
    if missing is not None:
        return Check(name=name, status="skipped", message=f"{file}: {missing}, so its kernels were not "
                     "compiled; running it needs a GPU")
    result = chain.compile_configs(task, task.root, file)
    if result is None:
        result = build(task, task.root, file, backend)
    kernels = [{"name": k.name, "registers": k.registers, "shared_bytes": k.shared_bytes,
                "spill_stores": k.spill_stores} for k in result.kernels]
    figures = {"arch": result.target.arch, "kernels": kernels}
    if not result.ok:
        first = next((d for d in result.diagnostics if d.severity == "error"), None)
        where = f"{first.file}:{first.line}: {first.message}" if first else result.log[-800:]
        return Check(name=name, status="fail", figures=figures, message=f"{file} does not compile: {where}")
    if not kernels:
        return Check(name=name, status="fail", figures=figures,
                     message=f"{file} compiled but the compiler reported no kernel: does it define one?")
    return Check(name=name, status="skipped", figures=figures,
                 message=f"needs a GPU; compiled for {result.target.arch} only ({len(kernels)} kernels, "
                 + ", ".join(f"{k['name'][:40]}: {k['registers']} regs" for k in kernels[:3]) + ")")


def _correct_check(name: str, file: str, e: Evaluation, too_big: list[str]) -> Check:
    ran = [c for c in e.configs if c.status != "skipped"]
    skipped = [c.config for c in e.configs if c.status == "skipped"] + too_big
    figures = {"configs_passed": sum(c.status == "pass" for c in ran), "configs_run": len(ran),
               "configs_skipped": skipped, "status": e.status}
    if e.status == "ok" and ran:
        note = f" ({len(skipped)} too large for the CPU: skipped, they run on a GPU)" if skipped else ""
        return Check(name=name, status="pass", figures=figures,
                     message=f"{file} correct on all {len(ran)} configs it could run here{note}")
    if e.status == "not_run":
        return Check(name=name, status="skipped", figures=figures, message=f"{file}: {e.message}")
    return Check(name=name, status="fail", figures=figures, message=f"{file}: {e.status}: {e.message[:2000]}")


def _stub_check(task: Task, backend: Backend, seeds: int | None) -> Check:
    stub = task.spec.stub
    assert stub is not None
    chain = get_toolchain(task.spec.language)
    if not chain.runs_on_cpu and backend == "cpu":
        compiled = _compile_only(task, stub, backend, "stub_rejected")
        if compiled.status == "fail" and "no kernel" not in compiled.message:
            return compiled  # the agent must start from a file that compiles
        return Check(name="stub_rejected", status="skipped", figures=compiled.figures,
                     message=(f"{stub} compiles; whether it {'is correct' if chain.stub_runs else 'fails'}"
                              " needs a GPU") if compiled.figures else compiled.message)
    small = [c for c in task.configs("visible") if backend != "cpu" or fits_cpu(task, c)]
    if not small:
        return Check(name="stub_rejected", status="skipped", message="no visible config fits the CPU interpreter")
    config = min(small, key=lambda c: output_elements(task, c))
    e = _evaluate_file(task, stub, EvalRequest(configs=[config.name], timing="none", backend=backend,
                                               seeds=1))
    figures = {"status": e.status, "config": config.name}
    text = e.message + " ".join(c.message for c in e.configs)
    if chain.stub_runs:  # a working, naive kernel: the DSL's plumbing to start from
        if e.status == "ok":
            return Check(name="stub_rejected", status="pass", figures=figures,
                         message=f"{stub} is a correct naive start on {config.name} ({chain.language} stubs work)")
        return Check(name="stub_rejected", status="fail", figures=figures,
                     message=f"{stub} should be a correct naive start, but the evaluation says {e.status}: "
                     f"{e.message[:500]}")
    if chain.loader == "python_module":  # a Python stub raises; a library's returns an error code
        if e.status == "error" and "NotImplementedError" in text:
            return Check(name="stub_rejected", status="pass", figures=figures,
                         message=f"{stub} raises NotImplementedError on {config.name}")
        return Check(name="stub_rejected", status="fail", figures=figures,
                     message=f"{stub} should raise NotImplementedError, but the evaluation says {e.status}: "
                     f"{e.message[:500]}")
    if e.status in ("error", "incorrect"):
        return Check(name="stub_rejected", status="pass", figures=figures,
                     message=f"{stub} fails on {config.name} ({e.status})")
    return Check(name="stub_rejected", status="fail", figures=figures,
                 message=f"{stub} should fail (return an error code) but the evaluation says {e.status}: "
                 f"{e.message[:500]}")


def _integrity_check(e: Evaluation) -> Check:
    """The runtime defences must not fire on the expert solution: a finding here is a false alarm (or a
    task whose solution cheats)."""
    findings = [f for c in e.configs for f in c.integrity]
    figures = {"findings": [f.flag() for f in findings]}
    caught = [f for f in findings if f.caught]
    if caught:
        return Check(name="no_false_alarm", status="fail", figures=figures,
                     message="a runtime defence flags the expert solution: " + "; ".join(f.flag() for f in caught[:3]))
    if findings:
        return Check(name="no_false_alarm", status="warn", figures=figures,
                     message="audit flags on the expert solution: " + "; ".join(f.flag() for f in findings[:3]))
    return Check(name="no_false_alarm", status="pass", figures=figures,
                 message=f"no runtime defence fired on {sum(c.status == 'pass' for c in e.configs)} configs")


def _timings(task: Task, e: Evaluation) -> list[ConfigTiming]:
    hidden = {c.name for c in task.configs("hidden")}
    rows = []
    for c in e.configs:
        if c.candidate is None or c.baseline is None or not c.candidate.comparable:
            continue
        small = fits_cpu(task, task.config(c.config))
        rows.append(ConfigTiming(config=c.config, hidden=c.config in hidden, baseline_us=c.baseline.median_us,
                                 expert_us=c.candidate.median_us, speedup=c.speedup, peak_fraction=c.peak_fraction,
                                 small=small, launch_bound=not small and c.baseline.median_us < LAUNCH_BOUND_US))
    return rows


def _speed_checks(timings: list[ConfigTiming]) -> list[Check]:
    speeds = [t.speedup for t in timings if t.speedup]
    if not speeds:
        msg = "the solution's timed evaluation gave no comparable timings"
        return [Check(name="solution_faster", status="fail", message=msg),
                Check(name="launch_overhead", status="skipped", message=msg)]
    mean = geomean(speeds) or 0.0
    slow = [f"{t.config} {t.speedup:.2f}x" for t in timings if t.speedup and t.speedup < MIN_SPEEDUP]
    fracs = [t.peak_fraction for t in timings if t.peak_fraction is not None]
    figures = {"speedup": mean, "min_speedup": min(speeds),
               "peak_fraction": statistics.median(fracs) if fracs else None}
    detail = f"geomean {mean:.2f}x over {len(speeds)} configs, min {min(speeds):.2f}x" + (
        f", median peak fraction {figures['peak_fraction']:.2f}" if fracs else "")
    slower = f"; slower than the baseline on {', '.join(slow)}" if slow else ""
    if mean < MIN_SPEEDUP:
        faster = Check(name="solution_faster", status="fail", figures=figures,
                       message=f"the expert solution is not faster than the baseline: {detail}{slower}")
    elif mean < GOOD_SPEEDUP or slow:
        faster = Check(name="solution_faster", status="warn", figures=figures,
                       message=f"thin headroom (under {GOOD_SPEEDUP}x): {detail}{slower}")
    else:
        faster = Check(name="solution_faster", status="pass", figures=figures, message=detail)

    bound = [t for t in timings if t.launch_bound]
    small = [t.config for t in timings if t.small]
    note = f"; small on purpose (CPU-interpreter size): {', '.join(small)}" if small else ""
    if bound:
        launch = Check(name="launch_overhead", status="warn",
                       figures={"launch_bound": [t.config for t in bound], "small": small},
                       message="launch-bound (baseline under "
                       f"{LAUNCH_BOUND_US:g} us): " + ", ".join(f"{t.config} {t.baseline_us:.1f} us" for t in bound)
                       + note + "; make these configs bigger or drop them")
    else:
        launch = Check(name="launch_overhead", status="pass", figures={"launch_bound": [], "small": small},
                       message=f"every big config's baseline takes >= {LAUNCH_BOUND_US:g} us{note}")
    return [faster, launch]


# ---------------------------------------------------------------- validate

def validate(task: Task, backend: Backend | Literal["auto"] = "auto", *, seeds: int | None = None,
             on_progress: Callable[[str], None] | None = None) -> TaskValidation:
    """Run every check this backend allows on one task; never raises for a broken task, it fails checks."""
    started = time.perf_counter()
    backend = resolve_backend(backend)
    say = on_progress or (lambda _msg: None)
    on_gpu = backend != "cpu"
    chain = get_toolchain(task.spec.language)
    runs_here = chain.runs_on_cpu or on_gpu
    here, too_big = _configs_here(task, backend)
    checks: list[Check] = []
    timings: list[ConfigTiming] = []
    device: str | None = None

    def baseline() -> Check:
        if task.spec.is_torch_task:
            return Check(name="baseline_correct", status="skipped",
                         message="torch2X: the baseline is the reference itself (eager PyTorch)")
        assert task.spec.baseline is not None
        if not runs_here:
            return _compile_only(task, task.spec.baseline, backend, "baseline_correct")
        say(f"{task.id}: baseline on every config")
        e = _evaluate_file(task, task.spec.baseline, EvalRequest(configs=here, timing="none", backend=backend,
                                                                 seeds=seeds))
        return _correct_check("baseline_correct", task.spec.baseline, e, too_big)

    def stub() -> Check | None:
        if not task.spec.is_torch_task:
            return None
        say(f"{task.id}: the stub must {'be correct' if chain.stub_runs else 'fail'}")
        return _stub_check(task, backend, seeds)

    def reference() -> list[Check]:
        say(f"{task.id}: reference determinism and outputs")
        return _reference_checks(task, backend)

    def solution() -> tuple[Check, Evaluation | None]:
        file = task.spec.solution
        if file is None and imported_record(task) is not None:
            return Check(name="solution_correct", status="skipped",
                         message="imported, no expert solution yet: the checks above prove what can be proved "
                         "without one; write one and name it in task.toml's `solution` to check speed"), None
        if file is None:
            return Check(name="solution_correct", status="fail",
                         message="imported, needs an expert solution: write one (correct on every config, "
                         "clearly faster than the baseline) and name it in task.toml's `solution`"), None
        if not runs_here:
            return _compile_only(task, file, backend, "solution_correct"), None
        say(f"{task.id}: expert solution on every config" + (", timed carefully" if on_gpu else ""))
        e = _evaluate_file(task, file, EvalRequest(configs=here, timing="careful" if on_gpu else "none",
                                                   backend=backend, seeds=seeds))
        return _correct_check("solution_correct", file, e, too_big), e

    if on_gpu:  # in order: each GPU job waits for the device's lease anyway
        checks += reference()
        base, stub_check = baseline(), stub()
        sol, sol_eval = solution()
    else:  # the CPU checks are independent worker processes: overlap them
        with ThreadPoolExecutor(max_workers=4) as pool:
            ref_f, base_f, stub_f, sol_f = (pool.submit(reference), pool.submit(baseline), pool.submit(stub),
                                            pool.submit(solution))
            checks += ref_f.result()
            base, stub_check = base_f.result(), stub_f.result()
            sol, sol_eval = sol_f.result()
    checks.append(base)
    record = imported_record(task)
    if record is not None:
        checks.append(_hidden_configs_check(task, record))
    checks.append(sol)
    if sol_eval is not None and sol_eval.device is not None:
        device = sol_eval.device.name
    if on_gpu and sol_eval is not None and sol.status == "pass":
        timings = _timings(task, sol_eval)
        checks += _speed_checks(timings)
    else:
        why = ("needs a GPU (the interpreter's timings say nothing about GPU speed)" if not on_gpu
               else "the expert solution is not correct, so its timings mean nothing")
        checks += [Check(name="solution_faster", status="skipped", message=why),
                   Check(name="launch_overhead", status="skipped", message=why)]
    if sol_eval is not None and sol.status == "pass":
        checks.append(_integrity_check(sol_eval))
    if stub_check is not None:
        checks.append(stub_check)

    speeds = [t.speedup for t in timings if t.speedup]
    fracs = [t.peak_fraction for t in timings if t.peak_fraction is not None]
    return TaskValidation(
        task=task.id, backend=backend, device=device,
        status="fail" if any(c.status == "fail" for c in checks) else "pass", checks=checks, timings=timings,
        baseline_us=geomean([t.baseline_us for t in timings if t.baseline_us]),
        expert_us=geomean([t.expert_us for t in timings if t.expert_us]),
        speedup=geomean(speeds), min_speedup=min(speeds) if speeds else None,
        peak_fraction=statistics.median(fracs) if fracs else None, seconds=time.perf_counter() - started)


def load_failure(task_id: str, error: Exception, backend: str) -> TaskValidation:
    """A task folder that does not load, as a failed validation (so a table can list it)."""
    return TaskValidation(task=task_id, backend=backend, status="fail",
                          checks=[Check(name="loads", status="fail", message=str(error))])


# ---------------------------------------------------------------- rendering

def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def markdown_table(results: list[TaskValidation]) -> str:
    """The validation table kept in the repo: per task, then per config."""
    devices = sorted({r.device for r in results if r.device})
    lines = ["# Task validation", "",
             f"`crucible tasks validate --table` on {', '.join(devices) or (results[0].backend if results else '-')}. "
             "Times are medians of careful timing (L2 flushed, inputs rotated) in microseconds; per task they are "
             "geometric means over the timed configs (visible and hidden), so expert / baseline is the geomean "
             "speedup. Peak fraction: the expert's achieved rate over the device's ceiling, median over configs. "
             "Baseline: the given kernel (X2X) or eager PyTorch (torch2X).", "",
             "| task | configs timed | baseline µs | expert µs | speedup | min speedup | peak fraction | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in results:
        flagged = [f"{c.status}: {c.name}" for c in r.checks if c.status in ("fail", "warn")]
        verdict = r.status + (f" ({'; '.join(flagged)})" if flagged else "")
        lines.append(f"| {r.task} | {len(r.timings)} | {_f(r.baseline_us, ',.1f')} | {_f(r.expert_us, ',.1f')} | "
                     f"{_x(r.speedup)} | {_x(r.min_speedup)} | {_f(r.peak_fraction, '.2f')} | "
                     f"{verdict} |")
    speeds = [r.speedup for r in results if r.speedup is not None]
    fracs = [r.peak_fraction for r in results if r.peak_fraction is not None]
    lines += ["", f"Tasks: {len(results)}; passed: {sum(r.status == 'pass' for r in results)}; "
              f"expert >= {GOOD_SPEEDUP}x (geomean): {sum(s >= GOOD_SPEEDUP for s in speeds)} of {len(speeds)}; "
              f"median peak fraction over tasks: {_f(statistics.median(fracs) if fracs else None, '.2f')}."]
    for r in results:
        if not r.timings:
            continue
        lines += ["", f"## {r.task}", "", "| config | hidden | baseline µs | expert µs | speedup | peak fraction | note |",
                  "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
        for t in r.timings:
            note = "launch-bound" if t.launch_bound else ("small on purpose" if t.small else "")
            lines.append(f"| {t.config} | {'yes' if t.hidden else ''} | {_f(t.baseline_us, ',.1f')} | "
                         f"{_f(t.expert_us, ',.1f')} | {_x(t.speedup)} | {_f(t.peak_fraction, '.2f')} | {note} |")
    return "\n".join(lines) + "\n"


def validation_text(r: TaskValidation) -> str:
    """Plain text for the terminal: one line per check, then the timings."""
    head = f"{r.task} on {r.device or r.backend}: {r.status.upper()} ({r.seconds:.0f} s)"
    width = max(len(c.name) for c in r.checks)
    lines = [head] + [f"  {c.status:<7}  {c.name:<{width}}  {c.message.splitlines()[0] if c.message else ''}"
                      for c in r.checks]
    for c in r.checks:  # multi-line messages (tracebacks) after the summary
        if c.status == "fail" and "\n" in c.message:
            lines.append(f"  -- {c.name}:\n    " + "\n    ".join(c.message.splitlines()[1:30]))
    if r.timings:
        lines.append(f"  {'config':<24} {'base us':>10} {'expert us':>10} {'speedup':>8} {'peak':>6}")
        for t in r.timings:
            mark = " launch-bound" if t.launch_bound else (" small" if t.small else "")
            lines.append(f"  {t.config[:24]:<24} {_f(t.baseline_us, ',.1f'):>10} {_f(t.expert_us, ',.1f'):>10} "
                         f"{_x(t.speedup):>8} {_f(t.peak_fraction, '.2f'):>6}{mark}")
        lines.append(f"  geomean {_x(r.speedup)}, median peak fraction {_f(r.peak_fraction, '.2f')}")
    return "\n".join(lines)
