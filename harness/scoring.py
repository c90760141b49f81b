"""Final scoring: a session's last submission, in a fresh worker, on the visible AND hidden configs.

    submission folder ──take_snapshot──▶ evaluate(configs="all", fresh worker) ──▶ Evaluation
        ──score_evaluation──▶ Score (verdict, correct / generalizes, speedups apart, peak fraction, flags)

Verdicts (docs/evaluation-rules.md, "Scoring"):
    no submission                                   no_submission
    does not build                                  compile_error
    the candidate crashed, exited, ran out of memory, raised   incorrect   (hung: timeout)
    wrong on a visible config                       incorrect, correct=false
    right on the visible configs, wrong on a hidden one        incorrect, correct=true, generalizes=false
    right everywhere it ran                         pass, with the speedup
    the engine could not evaluate (`infra`, `not_run`, `cancelled`) or our code raised   infra_error:
        never the agent's failure, never a speedup of 1.0

Timing is `careful` on a GPU; on the cpu backend `quick`: the interpreter's timings are labelled not
comparable anyway, and careful timing there only makes the run slow. Configs too large for the interpreter
are skipped and said so; `generalizes` is then decided on the hidden configs that ran.

Runtime defences (toolkit/integrity.py, toolkit/runtime.py): a finding that catches a cheat makes the
verdict `flagged`, before any other verdict of a candidate that ran, with the evidence as flags
(`runtime:DEFENCE CONFIG: what it saw`); an ending by exit() is `runtime:process_exit`. Audit-only findings
(nondeterminism) are flags and leave the verdict alone.

Flags that leave the verdict as it is:
    speedup>10x:CONFIG=X     a config more than 10x faster than the baseline (comparable timings only)
    peak_fraction>1:CONFIG=X faster than the device's measured ceiling: physically impossible
    no_op                    the submission's kernel is the baseline (or the stub) byte for byte: no credit
    hash_mismatch            the frozen submission's content hash differs from the one the ledger recorded
    tripwire:KIND FILE:LINE  a pattern that a known reward hack needs, with the line and the reason
                             (toolkit/tripwires.py); for a person to audit, never a verdict by itself
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from crucible.toolkit.evaluation import Backend, EvalRequest, evaluate, geomean, judge_pool
from crucible.toolkit.results import EVALUATOR_VERSION, ConfigResult, Evaluation, IntegrityFinding
from crucible.toolkit.task import Task
from crucible.toolkit.tripwires import flags as tripwire_flags
from crucible.toolkit.worker import WorkerPool
from crucible.toolkit.workspace import WorkspaceError, take_snapshot

from .models import AUDIT_PREFIX, Placement, Score
from .placement import (
    Device,
    DeviceError,
    Placed,
    Placer,
    Route,
    choose_devices,
    list_gpus,
    route,
    score_placed,
)

SPEEDUP_FLAG = 10.0
PEAK_FLAG = 1.0
INFRA_STATUSES = {"infra", "not_run", "cancelled"}
CANDIDATE_FAILURES = {"crash", "exit", "oom", "error"}


def scoring_request(backend: Backend, gpu: int | None = None, timeout_s: float | None = None) -> EvalRequest:
    return EvalRequest(configs="all", timing="quick" if backend == "cpu" else "careful", backend=backend,
                       integrity="full", gpu=gpu, timeout_s=timeout_s)


def score_session(task: Task, submission: Path | None, backend: Backend, *, expected_hash: str | None = None,
                  snapshots: Path | None = None, pool: WorkerPool | None = None, gpu: int | None = None,
                  timeout_s: float | None = None, cancel: threading.Event | None = None,
                  ) -> tuple[Score, Evaluation | None]:
    """Score a frozen submission folder (None: the agent never submitted). Never the session's own pool:
    a judge and runners that no session's candidate has touched (`pool`: scoring's own, started ahead, for
    the same `gpu`). `timeout_s` overrides the task's time limit (the reward service's per-request one)."""
    if submission is None:
        return Score(verdict="no_submission", message="the agent never submitted",
                     evaluator_version=EVALUATOR_VERSION, hidden_configs=len(task.configs("hidden")),
                     hidden_checked=0), None
    try:
        snapshot = take_snapshot(task, submission, store=snapshots)
    except WorkspaceError as exc:
        # The frozen copy is ours, written by the server: if it cannot be read, the fault is ours.
        return Score(verdict="infra_error", message=f"the submission at {submission} cannot be read: {exc}",
                     evaluator_version=EVALUATOR_VERSION), None
    ev = evaluate(task, snapshot, scoring_request(backend, gpu, timeout_s), pool=pool, cancel=cancel)
    flags = []
    if expected_hash is not None and expected_hash != snapshot.digest:
        flags.append(f"hash_mismatch: ledger {expected_hash[:12]}, frozen copy {snapshot.digest[:12]}")
    if is_no_op(task, submission):
        start = task.spec.baseline or task.spec.stub
        flags.append(f"no_op: {task.spec.candidate} is {start} byte for byte")
    flags += tripwire_flags(task, snapshot.root)
    return score_evaluation(task, ev, flags), ev


class Scorer(Protocol):
    """Where final scoring runs: this host's GPUs (LocalScoring) or a Ray cluster's (harness/ray_backend.py).
    Either gives the verdict score_session gives, and says where it ran."""

    @property
    def where(self) -> str:
        """For the run's first line: which GPUs or which cluster."""
        ...

    def score(self, task: Task, submission: Path | None, backend: Backend, *, expected_hash: str | None = None,
              timeout_s: float | None = None, cancel: threading.Event | None = None) -> Placed:
        """`timeout_s` overrides the task's time limit; `cancel` stops the evaluation (status cancelled)."""
        ...

    def close(self) -> None: ...


class ScoringPools:
    """Final scoring's judge pools, one per backend and GPU, for a run's lifetime (close them at its end):
    each GPU keeps a judge started ahead."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int | None], WorkerPool] = {}
        self._lock = threading.Lock()

    def get(self, backend: Backend, gpu: int | None = None) -> WorkerPool:
        with self._lock:
            if (backend, gpu) not in self._pools:
                self._pools[backend, gpu] = judge_pool(backend, gpu)
            return self._pools[backend, gpu]

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()


class LocalScoring:
    """Final scoring on this host: each evaluation on a free GPU of `gpus` (None: every visible one), its
    judge started ahead per GPU; a GPU that fails leaves rotation and the evaluation runs on another
    (harness/placement.py). A task's `[hardware]` picks the kind of GPU (placement.route): a host with both
    NVIDIA and AMD GPUs serves each task on the kind it needs."""

    def __init__(self, gpus: list[int] | None = None, *, devices: dict[str, list[Device]] | None = None) -> None:
        self.gpus = gpus
        self.pools = ScoringPools()
        self._placers: dict[str, Placer] = {}
        self._devices = devices
        """backend -> the devices to use, declared (tests) instead of listed from the driver; when given,
        the only GPUs there are."""
        self._none: set[str] = set()
        """GPU backends this host turned out to have no GPU of (listed once)."""
        self._lock = threading.Lock()

    def placer(self, backend: Backend) -> Placer:
        """This backend's Placer; raises DeviceError when `gpus` are not on this host."""
        with self._lock:
            if backend not in self._placers:
                devices = (self._devices or {}).get(backend)
                if devices is None:
                    devices = choose_devices(backend, self.gpus)
                self._placers[backend] = Placer(backend, devices)
            return self._placers[backend]

    def kinds(self, backend: Backend) -> set[Backend]:
        """The GPU backends that have GPUs for this run: the run's own (`backend`), and any other this host
        has (declared, or listed once: `--gpus` names the run backend's GPUs only)."""
        if self._devices is not None:
            return {b for b, devices in self._devices.items() if devices}  # type: ignore[misc]
        found: set[Backend] = {backend} if backend != "cpu" else set()
        if backend == "cpu":
            return found
        for other in ("cuda", "rocm"):
            if other == backend or other in self._none:
                continue
            if other in self._placers:
                found.add(other)
                continue
            try:
                devices = list_gpus(other)
            except DeviceError:
                devices = []
            with self._lock:
                if devices and other not in self._placers:
                    self._placers[other] = Placer(other, devices)
                elif not devices:
                    self._none.add(other)
            if devices:
                found.add(other)
        return found

    @property
    def where(self) -> str:
        placers = list(self._placers.values())
        devices = [d for p in placers for d in p.devices]
        if not devices:
            return "this host"
        return "this host's GPU " + ", ".join(f"{d.index} ({d.name})" for d in devices)

    def score(self, task: Task, submission: Path | None, backend: Backend, *, expected_hash: str | None = None,
              timeout_s: float | None = None, cancel: threading.Event | None = None) -> Placed:
        if submission is None:  # nothing to evaluate, so nothing to place
            score, ev = score_session(task, None, backend)
            return Placed(score=score, evaluation=ev, placement=Placement(attempts=0))
        way = route(task.spec, backend, self.kinds(backend))
        if way.backend is None:
            return refused(way.refusal)
        on: Backend = way.backend

        def attempt(device: Device | None) -> tuple[Score, Evaluation | None]:
            gpu = device.index if device is not None else None
            return score_session(task, submission, on, expected_hash=expected_hash,
                                 pool=self.pools.get(on, gpu), gpu=gpu, timeout_s=timeout_s, cancel=cancel)

        placed = score_placed(self.placer(on), attempt, cancel)
        return routed(placed, way)

    def close(self) -> None:
        self.pools.close()


def refused(message: str) -> Placed:
    """A task this run has no fit GPU for: infra_error (never the agent's failure), nothing evaluated."""
    return Placed(score=Score(verdict="infra_error", message=message, evaluator_version=EVALUATOR_VERSION),
                  evaluation=None, placement=Placement(attempts=0, note=message))


def routed(placed: Placed, way: Route) -> Placed:
    """The Placement with the route's kind of hardware recorded (hip_on_cuda, a fallback's note first)."""
    hip_on_cuda = None if placed.evaluation is None else way.hip_on_cuda  # None: nothing ran
    note = "; ".join(n for n in (way.note, placed.placement.note) if n)
    return placed.model_copy(update={"placement": placed.placement.model_copy(
        update={"hip_on_cuda": hip_on_cuda, "note": note})})


def is_no_op(task: Task, submission: Path) -> bool:
    start = task.spec.baseline or task.spec.stub
    candidate = submission / task.spec.candidate
    return start is not None and candidate.is_file() and candidate.read_bytes() == task.file(start).read_bytes()


def score_evaluation(task: Task, ev: Evaluation, flags: list[str] | None = None) -> Score:
    """The verdict of one final Evaluation (a pure function of it, so every branch is testable)."""
    flags = list(flags or [])
    visible_names = {c.name for c in task.configs("visible")}
    hidden = [c for c in ev.configs if c.config not in visible_names]
    base = {"submission_hash": ev.snapshot, "evaluator_version": ev.evaluator_version, "flags": flags,
            "timing_comparable": ev.timing_comparable, "hidden_configs": len(task.configs("hidden")),
            "hidden_checked": sum(c.status != "skipped" for c in hidden)}
    if ev.status in INFRA_STATUSES:
        return Score(verdict="infra_error", message=f"the evaluation could not run ({ev.status}): {ev.message}",
                     compiled=ev.status != "compile_error", **base)
    if ev.status == "compile_error":
        return Score(verdict="compile_error", message=ev.message, **base)
    # The runtime defences come first: a caught cheat is `flagged` with its evidence, whatever else it got
    # right or wrong or however it ended, so a person can audit it (docs/evaluation-rules.md); a kernel
    # caught on one config and then hanging on the next must not end as a mere timeout.
    findings = [*ev.integrity, *(f for c in ev.configs for f in c.integrity)]
    if ev.status == "exit":
        findings.append(IntegrityFinding(defence="process_exit", evidence=ev.message[:300]))
    flags += [f.flag() for f in findings]
    caught = [f for f in findings if f.caught]
    if caught:
        defences = sorted({f.defence for f in caught})
        return Score(verdict="flagged", message=f"caught by {', '.join(defences)}: {caught[0].flag()}",
                     compiled=True, **base)
    visible = [c for c in ev.configs if c.config in visible_names]
    if ev.status == "timeout":  # wrong before it ran out of time: incorrect; else the timeout it is
        wrong = [c for c in ev.configs if c.status == "fail"]  # not "error": the timed-out config's own
        if wrong:
            return Score(verdict="incorrect", message=f"wrong on {', '.join(c.config for c in wrong)} before the "
                         f"evaluation ran out of time: {ev.message}", compiled=True, correct=False, **base)
        return Score(verdict="timeout", message=ev.message, compiled=True, **base)
    if ev.status in CANDIDATE_FAILURES and not ev.configs:
        # Died before any config reported (a crash on import, an exit): nothing is known to be right.
        return Score(verdict="incorrect", message=f"{ev.status}: {ev.message}", compiled=True, correct=False,
                     **base)
    correct = _all_right(visible)
    generalizes = _all_right(hidden)
    ran_hidden = [c for c in hidden if c.status != "skipped"]
    where = (f"visible {_count(visible)}; hidden {_count(hidden)}"
             + ("" if ran_hidden or not hidden else " (generalization unchecked on this backend)"))
    sp_visible = geomean([c.speedup for c in visible if c.speedup])
    sp_hidden = geomean([c.speedup for c in hidden if c.speedup])
    sp_all = geomean([c.speedup for c in ev.configs if c.speedup])
    speeds = {"speedup_visible": sp_visible, "speedup_hidden": sp_hidden, "speedup_against": ev.speedup_against}
    flags += physics_flags(ev)
    base["flags"] = flags
    if correct is False:
        return Score(verdict="incorrect", message=f"wrong on the visible configs ({where}): {ev.message}",
                     compiled=True, correct=False, generalizes=generalizes, **speeds, **base)
    if generalizes is False:
        return Score(verdict="incorrect", message=f"right on the visible configs, wrong on hidden ones "
                     f"({where}): {ev.message}", compiled=True, correct=correct, generalizes=False, **speeds,
                     **base)
    if correct is None and generalizes is None:
        return Score(verdict="infra_error", message=f"no config could run on this backend ({where})",
                     compiled=True, **base)
    if ev.status in CANDIDATE_FAILURES:
        # Every config that reported was right, then the candidate's process died (or the judge did, of what
        # the candidate did to it): an evaluation it does not let finish is not a pass, nor our failure (a
        # kernel that would be caught or slow in the phases left would have everything to gain).
        return Score(verdict="incorrect", message=f"the evaluation did not finish ({ev.status}) after {where} "
                     f"were right: {ev.message}", compiled=True, correct=False, generalizes=generalizes,
                     **speeds, **base)
    if ev.status != "ok":  # every config that ran passed, yet the status says otherwise: a bug of ours
        return Score(verdict="infra_error", message=f"inconsistent evaluation: status {ev.status} with every "
                     f"config right ({where}): {ev.message}", compiled=True, **base)
    timing = "" if ev.timing_comparable else "; timings not comparable on this backend"
    speed = "" if sp_all is None else f"; speedup {sp_all:.3g}x against the {ev.speedup_against}{timing}"
    return Score(verdict="pass", message=f"correct ({where}){speed}", compiled=True, correct=True,
                 generalizes=generalizes, speedup=sp_all, peak_fraction=_geomean_of(ev.configs, "peak_fraction"),
                 sol_fraction=_geomean_of(ev.configs, "sol_fraction"), **speeds, **base)


def _all_right(configs: list[ConfigResult]) -> bool | None:
    """True when every config that ran passed; None when none ran (all skipped, or none asked)."""
    ran = [c for c in configs if c.status != "skipped"]
    return all(c.status == "pass" for c in ran) if ran else None


def _count(configs: list[ConfigResult]) -> str:
    ran = [c for c in configs if c.status != "skipped"]
    passed = sum(c.status == "pass" for c in ran)
    skipped = len(configs) - len(ran)
    return f"{passed}/{len(ran)} right" + (f", {skipped} skipped as too large for this backend" if skipped else "")


def _geomean_of(configs: list[ConfigResult], field: str) -> float | None:
    fractions = [getattr(c, field) for c in configs if getattr(c, field) is not None]
    return geomean(fractions) if fractions else None


def physics_flags(ev: Evaluation) -> list[str]:
    """Figures too good to be true; only on comparable timings (the interpreter's say nothing). The peak
    fraction is against the datasheet: the measured ceiling is a practical one that good kernels may pass."""
    if not ev.timing_comparable:
        return []
    flags = [f"{AUDIT_PREFIX}{SPEEDUP_FLAG:g}x: {c.config} {c.speedup:.3g}x" for c in ev.configs
             if c.speedup is not None and c.speedup > SPEEDUP_FLAG]
    reported = [(c, c.sol_us / c.candidate.median_us) for c in ev.configs  # the runner's own figure, unraised
                if c.sol_us and c.candidate is not None and c.candidate.median_us > 0]
    flags += [f"peak_fraction>{PEAK_FLAG:g}: {c.config} {fraction:.3g} of the datasheet peak"
              for c, fraction in reported if fraction > PEAK_FLAG]
    return flags
