"""Plain-text rendering of tasks, builds and evaluations for the terminal."""

from __future__ import annotations

from crucible.toolkit.profiling import Profile
from crucible.toolkit.results import Evaluation, TimingStats
from crucible.toolkit.task import Task
from crucible.toolkit.toolchains import BuildResult


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def timing_note(backend: str | None) -> str:
    """Why timings on `backend` are not comparable with a GPU's, in a few words."""
    return "CPU interpreter" if backend == "cpu" else "timings not comparable"


def speedup_text(speedup: float | None, comparable: bool | None = True, note: str = "CPU interpreter") -> str:
    """A speedup for text output: `-` when there is none, `n/c (why)` when its timings say nothing about a
    GPU (the CPU interpreter's), else `1.23x`."""
    if speedup is None:
        return "-"
    return f"n/c ({note})" if comparable is False else f"{speedup:.2f}x"


def task_table(tasks: list[Task]) -> str:
    rows = [[t.id, t.spec.language, str(len(t.spec.configs)), str(len(t.hidden.configs)), t.spec.title]
            for t in tasks]
    return table(["id", "language", "visible", "hidden", "title"], rows)


def task_text(task: Task) -> str:
    s = task.spec
    sig = s.signature
    lines = [f"{s.id}: {s.title}", f"category {s.category}, language {s.language}, edit {s.candidate}",
             f"entry: {s.entry}({', '.join([t.name for t in sig.inputs + sig.outputs])}"
             + (", " + ", ".join(f"{p.name}: {p.type}" for p in sig.params) if sig.params else "") + ")",
             "visible configs:"]
    lines += [f"  {c.name}: " + ", ".join(f"{k}={v}" for k, v in c.values.items()) for c in s.configs]
    lines.append(f"hidden configs: {len(task.hidden.configs)} (not shown)")
    return "\n".join(lines)


def build_text(b: BuildResult) -> str:
    lines = [f"build {'ok' if b.ok else 'FAILED'} ({b.language} for {b.target.arch}, {b.seconds:.2f}s"
             + (", cached" if b.cached else "") + ")"]
    for d in b.diagnostics:
        lines.append(f"  {d.file}:{d.line if d.line is not None else '?'}: {d.severity}: {d.message}")
    if b.kernels:
        # The name last and whole: C++ signatures are long, and a cut one may not say which overload it is.
        rows = [[_n(k.registers), _n(k.shared_bytes), _n(k.spill_stores), _n(k.spill_loads), k.name]
                for k in b.kernels]
        lines.append(table(["registers", "shared B", "spill st", "spill ld", "kernel"], rows))
    if not b.ok and b.log and not b.diagnostics:
        lines.append(b.log)  # cut by the agent view, the candidate's own frames first
    return "\n".join(lines)


def _n(x: int | float | None) -> str:
    return "-" if x is None else str(x)


def _us(t: TimingStats | None) -> str:
    return "-" if t is None else f"{t.median_us:,.1f}"


def evaluation_text(e: Evaluation) -> str:
    lines = [f"{e.task} @ {e.snapshot[:12]} on {e.backend}: {e.status.upper()} — {e.message}"]
    if e.configs:
        rows = []
        for c in e.configs:
            rows.append([c.config, c.status, "-" if c.max_abs_err is None else f"{c.max_abs_err:.2e}",
                         _us(c.candidate), _us(c.baseline), _us(c.compiled),
                         "-" if c.speedup is None else f"{c.speedup:.2f}x",
                         "-" if c.peak_fraction is None else f"{c.peak_fraction:.2f}"])
        lines.append(table(["config", "status", "max abs err", "cand us", "base us", "compiled us", "speedup",
                            "peak"], rows))
    skipped = [c for c in e.configs if c.status == "skipped"]
    if skipped:
        lines.append("skipped (not run, so not checked):")
        lines += [f"  {c.config}: {c.message or 'no reason given'}" for c in skipped]
    findings = [f for c in e.configs for f in c.integrity]
    if findings:
        lines.append("integrity (docs/integrity.md):")
        lines += [f"  {'CAUGHT' if f.caught else 'audit '} {f.flag()}" for f in findings]
    if e.speedup is not None:
        note = "" if e.timing_comparable else " (cpu timings: not comparable with GPU figures)"
        lines.append(f"speedup (geomean, against {e.speedup_against}): {e.speedup:.2f}x{note}")
    if e.status in ("crash", "timeout", "exit", "oom", "error") and e.stderr_tail:
        lines.append("worker output (tail):\n" + e.stderr_tail)  # cut by the agent view, own frames first
    return "\n".join(lines)


def profile_text(p: Profile) -> str:
    lines = [f"{p.task} @ {p.snapshot[:12]} on {p.backend}, config {p.config}: {p.status.upper()} — "
             f"{p.message.splitlines()[0] if p.message else ''}"]
    t = p.timing
    if t is not None and t.candidate is not None:
        base = f", baseline {_us(t.baseline)} us" if t.baseline else ""
        comp = f", torch.compile {_us(t.compiled)} us" if t.compiled else ""
        speed = f", speedup {t.speedup:.2f}x" if t.speedup else ""
        lines.append(f"candidate {_us(t.candidate)} us (IQR {t.candidate.iqr_us:.2f}, {t.candidate.reps} reps, "
                     f"{t.candidate.method}){base}{comp}{speed}")
    if p.kernels:
        rows = [[str(k.calls), f"{k.total_us:,.1f}", f"{100 * k.share:.0f}%", k.name] for k in p.kernels[:12]]
        lines.append(table(["calls", "us per call", "share", "kernel"], rows))
    if p.resources:
        rows = [[_n(k["registers"]), _n(k["shared_bytes"]), _n(k["spill_stores"]), str(k["name"])]
                for k in p.resources]
        lines.append(table(["registers", "shared B", "spill st", "compiled kernel"], rows))
    r = p.roofline
    if r is not None:
        frac = "" if r.peak_fraction is None else (f"; {100 * r.peak_fraction:.0f}% of peak ({r.bound}-bound; "
                                                     f"{r.ceilings})")
        lines.append(f"roofline: {r.achieved_tflops:.3g} TFLOP/s, {r.achieved_gbps:,.0f} GB/s{frac}")
    if p.ncu:
        for kernel, metrics in p.ncu.items():
            lines.append(f"ncu {kernel}:\n  " + ", ".join(f"{k}={v}" for k, v in list(metrics.items())[:8]))
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)
