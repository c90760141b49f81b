"""The judge's evaluation: every check, oracle and clock, with the candidate in a runner of its own.

    judge job "evaluate" (EvalJob)                              runners (toolkit/runner/, sandboxed)
      start the candidate's runner and the baseline's            import torch, restrict themselves
      load the reference (trusted task code, never shown to a runner)
      1. checks, per config and seed:
           make inputs -> arena -> candidate runs twice ------>  call, call
           inputs unchanged? outputs vs the reference; float64 oracle; the two runs agree bit for bit
      2. what ran (integrity `full`, or the profile tool): ---->  profile: kernels of a call (a claim)
           own kernels' share of the time, forbidden ops
      3. timing: batches of gated calls, candidate and baseline alternating, each in its own runner;
           fresh inputs every call; sampled calls re-checked; the runner's times bounded by the judge's

Nothing a runner says is taken as it is: replies are parsed and matched (link.py), outputs are read from
memory the judge owns a copy of, and times are bounded by the judge's own events or clock.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from .. import oracles
from ..checking import check_output, describe, poison_, pooled_samples
from ..integrity import finding
from ..protocol import (
    Bind,
    Call,
    Called,
    CallSignature,
    CompileJob,
    Done,
    EvalJob,
    Load,
    ParamType,
    Profile,
    Profiled,
    Trace,
    Traced,
    is_gpu_oom,
)
from ..results import ConfigResult, DeviceInfo, IntegrityFinding, OutputCheck, SeedCheck, TimingStats
from ..shared_memory import Arena, reset_persisting_l2
from ..task import Config, Task, TensorSpec, Tolerance, load_task, resolve_dtype, task_metrics
from ..timing import CAREFUL, QUICK, TimingOptions, _done, summarize
from .cases import Case, Fresh, Layout, params_of
from .link import CandidateFailed, ProtocolViolation, RunnerEnded, RunnerLink, Runners
from .timing import (
    MIN_US,
    WINDOW_MAX_BYTES,
    Bound,
    Subject,
    bound_findings,
    bound_us,
    contention_findings,
    empty_call_us,
    flusher,
    run_batch,
    trusted_overhead_us,
)
from .what_ran import kernel_breakdown, what_ran_findings

STARVED_BYTES = 1 << 30
"""A trusted runner out of GPU memory is the candidate's doing when killing the candidate's runner gives back
at least this much (a runner's CUDA context alone is about 0.5 GiB on an H200)."""
MIN_DRAWS = 16
"""Draws of a sampled output a config must have before they are tested together: always taking the
likeliest class shows once draws number a dozen or so (it lies in the top p_max of the mass every time)."""
EXTRA_SEEDS_MAX = 64
"""Seeds past which no further checked call is made for draws (a config of batch 1 needs about 13)."""
STARVED_WAIT_S = 10.0
"""How long the judge waits for a killed candidate's GPU memory to come back (at once when it reaches
STARVED_BYTES): a context torn down slowly (a kernel still spinning at the kill) must not turn the
candidate's starvation into an infrastructure error by coming back late."""


class InfraError(Exception):
    """Our side failed (the baseline's runner, the reference): never the candidate's fault."""


def starvation(role: str, freed_bytes: int) -> RunnerEnded | None:
    """The candidate's end when killing its runner gave back `freed_bytes` of GPU memory after the task's
    `role` runner ran out of it: enough to have starved it (STARVED_BYTES), else None (the failure is ours)."""
    if freed_bytes < STARVED_BYTES:
        return None
    return RunnerEnded("oom", f"the task's {role} runner ran out of GPU memory while your runner held "
                       f"{freed_bytes / (1 << 30):.1f} GiB of it (given back when it was stopped); the baseline "
                       "and the judge share the GPU with your kernel: free what you allocate")


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


def import_reference(task: Task) -> types.ModuleType:
    from ..runner.loading import import_file  # a plain importer; the reference is trusted task code

    return import_file(task.file("reference.py"), "crucible_reference")


def signature_of(task: Task) -> CallSignature:
    sig = task.spec.signature
    return CallSignature(inputs=[t.name for t in sig.inputs], outputs=[o.name for o in sig.outputs],
                         params=[ParamType(name=p.name, type=p.type) for p in sig.params])


def reference_outputs(ref: types.ModuleType, inputs: list[torch.Tensor], params: dict) -> list[torch.Tensor]:
    with torch.no_grad():
        out = ref.reference(*[t.clone() for t in inputs], **params)
    return [r.detach() for r in (out if isinstance(out, tuple | list) else (out,))]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8) if t.dtype != torch.bool else t.detach().clone()


class Laps:
    """Seconds per phase: `lap(phase)` adds the time since the previous lap to `phase`."""

    def __init__(self) -> None:
        self.clock = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self.clock
        self.clock = now


class Bench:
    """One config's arena in one runner, with the judge's views of it."""

    def __init__(self, link: RunnerLink, layout: Layout, device: torch.device) -> None:
        self.link, self.layout = link, layout
        self.arena = Arena.create(layout.nbytes, device)
        link.ask(Bind(nbytes=self.arena.nbytes, tensors=layout.tensors, sets=layout.sets,
                      set_bytes=layout.set_bytes), Done, fds=[self.arena.fd])
        self.sets = [layout.views(self.arena, s) for s in range(layout.sets)]
        self.inputs, self.outputs = self.sets[0]

    def close(self) -> None:
        self.inputs = self.outputs = []
        self.sets = []
        self.arena.close()


class _Meanwhile:
    """What the judge computes for one seed while the candidate's runner is busy with its calls."""

    def __init__(self, evaluation: Evaluation, case: Case, names: list[str]) -> None:
        self.evaluation, self.case, self.names = evaluation, case, names
        self.refs: list[torch.Tensor] = []
        self.refs64: list[torch.Tensor] | None = None
        self.failure: oracles.OracleError | None = None

    def reference(self) -> None:
        self.refs = reference_outputs(self.evaluation.ref, self.case.inputs, self.case.params)

    def oracle(self) -> None:
        ev = self.evaluation
        if ev.job.integrity == "off" or not ev.task.spec.oracle.float64:
            return
        try:
            self.refs64 = oracles.float64_reference(ev.ref.reference, self.case.inputs, self.case.params, self.names)
        except oracles.OracleError as exc:  # raised only where the oracle is needed (a correct seed)
            self.failure = exc

    def float64(self) -> list[torch.Tensor]:
        if self.refs64 is None:
            raise InfraError(f"the task's float64 oracle failed: {self.failure}")
        return self.refs64


class Evaluation:
    def __init__(self, job: EvalJob, progress: Callable[[dict], None], runners: Runners) -> None:
        self.job, self.progress = job, progress
        self.laps = Laps()
        self.laps.clock = runners.started
        self.device = torch.device("cuda", 0) if job.backend == "cuda" else torch.device("cpu")
        self.results: dict[str, ConfigResult] = {}
        self.draws: dict[str, dict[str, list[OutputCheck]]] = {}
        """Per config and sampled output, the checks of every call looked at (pooled at the end)."""
        self.kernels: dict[str, list[dict]] = {}
        self.ended: RunnerEnded | None = None
        self.lost: str | None = None  # the config whose CUDA error left the candidate's context unusable
        self.links = runners.links
        self.candidate, self.baseline = runners.candidate, runners.baseline
        self.task = load_task(Path(job.task_root))
        self.ref = import_reference(self.task)
        self.info = device_info(self.device)
        self.rng = random.SystemRandom()

    # ------------------------------------------------------------------ the job

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            for link in self.links:
                link.close()

    def _run(self) -> dict[str, Any]:
        sig = signature_of(self.task)
        try:
            self.candidate.ask(Load(name="candidate", kernel=self.job.candidate, signature=sig), Done)
        except CandidateFailed as exc:
            return {**self._base(), "load_error": exc.error}
        except RunnerEnded as exc:
            return {**self._base(), "ended": {"status": exc.status, "message": exc.message}}
        except ProtocolViolation as exc:
            return {**self._base(), "load_error": f"the candidate broke the runner protocol: {exc}",
                    "protocol": str(exc)}
        self.laps.lap("load_s")
        configs = [self.task.config(n) for n in self.job.configs]
        opts = self._timing_options()
        self.steps = len(configs) * (2 if opts else 1)
        try:
            for n, config in enumerate(configs):
                self.progress({"stage": "config", "config": config.name, "done": n, "total": self.steps})
                self.check(config)
                if self.ended or self.lost:
                    break
            passing = [c for c in configs if self._passing(c)]
            if passing and opts and (self.job.integrity == "full" or self.job.profile_reps):
                self.progress({"stage": "integrity", "done": len(configs), "total": self.steps})
                for config in passing:
                    self.what_ran(config)
                    if self.ended or self.lost:
                        break
                self.laps.lap("integrity_s")
            timed = [c for c in configs if self._passing(c)] if opts and not (self.ended or self.lost) else []
            if timed:
                self._load_baselines(sig)
            for n, config in enumerate(timed if not self.ended else []):
                self.progress({"stage": "timing", "config": config.name, "done": len(configs) + n,
                               "total": self.steps})
                self.time(config, opts)  # type: ignore[arg-type]
                if self.ended or self.lost:
                    break
        except RunnerEnded as exc:
            self.ended = exc
        if self.lost:
            for name, result in self.results.items():
                if result.status == "pass" and result.candidate is None and opts:
                    self.results[name] = result.model_copy(update={
                        "message": f"not timed: a CUDA error on config {self.lost} lost the GPU context"})
        self._pool_draws()
        self.progress({"stage": "done", "done": self.steps, "total": self.steps})
        out = {**self._base(), "configs": [r.model_dump() for r in self.results.values()],
               "kernels": {k: v for k, v in self.kernels.items() if self._passing(self.task.config(k))}}
        if self.ended:
            out["ended"] = {"status": self.ended.status, "message": self.ended.message}
        return out

    def _base(self) -> dict[str, Any]:
        isolation: dict[str, str] = {}
        for link in self.links:
            isolation.update({f"{link.role}_{k.removeprefix('runner_')}": v for k, v in link.isolation.items()})
        return {"device": self.info.model_dump(), "phases": {k: round(v, 4) for k, v in self.laps.seconds.items()},
                "isolation": isolation, "output_tail": self.candidate.output()}

    def _passing(self, config: Config) -> bool:
        r = self.results.get(config.name)
        return r is not None and r.status == "pass"

    def _timing_options(self) -> TimingOptions | None:
        opts = {"quick": QUICK, "careful": CAREFUL}.get(self.job.timing)
        if opts is not None and self.job.timing_options:
            opts = TimingOptions.model_validate({**opts.model_dump(), **self.job.timing_options})
        return opts

    def _load_baselines(self, sig: CallSignature) -> None:
        if self.baseline is None:
            return
        try:
            self.baseline.ask(Load(name="baseline", kernel=self.job.baseline, signature=sig), Done)  # type: ignore[arg-type]
            if self.job.compiled_baseline:
                self.baseline.ask(Load(name="compiled", kernel=self.job.compiled_baseline, signature=sig), Done)
        except RunnerEnded as exc:
            if exc.status == "timeout":  # the evaluation's time ran out (the candidate's checks may have spent it)
                self.ended = exc
                return
            raise InfraError(f"the task's baseline could not be loaded: {exc}") from None
        except (CandidateFailed, ProtocolViolation) as exc:
            raise self._starved("baseline", exc) or InfraError(
                f"the task's baseline could not be loaded: {exc}") from None

    def _ended_on(self, config: Config, exc: RunnerEnded) -> None:
        """The candidate's runner ended (crash, exit, timeout) while working on `config`: that config fails
        with why, whatever passed before, and the evaluation ends with the runner's status."""
        self.results[config.name] = self.results[config.name].model_copy(update={
            "status": "error", "message": exc.message})
        self.ended = exc

    def _fail(self, config: Config, exc: Exception, what: str = "") -> None:
        """The candidate failed on `config`: its own error, or a broken protocol (a caught finding)."""
        result = self.results[config.name]
        if isinstance(exc, ProtocolViolation):
            f = finding("protocol", config.name, str(exc))
            self.results[config.name] = result.model_copy(update={
                "status": "error", "message": what + str(exc), "integrity": [*result.integrity, f]})
            self.ended = RunnerEnded("error", f"the candidate broke the runner protocol: {exc}")
            return
        assert isinstance(exc, CandidateFailed)
        self.results[config.name] = result.model_copy(update={"status": "error", "message": what + exc.error})
        if exc.oom:
            said = exc.error.strip().splitlines()[-1] if exc.error.strip() else "out of memory"
            memory = "GPU memory" if is_gpu_oom(exc.error) else f"memory (limit {self.job.memory_mb} MiB of host memory)"
            self.ended = RunnerEnded("oom", f"config {config.name}: the candidate ran out of {memory}: {said}; "
                                     "use less memory")
        if exc.cuda_error and self.device.type == "cuda":
            self.lost = self.lost or config.name

    # ------------------------------------------------------------------ 1. checks

    def check(self, config: Config) -> None:
        task, job = self.task, self.job
        flops, nbytes = task_metrics(task.spec, config)
        self.results[config.name] = ConfigResult(config=config.name, status="pass", flops=flops, bytes=nbytes)
        names = [o.name for o in task.spec.signature.outputs]
        seeds: list[SeedCheck] = []
        findings: list[IntegrityFinding] = []
        bench = None
        try:
            for seed in job.seeds:
                case = Case(task, self.ref, config, seed, self.device)
                if bench is None:
                    bench = Bench(self.candidate, Layout(task, config, case.inputs), self.device)
                runs, problems = [], set()
                # The judge's own work on its own copy of the inputs runs while the runner computes (the
                # reference during the first call, the float64 oracle during the second): nothing is skipped.
                mine = _Meanwhile(self, case, names)
                for work in (mine.reference, mine.oracle):
                    outs, mutated = self._checked_call(bench, case.inputs, case.params, meanwhile=work)
                    runs.append(outs)
                    problems |= {("input_mutation", f"the candidate modified input {n!r}; inputs are read-only")
                                 for n in mutated}
                refs = mine.refs
                self.laps.lap("check_s")
                checks = []
                for spec, first, second, r in zip(task.spec.signature.outputs, runs[0], runs[1], refs, strict=True):
                    tol = task.spec.tolerance.for_dtype(resolve_dtype(spec.dtype, config))
                    c_first = self._checked(config, spec, first, r, tol)
                    # Bit-identical runs compare alike: the second comparison only where they differ.
                    same = first.dtype == second.dtype and torch.equal(_bits(first), _bits(second))
                    c_second = c_first if same else check_output(spec, second, r, tol)
                    checks.append(c_second if c_first.ok else c_first)
                self.laps.lap("compare_s")
                texts = sorted(text for _, text in problems)
                ok = all(c.ok for c in checks) and not texts
                seeds.append(SeedCheck(seed=seed, ok=ok, outputs=checks, problems=texts))
                findings += [finding(d, config.name, text) for d, text in sorted(problems)]
                if ok and job.integrity != "off":
                    findings += self._oracles(runs, refs, mine, names, config.name)
                self.laps.lap("oracle_s")
            if bench is not None and all(s.ok for s in seeds):
                self._more_draws(config, bench)
        except (CandidateFailed, ProtocolViolation) as exc:
            self._fail(config, exc)
            return
        except RunnerEnded as exc:
            self._ended_on(config, exc)
            return
        finally:
            if bench is not None:
                bench.close()
            self.laps.lap("check_s")
        worst = [o for s in seeds for o in s.outputs]
        update: dict[str, Any] = {"seeds": seeds, "integrity": _unique(findings),
                                  # a sampled output's "error" is a test statistic, not a distance to a value
                                  "max_abs_err": max((o.max_abs_err for o in worst if o.p_value is None), default=0.0),
                                  "max_rel_err": max((o.max_rel_err for o in worst if o.p_value is None), default=0.0)}
        bad = [s for s in seeds if not s.ok]
        if bad:
            s = bad[0]
            update.update(status="fail", message=f"seed {s.seed}: " + "; ".join(
                s.problems + [describe(o) for o in s.outputs if not o.ok]))
        self.results[config.name] = self.results[config.name].model_copy(update=update)

    def _checked_call(self, bench: Bench, inputs: list[torch.Tensor], params: dict,
                      meanwhile: Callable[[], None] | None = None) -> tuple[list[torch.Tensor], list[str]]:
        for dst, src in zip(bench.inputs, inputs, strict=True):
            dst.copy_(src)
        for t in bench.outputs:
            poison_(t)
        self._sync()
        self.seq = getattr(self, "seq", 0) + 1
        reply = bench.link.ask(Call(kernel="candidate", seq=self.seq, params=params), Called, meanwhile=meanwhile)
        if reply.seq != self.seq:
            raise ProtocolViolation(f"the candidate answered call {reply.seq} when asked for call {self.seq}")
        self._sync()
        mutated = [spec.name for spec, shared, own in zip(self.task.spec.signature.inputs, bench.inputs, inputs,
                                                           strict=True) if not torch.equal(_bits(shared), _bits(own))]
        return [o.clone() for o in bench.outputs], mutated

    def _oracles(self, runs: list[list[torch.Tensor]], refs: list[torch.Tensor], mine: _Meanwhile,
                 names: list[str], config: str) -> list[IntegrityFinding]:
        found = oracles.nondeterminism_findings(runs[0], runs[1], names, config)
        if not self.task.spec.oracle.float64:
            return found
        return found + oracles.precision_findings(runs[1], refs, mine.float64(), names, config)

    def _precision(self, inputs: list[torch.Tensor], params: dict, outputs: list[torch.Tensor],
                   refs: list[torch.Tensor], names: list[str], config: str) -> list[IntegrityFinding]:
        if not self.task.spec.oracle.float64:
            return []
        try:
            refs64 = oracles.float64_reference(self.ref.reference, inputs, params, names)
        except oracles.OracleError as exc:
            raise InfraError(f"the task's float64 oracle failed: {exc}") from None
        return oracles.precision_findings(outputs, refs, refs64, names, config)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # ------------------------------------------------------------------ 2. what ran

    def what_ran(self, config: Config) -> None:
        case = Case(self.task, self.ref, config, 0, self.device)
        bench = None
        try:
            bench = Bench(self.candidate, Layout(self.task, config, case.inputs), self.device)
            for dst, src in zip(bench.inputs, case.inputs, strict=True):
                dst.copy_(src)
            self._sync()
            reps = max(self.job.profile_reps, 3 if self.device.type == "cuda" else 1)
            prof = self.candidate.ask(Profile(kernel="candidate", reps=reps, params=case.params), Profiled)
        except (CandidateFailed, ProtocolViolation) as exc:
            self._fail(config, exc, "profiled call failed: ")
            return
        except RunnerEnded as exc:
            self._ended_on(config, exc)
            return
        finally:
            if bench is not None:
                bench.close()
        if self.job.profile_reps:
            self.kernels[config.name] = kernel_breakdown(prof)
        if self.job.integrity == "full":
            result = self.results[config.name]
            seen = self._what_ran_findings(prof, config)
            self.results[config.name] = result.model_copy(update={"integrity": [*result.integrity, *seen]})

    def _what_ran_findings(self, prof: Profiled, config: Config) -> list[IntegrityFinding]:
        from ..task import output_shape

        elements = sum(math.prod(output_shape(o, config)) for o in self.task.spec.signature.outputs)
        return what_ran_findings(prof, self.task.spec.forbid_ops, self.task.spec.library_share_max,
                                 self.task.spec.language, self.device.type == "cuda", elements, config.name)

    # ------------------------------------------------------------------ 3. timing

    def time(self, config: Config, opts: TimingOptions) -> None:
        task, device = self.task, self.device
        fresh = Fresh(task, self.ref, config, device)
        layout = Layout(task, config, fresh.first)
        per_go = opts.calls_per_window if device.type == "cuda" and layout.set_bytes <= WINDOW_MAX_BYTES else 1
        if per_go > 1:
            layout = Layout(task, config, fresh.first, sets=per_go)
        params = params_of(task, config)
        benches: list[Bench] = []
        result = self.results[config.name]
        try:
            cand_bench = Bench(self.candidate, layout, device)
            benches.append(cand_bench)
            subjects = [Subject("candidate", self.candidate, cand_bench.arena, cand_bench.inputs,
                                cand_bench.outputs, "candidate", sets=cand_bench.sets, per_go=per_go)]
            trusted = subjects[0]
            if self.baseline is not None:
                base_bench = Bench(self.baseline, layout, device)
                benches.append(base_bench)
                counter = [0]
                kernels = ["baseline"] + (["compiled"] if self.job.compiled_baseline else [])
                subjects += [Subject(k, self.baseline, base_bench.arena, base_bench.inputs, base_bench.outputs, k,
                                     counter, sets=base_bench.sets, per_go=per_go) for k in kernels]
                trusted = subjects[1]
            flush = flusher(device)
            reset_persisting_l2(device)
            checked = self.job.integrity != "off"
            for s in subjects:  # warm-up: JIT compiles, autotuning, clocks
                self._batch(s, fresh, params, 3, flush, checked=False)
                s.bound = Bound()
            with self._guard(trusted):
                empty_judged, empty_reported = empty_call_us(trusted, flush)
            count = max(2, 8 // per_go) if device.type == "cuda" else 2  # windows
            started = time.perf_counter()
            samples = {s.name: s.bound.reported_us for s in subjects}
            rep = 0
            cpu_opts = opts.model_copy(update={"min_reps": 3}) if device.type != "cuda" else opts
            while not _done(samples, cpu_opts, started):
                order = subjects[rep % len(subjects):] + subjects[:rep % len(subjects)]
                for s in order:
                    reset_persisting_l2(device)
                    self._batch(s, fresh, params, count, flush, checked=checked and s is subjects[0])
                rep += 1
            self.laps.lap("timing_s")
            findings = list(result.integrity)
            found, merely_wrong = self._recheck(config, fresh, subjects[0], cand_bench) if checked else ([], None)
            self.laps.lap("recheck_s")
        except (CandidateFailed, ProtocolViolation) as exc:
            self._fail(config, exc, "timing failed: ")
            return
        except RunnerEnded as exc:
            self._ended_on(config, exc)
            return
        finally:
            self.candidate.resume()
            for b in benches:
                b.close()
        # The chain's cost. On a GPU from the baseline's runner, trusted to report honestly, on calls with a
        # kernel (a few us more than an empty one's); on the CPU, or without a baseline, from an empty call
        # (there the judge measures CPU time, which waiting for a busy CPU leaves out of the runner's wall time).
        calibrated = trusted_overhead_us(trusted) if device.type == "cuda" and trusted is not subjects[0] else None
        chain = calibrated if calibrated is not None else empty_judged - empty_reported
        stats = {s.name: self._stats(s, chain, empty_reported) for s in subjects}
        cand = stats["candidate"]
        findings += found
        if checked and cand.judged_us is not None:
            findings += bound_findings(cand, config.name, device.type == "cuda")
        if checked and len(subjects) > 1:
            findings += contention_findings(subjects[0].bound.flush_us, subjects[1].bound.flush_us, config.name)
        update: dict[str, Any] = {"candidate": cand, "baseline": stats.get("baseline"),
                                  "compiled": stats.get("compiled"), "integrity": _unique(findings)}
        wrong = [f for f in found if f.defence in ("timed_recheck", "stale_results")]
        if merely_wrong:
            update.update(status="fail", message="wrong on an input drawn for a timed call (called again, checked: "
                          f"the same answer): {merely_wrong}")
        elif wrong:
            update.update(status="fail", message=wrong[0].evidence)
        # What the speedup uses: the reported median, never under the judge's bound (a report shaved within the
        # bound's margin gains nothing more) nor under MIN_US (a time of zero breaks a geometric mean).
        scored = max(cand.median_us, bound_us(cand, device.type == "cuda"), MIN_US)
        update["candidate"] = cand = cand.model_copy(update={"scored_us": scored})
        if "baseline" in stats:
            update["speedup"] = stats["baseline"].median_us / scored
        if "compiled" in stats:
            update["speedup_vs_compiled"] = stats["compiled"].median_us / scored
        update["achieved_tflops"] = result.flops / (scored * 1e-6) / 1e12
        update["achieved_gbps"] = result.bytes / (scored * 1e-6) / 1e9
        self.results[config.name] = result.model_copy(update=update)

    def _batch(self, subject: Subject, fresh: Fresh, params: dict, count: int, flush: Callable[..., None],
               checked: bool) -> None:
        """One batch of a subject. While a trusted runner is timed, the candidate's processes are stopped (no
        CPU hog between its own calls); a trusted runner's failure is ours, except running out of time."""
        if subject.link is self.candidate:
            run_batch(subject, fresh, params, count, flush, self.rng, checked=checked)
            return
        self.candidate.suspend()
        try:
            with self._guard(subject):
                run_batch(subject, fresh, params, count, flush, self.rng, checked=checked)
        finally:
            self.candidate.resume()

    @contextlib.contextmanager
    def _guard(self, subject: Subject) -> Iterator[None]:
        """A trusted runner failing is an infrastructure error, never the candidate's; running out of the
        evaluation's time is the evaluation's timeout (the candidate may have spent it)."""
        if subject.link is self.candidate:
            yield
            return
        try:
            yield
        except RunnerEnded as exc:
            if exc.status == "timeout":
                raise
            raise InfraError(f"the task's {subject.link.role} runner failed: {exc}") from None
        except (CandidateFailed, ProtocolViolation) as exc:
            raise self._starved(subject.link.role, exc) or InfraError(
                f"the task's {subject.link.role} runner failed: {exc}") from None

    def _starved(self, role: str, exc: Exception) -> RunnerEnded | None:
        """A trusted runner out of GPU memory while the candidate's runner holds it is the candidate's doing
        (a failure of ours would be `infra`, never counted against it). Whose memory it was is measured, not
        asked: the candidate's runner is killed and the driver's free memory read before and after."""
        if not (isinstance(exc, CandidateFailed) and exc.oom and is_gpu_oom(exc.error)):
            return None
        if self.device.type != "cuda":
            return None
        before = torch.cuda.mem_get_info(self.device)[0]
        self.candidate.kill()
        freed, end = 0, time.monotonic() + STARVED_WAIT_S
        while freed < STARVED_BYTES and time.monotonic() < end:  # the driver frees it once the process is gone
            time.sleep(0.1)
            freed = max(freed, torch.cuda.mem_get_info(self.device)[0] - before)
        return starvation(role, freed)

    def _stats(self, subject: Subject, chain: float, empty: float) -> TimingStats:
        """The reported times less the empty region; the judge's own less the chain and the same region."""
        on_gpu = self.device.type == "cuda"
        reported = [max(us - empty, 0.0) for us in subject.bound.reported_us]
        stats = summarize(reported, "gated_events" if on_gpu else "cpu_wall", comparable=on_gpu)
        judged = ((statistics.median(subject.bound.judged_us) - chain) / subject.per_go - empty
                  if subject.bound.judged_us else None)
        return stats.model_copy(update={"judged_us": judged, "overhead_us": chain + empty,
                                        "input_sets": len(reported)})

    def _recheck(self, config: Config, fresh: Fresh, subject: Subject,
                 bench: Bench) -> tuple[list[IntegrityFinding], str | None]:
        """The kept timed calls (a uniform draw over the phase, Bound.keep) against the reference on their own
        (fresh) inputs and the float64 oracle: a kernel exact only on some calls cannot tell which are kept. A wrong timed call that answers the previous call's inputs is stale_results;
        otherwise it is called again, checked, on the same inputs: wrong again, the kernel is merely wrong on
        that draw (the config fails, no cheat is claimed); right this time, the timed path computed something
        else (timed_recheck)."""
        names = [o.name for o in self.task.spec.signature.outputs]
        params = params_of(self.task, config)
        found: list[IntegrityFinding] = []
        merely_wrong = None
        for sample in subject.bound.samples:
            inputs = fresh.inputs(sample.call)
            refs = reference_outputs(self.ref, inputs, params)
            wrong = self._first_wrong(config, sample.outputs, refs)
            if wrong:
                stale = sample.previous is not None and self._first_wrong(
                    config, sample.outputs, reference_outputs(self.ref, fresh.inputs(sample.previous), params)) is None
                if stale:
                    found.append(finding("stale_results", config.name, "a timed call answered the previous call's "
                                         f"inputs, not its own: {wrong}. Compute from the inputs on every call; "
                                         "never keep results between calls"))
                    break
                checked, _ = self._checked_call(bench, inputs, params)
                again = self._first_wrong(config, checked, refs)
                if again:
                    merely_wrong = again
                    break
                found.append(finding("timed_recheck", config.name, "a timed call (fresh inputs, checked after "
                                     f"the fact) computed a wrong result where a checked call on the same inputs "
                                     f"was right: {wrong}"))
                break
            if self.job.integrity != "off":
                found += self._precision(inputs, params, sample.outputs, refs, names, config.name)
        subject.bound.samples.clear()
        return _unique(found), merely_wrong

    def _checked(self, config: Config, spec: TensorSpec, out: torch.Tensor, ref: torch.Tensor,
                 tol: Tolerance) -> OutputCheck:
        check = check_output(spec, out, ref, tol)
        if spec.check == "sample":
            self.draws.setdefault(config.name, {}).setdefault(spec.name, []).append(check)
        return check

    def _more_draws(self, config: Config, bench: Bench) -> None:
        """Sampled outputs of few draws a call (batch 1): checked calls on further seeds until the config has
        MIN_DRAWS draws to pool, so greedy decoding cannot hide in calls of one draw each."""
        seed = max(self.job.seeds, default=0) + 1
        while any(sum(c.total for c in checks) < MIN_DRAWS
                  for checks in self.draws.get(config.name, {}).values()) and seed < EXTRA_SEEDS_MAX:
            case = Case(self.task, self.ref, config, seed, self.device)
            outs, _ = self._checked_call(bench, case.inputs, case.params)
            refs = reference_outputs(self.ref, case.inputs, case.params)
            for spec, out, r in zip(self.task.spec.signature.outputs, outs, refs, strict=True):
                if spec.check != "sample":
                    continue
                check = self._checked(config, spec, out, r, self.task.spec.tolerance.for_dtype(
                    resolve_dtype(spec.dtype, config)))
                if not check.ok:
                    self.results[config.name] = self.results[config.name].model_copy(update={
                        "status": "fail", "message": f"seed {seed} (a further call for draws): {describe(check)}"})
                    return
            seed += 1

    def _pool_draws(self) -> None:
        """Sampled outputs once more, over every call of a config that was looked at (the checks and the
        kept timed calls): at batch 1 each call has one draw, and argmax passes any test of one draw."""
        for name, outputs in self.draws.items():
            result = self.results.get(name)
            if result is None or result.status != "pass":
                continue
            for output, checks in outputs.items():
                pooled = pooled_samples(output, checks)
                if pooled is not None and not pooled.ok:
                    self.results[name] = result.model_copy(update={
                        "status": "fail", "message": f"over the {len(checks)} calls looked at: {describe(pooled)}"})
                    break

    def _first_wrong(self, config: Config, outs: list[torch.Tensor], refs: list[torch.Tensor]) -> str | None:
        for spec, out, r in zip(self.task.spec.signature.outputs, outs, refs, strict=True):
            tol = self.task.spec.tolerance.for_dtype(resolve_dtype(spec.dtype, config))
            check = self._checked(config, spec, out, r, tol)
            if not check.ok:
                return describe(check)
        return None


def _unique(findings: list[IntegrityFinding]) -> list[IntegrityFinding]:
    seen, out = set(), []
    for f in findings:
        if (f.defence, f.evidence) not in seen:
            seen.add((f.defence, f.evidence))
            out.append(f)
    return out


def trace(job: CompileJob, link: RunnerLink, progress: Callable[[dict], None]) -> dict:
    """The compile tool's trace: one call on the config's seed-0 inputs, its Triton launches compiled."""
    device = torch.device("cuda", 0) if job.backend == "cuda" else torch.device("cpu")
    task = load_task(Path(job.task_root))
    config = task.config(job.config)
    case = Case(task, import_reference(task), config, 0, device)
    link.ask(Load(name="candidate", kernel=job.candidate, signature=signature_of(task)), Done)
    bench = Bench(link, Layout(task, config, case.inputs), device)
    try:
        for dst, src in zip(bench.inputs, case.inputs, strict=True):
            dst.copy_(src)
        progress({"stage": "trace"})
        traced = link.ask(Trace(kernel="candidate", arch=job.arch, params=case.params), Traced)
    finally:
        bench.close()
    return {"kernels": traced.kernels, "diagnostics": traced.diagnostics, "log": traced.log}
