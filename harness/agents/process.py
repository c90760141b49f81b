"""Running a headless agent CLI for one session, shared by claude_code.py, codex.py and cursor.py.

    CliAgent.run(ctx, cancel)
      write the MCP config (client module's format, token by variable name) ──▶ ctx.home or the workspace
      clean_env: fresh HOME/TMPDIR, the token, the client's own variables, the API key it needs; nothing else
      run_headless: ctx.sandbox_prefix + the CLI, own process group, stdout lines ──▶ ctx.events_path as
                    they come, a watcher may stop it (budget); time limit and cancel kill the whole group
      parse_events ──▶ Usage; the ending ──▶ SessionEnd (finished / budget / time_limit / crash / infra_error)
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from crucible.toolkit.sandbox import RunCgroup
from crucible.toolkit.sandbox import probe as probe_worker_sandbox

from ..clients import ClientError, HeadlessSpec, HttpServer, SessionUsage, find_binary, model_price
from ..models import RunConfig, SessionEnd, Usage
from ..sandbox import NO_GPU_ENV, cli_tools_ro
from . import AgentResult, AgentUnavailable, SessionContext

PASS_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy",
            "http_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS")
"""What a CLI may take from the harness's environment besides its API key: locale, proxies, certificates."""
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
KILL_GRACE_S = 2.0
"""Between SIGTERM and SIGKILL of the group: lets a CLI flush its last event."""
STDERR_TAIL = 4000
LINE_LIMIT_BYTES = 1 << 20
"""A longer stdout line is read in pieces of this size (each then an unparsed line, not a megabyte string
per character the CLI never ended)."""

Stopped = Literal["exited", "time_limit", "cancelled", "budget", "resource_limit"]


class AgentLimits(BaseModel):
    """What one agent may take of the host, so that a runaway (a fork bomb, a disk filler, a memory hog)
    hurts only its own session. Processes and memory through a per-session cgroup where the host lets us
    make one (toolkit/sandbox.py); disk by watching the folders the agent can write."""

    model_config = ConfigDict(frozen=True)

    max_processes: int = 512
    memory_mb: int = 16384
    disk_mb: int = 4096
    """Workspace and HOME together: every entry's blocks (links and folders too)."""
    files: int = 200_000
    """Entries (files, folders, links) in the workspace and HOME: a million empty files take no bytes but
    the host's inodes."""
    output_mb: int = 256
    """What the CLI may write to stdout (its event stream, kept in the harness's memory) and to stderr."""
    disk_check_s: float = 1.0


class ProcessResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    exit_code: int | None
    """None when it was killed (by us)."""
    stopped: Stopped
    """`exited`: on its own; otherwise why we stopped it."""
    wall_s: float
    pgid: int
    """The process group it ran in (all of it is dead when run_headless returns)."""
    lines: list[str]
    """Its stdout, line by line (also written to the events file)."""
    stderr_tail: str
    limit_note: str = ""
    """Why it was stopped at a resource limit (disk, memory), when it was."""


def clean_env(ctx: SessionContext, extra: dict[str, str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The CLI's whole environment: a fresh HOME and TMPDIR, the MCP token, `extra` (the client's variables
    and API key), locale/proxy settings, and nothing else of the harness's (no stray keys or tokens)."""
    environ = dict(os.environ) if environ is None else environ
    tmp = ctx.home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    node = shutil.which("node", path=environ.get("PATH"))
    path = SYSTEM_PATH if node is None else f"{Path(node).parent}:{SYSTEM_PATH}"
    env = {k: environ[k] for k in PASS_ENV if k in environ}
    env |= {"HOME": str(ctx.home), "TMPDIR": str(tmp), "PATH": path, "TERM": "dumb", "NO_COLOR": "1",
            ctx.token_env: ctx.token}
    if not ctx.config.agent_gpu:
        env |= NO_GPU_ENV
    return env | extra


def _kill_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal the whole group; False when it is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def folder_usage(folders: Sequence[Path], stop_bytes: int | None = None,
                 stop_entries: int | None = None) -> tuple[int, int]:
    """(bytes, entries) under `folders`: the blocks of every entry, links and folders included (thousands
    of links with long targets take disk too), links not followed; stops counting past either limit."""
    total = count = 0
    stack = [str(f) for f in folders]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for e in entries:
            count += 1
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                total += e.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                continue
            if (stop_bytes is not None and total > stop_bytes) or (stop_entries is not None and count > stop_entries):
                return total, count
    return total, count


def run_headless(cmd: Sequence[str], *, cwd: Path, env: dict[str, str], events_path: Path, stderr_path: Path,
                 time_limit_s: float, cancel: threading.Event,
                 watch: Callable[[str], bool] | None = None, limits: AgentLimits | None = None,
                 writable: Sequence[Path] = ()) -> ProcessResult:
    """Run `cmd` in its own process group (and session), stdin from /dev/null; write each stdout line to
    `events_path` as it comes; `watch(line)` returning True stops it (reason `budget`). At the time limit
    or on `cancel` the whole group gets SIGTERM, then SIGKILL; and after a normal exit any leftover of the
    group is killed too, so nothing of the agent outlives its session. With `limits`: the processes and
    memory of the whole tree are capped by a cgroup (all of it killed at the end, escapees of the group
    included), and the agent is stopped (reason `resource_limit`) once `writable` holds more than the disk
    limit."""
    events_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lines: list[str] = []
    over_budget = threading.Event()
    cgroup = _agent_cgroup(limits) if limits else None
    prefix = cgroup.join_prefix() if cgroup else []
    disk_limit = limits.disk_mb << 20 if limits and writable else None
    output_limit = (limits or AgentLimits()).output_mb << 20
    next_disk_check = started
    why_limited = ""
    flooded = threading.Event()
    with open(stderr_path, "wb") as err, open(events_path, "w", encoding="utf-8") as events:
        proc = subprocess.Popen([*prefix, *cmd], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)
        pgid = proc.pid

        def pump() -> None:
            assert proc.stdout is not None
            written = 0
            for raw in iter(lambda: proc.stdout.readline(LINE_LIMIT_BYTES), b""):  # type: ignore[union-attr]
                written += len(raw)
                if written > output_limit:  # kept in memory: a flood must stop at a bound, not the host's
                    flooded.set()
                    break
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                lines.append(line)
                events.write(line + "\n")
                events.flush()
                if watch is not None and not over_budget.is_set() and watch(line):
                    over_budget.set()

        reader = threading.Thread(target=pump, name=f"agent-events-{pgid}", daemon=True)
        reader.start()
        deadline = started + time_limit_s
        stopped: Stopped = "exited"
        while proc.poll() is None:
            if cancel.is_set():
                stopped = "cancelled"
            elif over_budget.is_set():
                stopped = "budget"
            elif time.monotonic() >= deadline:
                stopped = "time_limit"
            elif flooded.is_set() or os.fstat(err.fileno()).st_size > output_limit:
                stopped = "resource_limit"
                why_limited = f"stopped: the agent wrote more than {output_limit >> 20} MB to its stdout or stderr"
            elif disk_limit is not None and time.monotonic() >= next_disk_check:
                assert limits is not None
                next_disk_check = time.monotonic() + limits.disk_check_s
                used, entries = folder_usage(writable, stop_bytes=disk_limit, stop_entries=limits.files)
                if used > disk_limit or entries > limits.files:
                    stopped = "resource_limit"
                    why_limited = (f"stopped: the workspace and HOME hold more than the {limits.disk_mb} MB disk "
                                   f"limit or {limits.files:,} files")
            if stopped != "exited":
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
        if stopped != "exited":
            _kill_group(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_GRACE_S)
        _kill_group(pgid, signal.SIGKILL)  # the rest of the group, even after a normal exit
        proc.wait()
        for _ in range(50):  # SIGKILLed processes leave the group a moment later
            if not _group_alive(pgid):
                break
            time.sleep(0.02)
        oom = False
        if cgroup is not None:
            oom = cgroup.oom_killed()
            cgroup.kill_all()  # what left the process group (setsid, double forks) dies too
            cgroup.remove()
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
    if oom and stopped == "exited" and limits is not None:
        stopped, why_limited = "resource_limit", f"the kernel killed the agent at its {limits.memory_mb} MB memory limit"
    exit_code = proc.returncode if stopped == "exited" else None
    with open(stderr_path, "rb") as err_file:  # its tail only: the file may be as large as the limit
        err_file.seek(max(0, stderr_path.stat().st_size - STDERR_TAIL))
        tail = err_file.read().decode("utf-8", errors="replace")
    return ProcessResult(exit_code=exit_code, stopped=stopped, wall_s=time.monotonic() - started, pgid=pgid,
                         lines=list(lines), stderr_tail=tail, limit_note=why_limited)


def _agent_cgroup(limits: AgentLimits) -> RunCgroup | None:
    """The engine's per-run cgroup (toolkit/sandbox.py), reused for the agent; None where the host does
    not let us make one (then only the process group and the disk watch bound the agent)."""
    return RunCgroup.create(probe_worker_sandbox(), memory_mb=limits.memory_mb, max_processes=limits.max_processes)


class BudgetWatch:
    """Stops a CLI that reports no cost of its own once its tokens, priced by the table, pass the budget.
    Re-parses the stream when a line carries usage, at most once per PARSE_EVERY_S (a stream of lines that
    all say "usage" would otherwise cost a parse of the whole stream per line); the session's end reads
    the whole stream again, so a budget passed in the last second is still seen."""

    PARSE_EVERY_S = 1.0

    def __init__(self, parse: Callable[[list[str], str | None], SessionUsage], model: str | None,
                 budget_usd: float) -> None:
        self.parse, self.model, self.budget_usd = parse, model, budget_usd
        self.lines: list[str] = []
        self.cost_usd: float | None = None
        self.parsed_at = -math.inf

    def __call__(self, line: str) -> bool:
        self.lines.append(line)
        if '"usage"' not in line or time.monotonic() < self.parsed_at + self.PARSE_EVERY_S:
            return False
        self.parsed_at = time.monotonic()
        self.cost_usd = self.parse(self.lines, self.model).cost_usd
        return self.cost_usd is not None and self.cost_usd > self.budget_usd


def to_usage(u: SessionUsage, wall_s: float) -> Usage:
    return Usage(turns=u.turns, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                 cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
                 cost_usd=u.cost_usd, cost_source=u.cost_source, wall_s=round(wall_s, 3),
                 foreign_events=u.foreign_events)


class CliAgent:
    """An agent that is a headless CLI. Subclasses name their client module, key and base-URL variables,
    and may add to the environment and the config; the rest (launch, limits, accounting) is here."""

    name: ClassVar[str]
    client: ClassVar[ModuleType]
    """A harness/clients module (claude, codex, cursor)."""
    key_env: ClassVar[str]
    """The API key variable the CLI reads."""
    base_url_env: ClassVar[str | None] = None
    """A variable pointing the CLI at another endpoint (tests' fakes); when set, a dummy key is fine."""
    binaries: ClassVar[tuple[str, ...]] = ()
    """Names to look for, first found wins (default: the client module's BINARY)."""
    own_budget: ClassVar[bool] = False
    """True when the CLI enforces --max-budget-usd itself; otherwise the stream is watched."""
    server_name: ClassVar[str] = "crucible"
    DUMMY_KEY: ClassVar[str] = "crucible-dummy-key"

    # ------------------------------------------------------------------------------------- preflight

    def sandbox_tools(self) -> list[Path]:
        """What the sandbox must show read-only for this CLI (harness/sandbox.py agent_sandbox_prefix)."""
        return cli_tools_ro(self.find_binary())

    def find_binary(self) -> str:
        hint = self.client.INSTALL_HINT
        for name in self.binaries or (self.client.BINARY,):
            with contextlib.suppress(ClientError):
                return find_binary(name, hint)
        names = " or ".join(f"`{n}`" for n in self.binaries or (self.client.BINARY,))
        raise AgentUnavailable(f"{self.name}: {names} is not installed: {hint}")

    def preflight(self, config: RunConfig) -> None:
        self.find_binary()
        if not os.environ.get(self.key_env) and not (self.base_url_env and os.environ.get(self.base_url_env)):
            raise AgentUnavailable(f"{self.name}: set {self.key_env} to your API key (it is passed to the "
                                   "agent's CLI and nothing else)")
        unpriced = config.model is None or model_price(config.model) is None
        if config.budget_usd is not None and not self.own_budget and unpriced:
            raise AgentUnavailable(
                f"{self.name}: a dollar budget needs the model's price to be known (its CLI reports no "
                f"cost): pass --model with a model listed in harness/clients/prices.toml "
                f"(got {config.model or 'no model'}), add the model there, or drop --budget-usd")

    # ----------------------------------------------------------------------------------------- run

    def api_env(self) -> dict[str, str]:
        """The API key (and endpoint override) for the CLI, from the harness's environment."""
        env = {self.key_env: os.environ.get(self.key_env) or self.DUMMY_KEY}
        if self.base_url_env and os.environ.get(self.base_url_env):
            env[self.base_url_env] = os.environ[self.base_url_env]
        return env

    def config_text(self, ctx: SessionContext) -> str:
        return self.client.mcp_config(HttpServer(url=ctx.mcp_url, token_env=ctx.token_env), self.server_name)

    def config_home(self, ctx: SessionContext) -> Path:
        """The folder the client module treats as its home (Codex: CODEX_HOME)."""
        return ctx.home

    def write_config(self, ctx: SessionContext) -> Path:
        path: Path = self.client.config_path(self.config_home(ctx), ctx.workspace)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self.config_text(ctx)
        if ctx.token in text:  # a client module that wrote the value would leak it to every reader
            raise RuntimeError(f"{self.name}: the MCP config would contain the session token; it must name "
                               f"the variable {ctx.token_env} instead")
        path.write_text(text)
        return path

    def command(self, ctx: SessionContext, binary: str, config: Path) -> list[str]:
        budget = ctx.budget_usd if self.own_budget else None
        spec = HeadlessSpec(binary=binary, prompt=ctx.prompt, workspace=ctx.workspace, mcp_config=config,
                            model=ctx.config.model, server_name=self.server_name, max_budget_usd=budget)
        return list(self.client.headless_command(spec))

    def extra_env(self, ctx: SessionContext) -> dict[str, str]:
        return {}

    def mcp_failure(self, usage: SessionUsage, result: ProcessResult) -> str | None:
        """The client's report that the MCP server could not be used, or None."""
        return None

    def run(self, ctx: SessionContext, cancel: threading.Event) -> AgentResult:
        binary = self.find_binary()
        config = self.write_config(ctx)
        env = clean_env(ctx, self.client.session_env(self.config_home(ctx)) | self.api_env() | self.extra_env(ctx))
        watch = None
        if ctx.budget_usd is not None and not self.own_budget:
            watch = BudgetWatch(self.client.parse_events, ctx.config.model, ctx.budget_usd)
        try:
            result = run_headless([*ctx.sandbox_prefix, *self.command(ctx, binary, config)], cwd=ctx.workspace,
                                  env=env, events_path=ctx.events_path,
                                  stderr_path=ctx.session_dir / f"{self.name}.stderr",
                                  time_limit_s=ctx.time_limit_s, cancel=cancel, watch=watch,
                                  limits=AgentLimits(), writable=[ctx.workspace, ctx.home])
        except OSError as exc:  # the sandbox or the CLI vanished since preflight
            return AgentResult(end=SessionEnd(reason="infra_error", message=f"{self.name} could not start: {exc}"),
                               usage=Usage())
        usage = self.client.parse_events(result.lines, ctx.config.model)
        return AgentResult(end=self.end(usage, result, ctx.budget_usd), usage=to_usage(usage, result.wall_s))

    def end(self, usage: SessionUsage, result: ProcessResult, budget_usd: float | None = None) -> SessionEnd:
        if result.stopped == "time_limit":
            return SessionEnd(reason="time_limit", message=f"stopped at the time limit after {result.wall_s:.0f} s")
        if result.stopped == "cancelled":
            return SessionEnd(reason="infra_error", message="cancelled by the harness before the agent finished")
        if result.stopped == "budget":
            return SessionEnd(reason="budget", message=f"stopped: cost {usage.cost_usd} USD passed the budget")
        if result.stopped == "resource_limit":
            return SessionEnd(reason="resource_limit", message=result.limit_note)
        failure = self.mcp_failure(usage, result)
        if failure is not None:
            return SessionEnd(reason="infra_error", message=failure, exit_code=result.exit_code)
        over = budget_usd is not None and usage.cost_usd is not None and usage.cost_usd > budget_usd
        if usage.status == "budget_exceeded" or (over and not self.own_budget):
            # Also when the CLI finished before the watcher stopped it: the budget was passed all the same.
            return SessionEnd(reason="budget", message=usage.detail or f"cost {usage.cost_usd} USD passed the "
                              f"budget {budget_usd}", exit_code=result.exit_code)
        if usage.status == "max_turns":
            return SessionEnd(reason="turn_limit", message=usage.detail or "", exit_code=result.exit_code)
        if usage.status == "success" and result.exit_code == 0:
            return SessionEnd(reason="finished", exit_code=0)
        detail = usage.detail or ("the event stream ended without a final event" if usage.status == "incomplete"
                                  else usage.status)
        stderr = result.stderr_tail.strip().splitlines()[-3:]
        message = f"{self.name} exited with code {result.exit_code}: {detail}"
        if stderr:
            message += " | stderr: " + " / ".join(stderr)
        return SessionEnd(reason="crash", message=message, exit_code=result.exit_code)
