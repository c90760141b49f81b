"""The `crucible` command.

    crucible tasks [--json]                      list the suite
    crucible tasks show ID [--json]              one task, visible part only
    crucible tasks validate [ID...] [--json] [--table FILE]
                                                 prove tasks sound: reference, baseline, expert solution
    crucible import kernelbench PATH... [--out tasks/] [--category C] [--rules FILE]
                                                 KernelBench problems -> PyTorch-to-kernel task folders
    crucible workspace ID DIR [--force]          write what the agent may see
    crucible tool compile|test|bench|profile --task ID --workspace DIR [--json]
                                                 the MCP tools' functions, by hand, shown as the agent
                                                 sees them (toolkit/agent_view.py)
    crucible run [--agent A] [--model M] [--tasks GLOB | --suite S] [--repeats N] [--out DIR] [--resume] ...
                                                 the main job: agent sessions, scored (harness/run.py)
    crucible score RUN                           re-score a run's sessions from their stored submissions
    crucible serve --task ID --workspace DIR [--transport stdio|http]
                                                 the MCP server (server/), for one task and workspace
    crucible mcp-config --client claude|codex|cursor --task ID --workspace DIR
                                                 an agent client's MCP config for `crucible serve`
    crucible report RUN [--json] [--html FILE]   a run's results per agent/model, category and task
    crucible export RUN --format csv|jsonl|parquet|atif [--out PATH]
                                                 a run's sessions as a table, or ATIF trajectories (harness/export.py)

Exit codes: 0 ok; 1 the kernel failed (does not compile, wrong, crashed...); 2 bad input (printed as one
message); 3 (`crucible tool`) nothing could run on this machine: needs a GPU, or too large for the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from pydantic import ValidationError

from crucible.toolkit.agent_view import AgentView
from crucible.toolkit.evaluation import EvalRequest, compile_snapshot, evaluate
from crucible.toolkit.profiling import Profile, profile
from crucible.toolkit.results import Evaluation
from crucible.toolkit.task import MAX_TIMEOUT_S, Task, TaskError, discover_tasks, find_task
from crucible.toolkit.toolchains import BuildResult
from crucible.toolkit.workspace import WorkspaceError, materialize, take_snapshot

from . import render
from .models import RunConfig


class UsageError(Exception):
    """Bad input from the user: printed as one message, exit code 2."""


EXIT_OK, EXIT_KERNEL_FAILED, EXIT_USAGE, EXIT_NOT_RUN = 0, 1, 2, 3
"""`crucible tool` exit codes. NOT_RUN: nothing could run on this machine (a CUDA/HIP kernel without its
GPU, or every asked config too large for the CPU interpreter): neither the kernel's failure nor bad input,
and not a success a script should go on from either."""


def _task(task_id: str) -> Task:
    try:
        return find_task(task_id)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


def cmd_tasks(args: argparse.Namespace) -> int:
    if args.action == "validate":
        return cmd_validate(args)
    tasks, errors = discover_tasks()
    if args.action == "show":
        if len(args.id) != 1:
            raise UsageError("`crucible tasks show` needs one task id; `crucible tasks` lists them")
        task = _task(args.id[0])
        visible = task.spec.visible()
        if args.json:
            print(json.dumps(visible, indent=2))
        else:
            print(render.task_text(task))
        return 0
    if args.json:
        print(json.dumps([{"id": t.id, "title": t.spec.title, "category": t.spec.category,
                           "language": t.spec.language, "visible_configs": len(t.spec.configs),
                           "hidden_configs": len(t.hidden.configs), "tags": t.spec.tags} for t in tasks], indent=2))
    else:
        print(render.task_table(tasks))
    for err in errors:
        print(err, file=sys.stderr)
    return 1 if errors else 0


def cmd_validate(args: argparse.Namespace) -> int:
    from crucible.toolkit.evaluation import resolve_backend
    from crucible.toolkit.validation import (
        TaskValidation,
        load_failure,
        markdown_table,
        validate,
        validation_text,
    )

    backend = resolve_backend(args.backend)
    tasks, errors = discover_tasks()
    known = {t.id for t in tasks} | {f"{e.root.parent.name}/{e.root.name}" for e in errors}
    unknown = [i for i in args.id if i not in known]
    if unknown:
        raise UsageError(f"no task {unknown[0]!r}; known tasks: {', '.join(sorted(known))}")
    def one(task_id: str) -> TaskValidation:
        try:
            task = find_task(task_id)
        except TaskError as exc:  # a broken task folder is a failed validation, listed with the rest
            return load_failure(task_id, exc, backend)
        return validate(task, backend, seeds=args.seeds,
                        on_progress=None if args.json else lambda m: print(m, file=sys.stderr))

    # Tasks side by side (--jobs): builds and CPU work overlap; every GPU job still holds the device's lease,
    # so no two timings share the GPU. The table is rewritten as each task ends, so a killed run keeps it.
    results: list[TaskValidation] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for result in as_completed([pool.submit(one, i) for i in args.id or sorted(known)]):
            done = result.result()
            results.append(done)
            results.sort(key=lambda r: r.task)
            if not args.json:
                print(validation_text(done), flush=True)
            if args.table:
                Path(args.table).write_text(markdown_table(results), encoding="utf-8")
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in results], indent=2))
    if args.table:
        print(f"wrote {args.table}", file=sys.stderr)
    return 1 if any(r.status == "fail" for r in results) else 0


def cmd_import(args: argparse.Namespace) -> int:
    from .importers import ImporterError, get_importer

    try:
        importer = get_importer(args.format)
        written = importer(paths=[Path(p) for p in args.paths], out=Path(args.out), category=args.category,
                           rules=Path(args.rules) if args.rules else None,
                           solution=Path(args.solution) if args.solution else None, force=args.force)
    except ImporterError as exc:
        raise UsageError(str(exc)) from None
    for report in written:
        print(report)
    return 0


def cmd_workspace(args: argparse.Namespace) -> int:
    task = _task(args.id)
    try:
        names = materialize(task, Path(args.dir), overwrite=args.force)
    except WorkspaceError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {', '.join(names)} to {args.dir}; edit {task.spec.candidate}")
    return 0


def cmd_tool(args: argparse.Namespace) -> int:
    task = _task(args.task)
    # An agent may run these commands in its sandbox: like the MCP tools, they take visible configs only
    # and show their results through the agent's view.
    visible = [c.name for c in task.spec.configs]
    for name in args.config or []:
        if name not in visible:
            shown = name if len(name) <= 60 else name[:60] + "..."
            raise UsageError(f"no visible config named {shown!r}; the visible configs are: {', '.join(visible)}")
    try:
        snapshot = take_snapshot(task, Path(args.workspace))
    except WorkspaceError as exc:
        raise UsageError(str(exc)) from None
    view = AgentView.for_task(task, Path(args.workspace), snapshot.root)
    if args.tool == "compile":
        result: BuildResult | Evaluation | Profile = view.build(compile_snapshot(task, snapshot, args.backend))
        status = "ok" if result.ok else "compile_error"
    elif args.tool == "profile":
        try:
            result = view.profile(profile(task, snapshot, (args.config or [None])[0], ncu=args.ncu,
                                          backend=args.backend))
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
        status = result.status
    else:
        configs = args.config or "visible"
        timing = {"test": "quick", "bench": "careful"}[args.tool]
        try:
            request = EvalRequest(configs=configs, timing=timing, backend=args.backend,  # type: ignore[arg-type]
                                  compiled_baseline=args.tool == "bench", seeds=args.seeds,
                                  timeout_s=args.timeout)
        except ValidationError as exc:  # --seeds out of range
            raise UsageError("; ".join(f"--{e['loc'][0]}: {e['msg']}" for e in exc.errors())) from None
        try:
            result = view.evaluation(evaluate(task, snapshot, request))
        except KeyError as exc:
            raise UsageError(exc.args[0]) from None
        status = result.status
    if args.json:
        print(result.model_dump_json(indent=2))
    elif isinstance(result, BuildResult):
        print(render.build_text(result))
    elif isinstance(result, Profile):
        print(render.profile_text(result))
    else:
        print(render.evaluation_text(result))
    return EXIT_OK if status == "ok" else EXIT_NOT_RUN if status == "not_run" else EXIT_KERNEL_FAILED


def cmd_calibrate(args: argparse.Namespace) -> int:
    from crucible.toolkit.calibration import calibrate
    from crucible.toolkit.evaluation import detect_backend

    if detect_backend() != "cuda":
        raise UsageError("calibrate measures an NVIDIA GPU's ceilings, and none is visible here")
    ceilings = calibrate(gpu=args.gpu)
    if args.json:
        print(ceilings.model_dump_json(indent=2))
    else:
        rates = ", ".join(f"{k} {v / 1e12:.0f} TFLOP/s" for k, v in ceilings.flops_per_s.items())
        print(f"{ceilings.name}: memory {ceilings.memory_bytes_per_s / 1e12:.2f} TB/s; {rates}\n({ceilings.source})")
    return 0


def _gpus(text: str | None) -> list[int] | None:
    from .placement import parse_gpus

    try:
        return None if text is None else parse_gpus(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _run_config(args: argparse.Namespace) -> RunConfig:
    model = args.model
    if args.agent == "scripted":
        model = model or "solution"
        if model.startswith("replay:"):  # absolute, so --resume from another folder finds the same plan
            model = "replay:" + str(Path(model.removeprefix("replay:")).resolve())
    try:
        return RunConfig(agent=args.agent, model=model, tasks=args.tasks, suite=args.suite, repeats=args.repeats,
                         budget_usd=args.budget_usd, time_limit_s=args.time_limit, concurrency=args.concurrency,
                         sandbox=not args.no_sandbox, agent_gpu=args.agent_gpu, gpus=_gpus(args.gpus),
                         ray=args.ray)
    except ValidationError as exc:
        raise UsageError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None


def clean_leftovers() -> None:
    """Scratch folders and cgroups that killed runs and servers left behind (toolkit/leftovers.py)."""
    from crucible.toolkit.leftovers import clean_leftovers

    done = clean_leftovers()
    if done.folders or done.cgroups:
        print(f"crucible: {done.summary()}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    from .run import RunError, execute

    config = _run_config(args)
    clean_leftovers()
    try:
        return execute(config, out=Path(args.out) if args.out else None, resume=args.resume)
    except RunError as exc:
        raise UsageError(str(exc)) from None


def cmd_score(args: argparse.Namespace) -> int:
    from .run import RunError, rescore

    try:
        return rescore(Path(args.run), gpus=_gpus(args.gpus), ray=args.ray)
    except RunError as exc:
        raise UsageError(str(exc)) from None


def add_run_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("run", help="the main job: agent sessions over the suite, scored on hidden configs",
                       description="Run an agent over a matrix of tasks x repeats, score every session's last "
                       "submission on the visible and hidden configs, and print a leaderboard. With no "
                       "arguments: the scripted agent submits each task's expert solution, on every task "
                       "this machine can run.")
    r.add_argument("--agent", default="scripted", choices=["scripted", "claude-code", "codex", "cursor", "api"])
    r.add_argument("--model", help="the model; for the scripted agent the plan: solution (default), baseline, "
                   "replay:FILE")
    r.add_argument("--tasks", default="*", help="a glob over task ids (default: all)")
    r.add_argument("--suite", help="a named suite from tasks/suites.toml (smoke, core); overrides --tasks")
    r.add_argument("--repeats", type=int, default=1)
    r.add_argument("--out", help="the run folder (default: crucible-runs/<run id>; with --resume, the latest)")
    r.add_argument("--budget-usd", type=float, default=None, help="per session")
    r.add_argument("--time-limit", type=float, default=1800, help="per session, seconds of agent wall time")
    r.add_argument("--concurrency", type=int, default=1, help="sessions at a time")
    r.add_argument("--resume", action="store_true", help="continue the run in --out: finished sessions are "
                   "kept, the rest run again (the options must be the same)")
    r.add_argument("--no-sandbox", action="store_true", help="run CLI agents without the agent sandbox "
                   "(recorded with the results)")
    r.add_argument("--agent-gpu", action="store_true", help="give the agent direct access to the GPU")
    _placement_args(r)
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("score", help="re-score every finished session of a run from its stored submissions")
    s.add_argument("run", help="the run folder")
    _placement_args(s)
    s.set_defaults(func=cmd_score)


def _placement_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpus", help="the GPUs of this host to score on, such as 0,1,3 (default: every visible "
                   "one); one evaluation per GPU at a time")
    p.add_argument("--ray", metavar="ADDRESS", help="score on a Ray cluster's GPUs instead: its address, auto "
                   "(the one `ray start` made here), or local[:N] (a cluster started here for the run, with N "
                   "GPUs declared); needs pip install 'kernel-crucible[ray]'")


def cmd_mcp_config(args: argparse.Namespace) -> int:
    from .clients import ClientError, crucible_server, get_client

    _task(args.task)  # a typo in the task id fails here, not when the agent starts the server
    try:
        server = crucible_server(args.task, Path(args.workspace), transport=args.transport, url=args.url,
                                 token_env=args.token_env)
        print(get_client(args.client).mcp_config(server, args.name), end="")
    except ClientError as exc:
        raise UsageError(str(exc)) from None
    return 0


def add_mcp_config_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = sub.add_parser("mcp-config", help="print an agent client's MCP config for `crucible serve`")
    m.add_argument("--client", required=True, choices=["claude", "codex", "cursor"])
    m.add_argument("--task", required=True)
    m.add_argument("--workspace", required=True)
    m.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio: the client starts the server; http: it connects to a running one (--url)")
    m.add_argument("--url", help="the running server's address, e.g. http://127.0.0.1:PORT/mcp")
    m.add_argument("--token-env", default="CRUCIBLE_MCP_TOKEN",
                   help="the variable holding the HTTP bearer token; the config names it, never its value")
    m.add_argument("--name", default="crucible", help="the server's name in the config (tools: mcp__NAME__*)")
    m.set_defaults(func=cmd_mcp_config)


def cmd_report(args: argparse.Namespace) -> int:
    from .report import ReportError, report_for, report_text
    from .report_html import report_html

    try:
        report = report_for(Path(args.run))
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    if args.html:
        Path(args.html).write_text(report_html(report), encoding="utf-8")
    if args.json:
        print(report.model_dump_json(indent=2))
    elif not args.html:
        print(report_text(report))
    else:
        print(f"wrote {args.html}")
    return 0


def add_report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("report", help="a run's results per agent/model, category and task (text, JSON or HTML)")
    r.add_argument("run", help="the run folder (holds store.db)")
    r.add_argument("--json", action="store_true", help="print the whole report as JSON")
    r.add_argument("--html", metavar="FILE", help="write a self-contained HTML page with plots")
    r.set_defaults(func=cmd_report)


def cmd_export(args: argparse.Namespace) -> int:
    from .export import ExportError, export_run

    try:
        done = export_run(Path(args.run), args.format, args.out)
    except ExportError as exc:
        raise UsageError(str(exc)) from None
    print(done.summary(), file=sys.stderr if done.path == "-" else sys.stdout)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from crucible.server import (
        ServeError,
        SessionConfig,
        build_server,
        serve_http,
        serve_stdio,
        token_from_env,
    )

    workspace = Path(args.workspace)
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} does not exist; create it with "
                         f"`crucible workspace {args.task} {workspace}`")
    clean_leftovers()
    try:
        session = SessionConfig(task_id=args.task, workspace=workspace, backend=args.backend,
                                ledger=Path(args.ledger) if args.ledger else None)
        # Before building the server: a missing token should not wait for the task to load.
        token = token_from_env(args.token_env) if args.transport == "http" else ""
        server = build_server(session)
    except ValidationError as exc:
        raise UsageError("; ".join(e["msg"] for e in exc.errors())) from None
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    except ServeError as exc:
        raise UsageError(str(exc)) from None
    banner = f"task {args.task}, workspace {workspace.resolve()}, ledger {session.ledger_path}; "
    if args.transport == "stdio":
        print(f"crucible: {banner}serving MCP on stdio", file=sys.stderr, flush=True)
        serve_stdio(server)
        return 0
    try:
        serve_http(server, host=args.host, port=args.port, token=token, banner=banner)
    except ServeError as exc:
        raise UsageError(str(exc)) from None
    return 0


def add_serve_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("serve", help="the MCP server for one task and workspace (stdio, or HTTP with a token)")
    s.add_argument("--task", required=True)
    s.add_argument("--workspace", required=True, help="the folder the agent edits (`crucible workspace`)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    s.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on (default loopback)")
    s.add_argument("--port", type=int, default=8765, help="HTTP: the port (0: any free one, printed)")
    s.add_argument("--ledger", help="the session's ledger file, outside the workspace "
                   "(default: <cache>/sessions/<task>-<hash>/ledger.db)")
    s.add_argument("--backend", choices=["auto", "cpu", "cuda", "rocm"], default="auto")
    s.add_argument("--token-env", default="CRUCIBLE_MCP_TOKEN",
                   help="HTTP: the environment variable holding the bearer token (required for HTTP)")
    s.set_defaults(func=cmd_serve)


def timeout_seconds(text: str) -> float:
    """A worker time limit: finite, more than 0, at most MAX_TIMEOUT_S (0 is not "the task's default")."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{text} seconds is not a time limit: give more than 0 and at most "
                                         f"{MAX_TIMEOUT_S:g} (leave --timeout out for the task's own)")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is too small: give 1 or more")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="crucible", description="An arena where AI agents optimize GPU kernels.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("tasks", help="list the task suite, show one task, or validate tasks")
    t.add_argument("action", nargs="?", choices=["list", "show", "validate"], default="list")
    t.add_argument("id", nargs="*", help="show: one task id; validate: task ids (default: every task)")
    t.add_argument("--json", action="store_true")
    t.add_argument("--table", metavar="FILE", help="validate: write a Markdown table (baseline and expert "
                   "times, speedup, peak fraction, verdict per task)")
    t.add_argument("--backend", choices=["auto", "cpu", "cuda", "rocm"], default="auto")
    t.add_argument("--seeds", type=int, default=None, help="validate: seeds per config (default: the task's)")
    t.add_argument("--jobs", type=positive_int, default=1, metavar="K",
                   help="validate: tasks validated side by side (builds overlap; GPU jobs still take turns)")
    t.set_defaults(func=cmd_tasks)

    imp = sub.add_parser("import", help="turn problems of another benchmark into task folders")
    imp.add_argument("format", choices=["kernelbench"])
    imp.add_argument("paths", nargs="+", metavar="PATH", help="problem files (a `Model`, `get_inputs`, "
                     "`get_init_inputs`)")
    imp.add_argument("--out", default="tasks", help="the suite folder; each task goes to OUT/<category>/<slug>")
    imp.add_argument("--category", choices=["torch2triton", "torch2cuda"], default="torch2triton")
    imp.add_argument("--rules", help="the rules that make the hidden configs (default: "
                     "harness/importers/kernelbench_rules.toml; copy and edit it)")
    imp.add_argument("--solution", help="an expert solution to copy in (one PATH only); without it the task "
                     "is written without one and `crucible tasks validate` says it needs one")
    imp.add_argument("--force", action="store_true", help="overwrite existing task folders")
    imp.set_defaults(func=cmd_import)

    w = sub.add_parser("workspace", help="write a task's workspace (what the agent sees)")
    w.add_argument("id")
    w.add_argument("dir")
    w.add_argument("--force", action="store_true", help="write into a non-empty folder")
    w.set_defaults(func=cmd_workspace)

    tool = sub.add_parser("tool", help="run a tool by hand: compile, test, bench, profile (as the agent sees it)",
                          description="The MCP tools' functions, by hand, shown as the agent sees them. compile: "
                          "build, diagnostics, registers/shared memory/spills; test: correctness on the visible "
                          "configs and a quick timing; bench: careful timing; profile: careful timing, kernels, "
                          "resources, roofline on one config. Exit codes: 0 ok, 1 the kernel failed, 2 bad input, "
                          "3 nothing could run on this machine (needs a GPU, or every config is too large for "
                          "the CPU interpreter).")
    tool.add_argument("tool", choices=["compile", "test", "bench", "profile"],
                      help="compile, test, bench or profile")
    tool.add_argument("--task", required=True)
    tool.add_argument("--workspace", required=True)
    tool.add_argument("--config", action="append", help="a visible config's name (repeatable); default: all "
                      "visible; profile: one, by default the largest that can run on this machine")
    tool.add_argument("--seeds", type=int, default=None)
    tool.add_argument("--backend", choices=["auto", "cpu", "cuda", "rocm"], default="auto")
    tool.add_argument("--timeout", type=timeout_seconds, default=None, help="worker time limit in seconds, "
                      f"at most {MAX_TIMEOUT_S:g} (default: the task's)")
    tool.add_argument("--json", action="store_true", help="print the result model as JSON")
    tool.add_argument("--ncu", action="store_true", help="profile: add Nsight Compute metrics (slow)")
    tool.set_defaults(func=cmd_tool)

    add_run_parsers(sub)

    c = sub.add_parser("calibrate", help="measure the GPU's ceilings (copy bandwidth, matmul rates) for rooflines")
    c.add_argument("--gpu", type=int, default=0)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_calibrate)

    add_mcp_config_parser(sub)
    add_serve_parser(sub)
    add_report_parser(sub)

    x = sub.add_parser("export", help="a run's sessions as CSV, JSONL or Parquet rows, or ATIF trajectories")
    x.add_argument("run", help="the run folder (holds store.db)")
    x.add_argument("--format", required=True, choices=["csv", "jsonl", "parquet", "atif"])
    x.add_argument("--out", help="the file (a folder for atif; `-`: print csv or jsonl); default "
                   "RUN/export/sessions.FORMAT or RUN/export/atif/")
    x.set_defaults(func=cmd_export)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"crucible: {exc}", file=sys.stderr)
        return 2
    except TaskError as exc:
        print(f"crucible: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
