"""The runner: `crucible run` and `crucible score`.

    RunConfig ──select tasks (glob or suite; what this backend can run)──▶ matrix: task x repeat
      ──preflight (the agent's CLI / key; the sandbox)──▶ run folder + store (or --resume: same config digest)
      ──K sessions at a time (harness/session.py), each row written when it starts and, all of it, at its end
      ──▶ a line per finished session, a status line on a TTY ──▶ the leaderboard (harness/report.py)

    <out>/ (default ./crucible-runs/<run id>/)
      store.db            harness/store.py, docs/store.md
      sessions/<id>/      harness/session.py

Nothing is created before the preflight passes, so a missing CLI or key leaves nothing half-run. Resume:
finished sessions (state `done`) are kept; `pending`, `running` (the run died under them) and `infra_error`
ones are run again from scratch.
"""

from __future__ import annotations

import json
import platform
import shlex
import subprocess
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TextIO

from crucible.toolkit.evaluation import Backend, resolve_backend
from crucible.toolkit.results import EVALUATOR_VERSION
from crucible.toolkit.task import Task, discover_tasks, find_task
from crucible.toolkit.toolchains import get_toolchain

from .agents import Agent, AgentUnavailable, get_agent
from .models import RunConfig, SessionSpec
from .placement import DeviceError
from .render import speedup_text, timing_note
from .scoring import LocalScoring, Scorer
from .session import SandboxPrefix, SessionInterrupted, evaluator_digest, now, run_session, score_last
from .store import STORE_FILE, RunRow, ScoreRow, SessionRecord, Store, StoreError
from .suites import SuiteError, select

DEFAULT_OUT = Path("crucible-runs")


class RunError(Exception):
    """The run cannot start as asked (bad input, agent unavailable, changed config); exit code 2."""


# ---------------------------------------------------------------- what to run


def runnable(task: Task, backend: Backend) -> bool:
    """The cpu backend runs only languages with an interpreter there (Triton's); the others need their GPU,
    and a language whose optional package is missing here (the CuTe DSL, TileLang) runs nowhere: its
    sessions would fail on our account, not the agent's."""
    toolchain = get_toolchain(task.spec.language)
    return (backend != "cpu" or toolchain.runs_on_cpu) and toolchain.available() is None


def choose_tasks(config: RunConfig, backend: Backend) -> tuple[list[Task], list[str]]:
    """The tasks to run and the ids left out because this machine cannot run them."""
    tasks, errors = discover_tasks()
    if errors:
        raise RunError("broken tasks in the suite:\n" + "\n".join(str(e) for e in errors))
    try:
        chosen = select(tasks, pattern=config.tasks, suite=config.suite)
    except SuiteError as exc:
        raise RunError(str(exc)) from None
    if not chosen:
        what = f"suite {config.suite!r}" if config.suite else f"--tasks {config.tasks!r}"
        raise RunError(f"{what} matches no task; known: {', '.join(t.id for t in tasks)}")
    skipped = [t.id for t in chosen if not runnable(t, backend)]
    chosen = [t for t in chosen if runnable(t, backend)]
    if not chosen:
        raise RunError(f"none of the chosen tasks can run on the {backend} backend (they need a GPU, or a "
                       f"language package this machine lacks): {', '.join(skipped)}")
    return chosen, skipped


def matrix(config: RunConfig, run_id: str, tasks: list[Task]) -> list[SessionSpec]:
    return [SessionSpec(run_id=run_id, task=t.id, agent=config.agent, model=config.model, repeat=r)
            for r in range(1, config.repeats + 1) for t in tasks]


# ---------------------------------------------------------------- preflight: agent and sandbox


@dataclass(frozen=True)
class Sandbox:
    mode: str
    """Recorded with the run: `bubblewrap <version>`, `none (--no-sandbox)`, `in-process (...)`."""
    prefix: SandboxPrefix


def load_agent(config: RunConfig) -> Agent:
    try:
        agent = get_agent(config.agent)
    except ImportError as exc:
        raise RunError(f"agent {config.agent} is not available in this installation: {exc}") from None
    except AgentUnavailable as exc:
        raise RunError(str(exc)) from None
    try:
        agent.preflight(config)
    except AgentUnavailable as exc:
        raise RunError(f"agent {config.agent} cannot run here: {exc}") from None
    return agent


IN_PROCESS_AGENTS = {"scripted", "api"}
"""Agents that run inside the harness's process (no CLI to sandbox): their only reach is the MCP tools and,
for `api`, file tools confined to the workspace (harness/agents/api.py)."""


def choose_sandbox(agent: Agent, config: RunConfig) -> Sandbox:
    """CLI agents run inside the agent sandbox (harness/sandbox.py); where none can be set up the run refuses
    unless --no-sandbox was given. In-process agents need none, and the run records that."""
    if agent.name in IN_PROCESS_AGENTS:
        return Sandbox(mode=f"in-process ({agent.name} agent: no CLI to sandbox)", prefix=lambda ws, home: [])
    if not config.sandbox:
        return Sandbox(mode="none (--no-sandbox)", prefix=lambda ws, home: [])
    from .sandbox import agent_sandbox_prefix, probe_agent_sandbox

    caps = probe_agent_sandbox()
    if not caps.available:
        raise RunError(f"no agent sandbox can be set up here: {caps.reason}")
    tools: list[Path] = agent.sandbox_tools() if hasattr(agent, "sandbox_tools") else []

    def prefix(workspace: Path, home: Path) -> list[str]:
        return agent_sandbox_prefix(workspace=workspace, home=home, tools_ro=tools, gpu=config.agent_gpu, caps=caps)

    return Sandbox(mode=caps.mechanism or "bubblewrap", prefix=prefix)


# ---------------------------------------------------------------- the run folder


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def device_name(backend: Backend) -> str:
    if backend == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20, check=True).stdout.strip().splitlines()
            return out[0] if out else "NVIDIA GPU"
        except (OSError, subprocess.SubprocessError):
            return "NVIDIA GPU (name unknown)"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{backend}: {cpu}"


def latest_run(parent: Path) -> Path | None:
    runs = sorted(parent.glob(f"*/{STORE_FILE}"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else None


def command_args(config: RunConfig) -> list[str]:
    """The `crucible run` options that make this config (what to type to resume it)."""
    default = RunConfig()
    args = ["--agent", config.agent]
    if config.model is not None:
        args += ["--model", config.model]
    if config.suite is not None:
        args += ["--suite", config.suite]
    elif config.tasks != default.tasks:
        args += ["--tasks", config.tasks]
    for flag, value, base in (("--repeats", config.repeats, default.repeats),
                              ("--budget-usd", config.budget_usd, default.budget_usd),
                              ("--time-limit", config.time_limit_s, default.time_limit_s),
                              ("--concurrency", config.concurrency, default.concurrency)):
        if value != base:
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    args += ["--no-sandbox"] if not config.sandbox else []
    args += ["--agent-gpu"] if config.agent_gpu else []
    args += ["--gpus", ",".join(map(str, config.gpus))] if config.gpus is not None else []
    args += ["--ray", config.ray] if config.ray is not None else []
    return args


def open_run(config: RunConfig, *, out: Path | None, resume: bool, backend: Backend, sandbox: Sandbox) -> tuple[Path, Store, RunRow]:
    """A new run folder with its store, or the one to resume (refusing a changed config)."""
    digest = config.digest()
    if resume:
        run_dir = out if out is not None else latest_run(DEFAULT_OUT)
        if run_dir is None or not (run_dir / STORE_FILE).is_file():
            raise RunError(f"nothing to resume: {run_dir or DEFAULT_OUT} holds no {STORE_FILE}; "
                           "pass the run's folder with --out")
        store = open_store(run_dir)
        row = store.run()
        if row is None:
            store.close()
            raise RunError(f"{run_dir / STORE_FILE} holds no run")
        if row.config_digest != digest:
            changed = {k: (row.config.get(k), v) for k, v in config.model_dump(mode="json").items()
                       if row.config.get(k) != v}
            what = "; ".join(f"{k}: was {a!r}, now {b!r}" for k, (a, b) in changed.items())
            store.close()
            raise RunError(f"the run in {run_dir} was made with a different config ({what}); resume it with "
                           f"the same options: crucible run {shlex.join(row.argv)} --out {run_dir} --resume")
        return run_dir, store, row  # finished_at changes only if a session runs (_run_matrix)
    run_id = f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{digest[:6]}"
    run_dir = out if out is not None else DEFAULT_OUT / run_id
    if (run_dir / STORE_FILE).exists():
        raise RunError(f"{run_dir} already holds a run; continue it with --resume, or pick another --out")
    store = open_store(run_dir)
    row = RunRow(id=run_id, config=config.model_dump(mode="json"), config_digest=digest, argv=command_args(config),
                 crucible_version=_version("kernel-crucible"), evaluator_version=EVALUATOR_VERSION,
                 evaluator_digest=evaluator_digest(), python=platform.python_version(), torch=_version("torch"),
                 triton=_version("triton"), device=device_name(backend), backend=backend, sandbox=sandbox.mode,
                 started_at=now())
    store.put_run(row)
    return run_dir, store, row


# ---------------------------------------------------------------- progress


def open_store(run_dir: Path) -> Store:
    """The run folder's store, created if new; a damaged one is a RunError that says what to do."""
    try:
        return Store(run_dir / STORE_FILE)
    except StoreError as exc:
        raise RunError(str(exc)) from None


def score_speed(record_score: ScoreRow | None) -> str:
    """The speedup of a session line: n/c where its timings say nothing about a GPU."""
    if record_score is None:
        return "-"
    score = record_score.score
    comparable = score.timing_comparable if score.timing_comparable is not None else record_score.backend != "cpu"
    note = timing_note(record_score.backend)
    if score.speedup is not None:
        return speedup_text(score.speedup, comparable, note)
    if score.speedup_visible is not None:
        return f"({speedup_text(score.speedup_visible, comparable, note)} visible)"
    return "-"


def session_line(record: SessionRecord) -> str:
    s, u = record.session, record.usage
    score = record.score.score if record.score else None
    verdict = score.verdict if score else (s.end_reason or s.state)
    speed = score_speed(record.score)
    tokens = u.input_tokens + u.output_tokens
    cost = "-" if u.cost_usd is None else f"${u.cost_usd:.2f}"
    ended = "" if s.end_reason in (None, "finished") else f" [ended: {s.end_reason}]"
    total = ""
    if s.started_at and s.finished_at:
        seconds = (datetime.fromisoformat(s.finished_at) - datetime.fromisoformat(s.started_at)).total_seconds()
        total = f", {seconds:.1f}s with scoring"
    return (f"{s.task} r{s.repeat} {s.agent}/{s.model or 'default'}: {verdict} {speed}{ended} | "
            f"{tokens:,} tokens | {cost} | agent {u.wall_s:.1f}s{total}")


class Progress:
    """A line per finished session; on a TTY also a status line, rewritten in place."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.tty = stream.isatty()
        self.done = 0
        self.running: list[str] = []
        self._lock = threading.Lock()

    def _status(self) -> None:
        if self.tty:
            names = ", ".join(self.running[:3]) + (" ..." if len(self.running) > 3 else "")
            self.stream.write(f"\r\033[K[{self.done}/{self.total} done, {len(self.running)} running] {names}")
            self.stream.flush()

    def started(self, spec: SessionSpec) -> None:
        with self._lock:
            self.running.append(f"{spec.task} r{spec.repeat}")
            if not self.tty:
                print(f"  start {spec.task} r{spec.repeat}", file=self.stream, flush=True)
            self._status()

    def finished(self, spec: SessionSpec, line: str) -> None:
        with self._lock:
            name = f"{spec.task} r{spec.repeat}"
            if name in self.running:
                self.running.remove(name)
            self.done += 1
            prefix = "\r\033[K" if self.tty else ""
            print(f"{prefix}[{self.done}/{self.total}] {line}", file=self.stream, flush=True)
            self._status()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
            self.stream.flush()


# ---------------------------------------------------------------- the run


def leaderboard(run_dir: Path) -> str:
    from .report import ReportError, leaderboard_text

    try:
        return leaderboard_text(run_dir)
    except ReportError as exc:
        return f"(no leaderboard: {exc})"


def open_scorer(config: RunConfig, backend: Backend) -> tuple[Scorer, Backend]:
    """Where final scoring runs, and on which backend: a Ray cluster's GPU evaluators (`--ray`; the backend
    is theirs, unless the config forces one), else this host's GPUs (`--gpus`, default all). Checked
    before anything is written: GPUs that are not there, or a cluster that cannot be reached, are a
    RunError."""
    if config.ray is not None:
        if config.gpus is not None:
            raise RunError("--gpus picks GPUs of this host; with --ray the cluster's evaluators pick theirs")
        from .ray_backend import RayScoring, RayUnavailable

        try:
            ray = RayScoring.connect(config.ray, None if config.backend == "auto" else backend)
        except RayUnavailable as exc:
            raise RunError(str(exc)) from None
        return ray, ray.backend
    scorer = LocalScoring(config.gpus)
    try:
        scorer.placer(backend)
    except DeviceError as exc:
        scorer.close()
        raise RunError(str(exc)) from None
    return scorer, backend


def tools_gpus(scoring: Scorer, backend: Backend) -> list[int]:
    """The GPUs the sessions' own tool calls are spread over, round robin: this host's scoring GPUs. On a
    Ray cluster the sessions run on the head, whose GPU 0 (if any) serves their tools."""
    if backend == "cpu" or not isinstance(scoring, LocalScoring):
        return []
    return [d.index for d in scoring.placer(backend).devices]


def execute(config: RunConfig, *, out: Path | None = None, resume: bool = False, stream: TextIO | None = None) -> int:
    """Run the matrix; returns the exit code (0: every session ended and was scored; 1: some infra error)."""
    stream = stream or sys.stdout  # looked up now: a test may have replaced it
    backend = resolve_backend(config.backend)
    if config.ray is None:
        choose_tasks(config, backend)  # a bad --tasks fails before anything starts
    agent = load_agent(config)
    sandbox = choose_sandbox(agent, config)
    scoring, backend = open_scorer(config, backend)
    try:
        tasks, skipped = choose_tasks(config, backend)
        run_dir, store, run = open_run(config, out=out, resume=resume, backend=backend, sandbox=sandbox)
    except BaseException:
        scoring.close()
        raise
    try:
        return _run_matrix(config, agent, sandbox, run_dir, store, run, tasks, skipped, backend, stream, scoring)
    finally:
        scoring.close()
        store.close()


def _run_matrix(config: RunConfig, agent: Agent, sandbox: Sandbox, run_dir: Path, store: Store, run: RunRow,
                tasks: list[Task], skipped: list[str], backend: Backend, stream: TextIO,
                scoring: Scorer) -> int:
    specs = matrix(config, run.id, tasks)
    store.add_pending(specs)
    states = {s.id: s.state for s in store.sessions()}
    todo = [s for s in specs if states.get(s.id) != "done"]
    if todo and run.finished_at is not None:  # a resumed run is unfinished again until its sessions end
        run = run.model_copy(update={"finished_at": None})
        store.put_run(run)
    print(f"run {run.id} in {run_dir}: {config.agent}/{config.model or 'default'}, {len(tasks)} task(s) x "
          f"{config.repeats} repeat(s) on {backend} ({run.device}); sandbox: {sandbox.mode}; "
          f"scoring: {scoring.where}", file=stream)
    if skipped:
        print(f"  skipped, need a GPU: {', '.join(skipped)}", file=stream)
    if len(todo) < len(specs):
        print(f"  resuming: {len(specs) - len(todo)} session(s) done and kept, {len(todo)} to run", file=stream)
    stream.flush()
    stop = threading.Event()
    progress = Progress(len(todo), stream)
    tool_gpus = tools_gpus(scoring, backend)

    def one(spec: SessionSpec) -> SessionRecord:
        progress.started(spec)
        store.mark_running(spec.id, now(), str(run_dir / "sessions" / spec.id))
        gpu = tool_gpus[todo.index(spec) % len(tool_gpus)] if tool_gpus else None
        record = run_session(spec, config, agent, run_dir=run_dir, backend=backend, sandbox=sandbox.prefix,
                             stop=stop, scorer=scoring, gpu=gpu)
        store.finish_session(record)
        progress.finished(spec, session_line(record))
        return record

    pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="session")
    futures: dict[Future[SessionRecord], SessionSpec] = {pool.submit(one, s): s for s in todo}
    pending = set(futures)
    try:
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for f in finished:
                exc = f.exception()
                if exc is not None and not isinstance(exc, SessionInterrupted):
                    raise exc  # a bug in the runner itself (the session catches its own)
    except KeyboardInterrupt:
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        progress.close()
        print(f"\ninterrupted: finished sessions are kept; continue with: crucible run {shlex.join(run.argv)} "
              f"--out {run_dir} --resume", file=stream)
        return 130
    pool.shutdown(wait=True)
    progress.close()
    if run.finished_at is None:  # a resume with nothing left to run keeps the time it finished
        store.finish_run(run.id, now())
    print("\n" + leaderboard(run_dir), file=stream)
    print(f"\nresults in {run_dir}/ (full report: crucible report {run_dir})", file=stream)
    return _exit_code(store)


def _exit_code(store: Store) -> int:
    bad = []
    for s in store.sessions():
        score = store.score(s.id)
        if s.state != "done" or score is None or score.score.verdict == "infra_error":
            bad.append(s.id)
    return 1 if bad else 0


# ---------------------------------------------------------------- re-scoring


def rescore(run_dir: Path, *, stream: TextIO | None = None, gpus: list[int] | None = None,
            ray: str | None = None) -> int:
    """`crucible score RUN`: score every finished session again from its stored submissions, on this
    machine's backend (on `gpus`, or on a Ray cluster), replacing the score rows."""
    stream = stream or sys.stdout
    if not (run_dir / STORE_FILE).is_file():
        raise RunError(f"no {STORE_FILE} in {run_dir}: pass a `crucible run` folder")
    store = open_store(run_dir)
    scoring: Scorer | None = None
    try:
        run = store.run()
        if run is None:
            raise RunError(f"{run_dir / STORE_FILE} holds no run")
        config = RunConfig.model_validate(run.config)
        scoring, backend = open_scorer(config.model_copy(update={"gpus": gpus, "ray": ray}),
                                       resolve_backend(config.backend))
        done = [s for s in store.sessions() if s.state == "done"]
        print(f"re-scoring {len(done)} session(s) of run {run.id} on {backend}", file=stream, flush=True)
        for n, s in enumerate(done, 1):
            try:
                task = find_task(s.task)
            except KeyError as exc:
                raise RunError(f"session {s.id}: {exc.args[0]}") from None
            folder = Path(s.session_dir)
            row = score_last(task, store.submissions(s.id), backend, folder, scoring)
            store.put_score(row)
            result = folder / "result.json"
            if result.is_file():
                data = json.loads(result.read_text())
                data["score"] = row.model_dump(mode="json")
                result.write_text(json.dumps(data, indent=2))
            sc = row.score
            speed = "" if sc.speedup is None else f" {score_speed(row)}"
            # the whole message, indented on its own lines: it says why, and its end is often the point
            message = "\n".join(f"    {line}" for line in sc.message.splitlines())
            print(f"[{n}/{len(done)}] {s.task} r{s.repeat}: {sc.verdict}{speed}\n{message}", file=stream,
                  flush=True)
        print("\n" + leaderboard(run_dir), file=stream)
        return _exit_code(store)
    finally:
        if scoring is not None:
            scoring.close()
        store.close()
