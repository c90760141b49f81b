"""Plain-text rendering of tasks, builds and evaluations for the terminal."""

from __future__ import annotations

from crucible.toolkit.results import Evaluation, TimingStats
from crucible.toolkit.task import Task
from crucible.toolkit.toolchains import BuildResult


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


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
        rows = [[k.name[:60], _n(k.registers), _n(k.shared_bytes), _n(k.spill_stores), _n(k.spill_loads)]
                for k in b.kernels]
        lines.append(table(["kernel", "registers", "shared B", "spill st", "spill ld"], rows))
    if not b.ok and b.log and not b.diagnostics:
        lines.append(b.log[-2000:])
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
    if e.speedup is not None:
        note = "" if e.timing_comparable else " (cpu timings: not comparable with GPU figures)"
        lines.append(f"speedup (geomean, against {e.speedup_against}): {e.speedup:.2f}x{note}")
    if e.status in ("crash", "timeout", "exit", "oom", "error") and e.stderr_tail:
        lines.append("worker output (tail):\n" + e.stderr_tail[-1500:])
    return "\n".join(lines)
