"""The run report as one self-contained HTML page: the report's tables and two plots drawn here as inline SVG
(speedup per task; cost against speedup). No scripts, no external assets, and a Content-Security-Policy
that forbids both, so a page can be mailed or published as one file.

Every string on the page (task ids, model names, messages, flags) comes from runs of untrusted agents and
goes through `esc`.
"""

from __future__ import annotations

import math
from html import escape

from .render import speedup_text
from .report import (
    RATE_HEADERS,
    USAGE_HEADERS,
    Report,
    SessionLine,
    comparability_line,
    rate_cells,
    run_line,
    usage_cells,
)

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac"]
FONT = "font-family:system-ui,-apple-system,'Segoe UI',sans-serif"


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def colors(report: Report) -> dict[str, str]:
    return {e.entrant: PALETTE[i % len(PALETTE)] for i, e in enumerate(report.entrants)}


# ---------------------------------------------------------------- axes


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks between lo and hi: the densest of these steps that stays readable (at most 9 ticks)."""
    decades = range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
    for mantissas in ((1, 1.5, 2, 3, 5, 7), (1, 2, 5), (1,)):
        ticks = [m * 10.0**e for e in decades for m in mantissas]
        ticks = [t for t in ticks if lo <= t <= hi]
        if len(ticks) <= 9:
            return ticks
    return ticks


def linear_ticks(hi: float, count: int = 5) -> list[float]:
    raw = hi / count
    step = min((m * 10.0 ** math.floor(math.log10(raw)) for m in (1, 2, 2.5, 5, 10)), key=lambda s: abs(s - raw))
    return [i * step for i in range(int(hi / step) + 1)]


def fmt_tick(v: float) -> str:
    return f"{v:g}"


class LogAxis:
    """Speedup (y) on a log scale, always showing 1.0 (the baseline)."""

    def __init__(self, values: list[float], top: float, bottom: float) -> None:
        vals = [v for v in values if v > 0] + [1.0]
        self.lo, self.hi = min(vals) / 1.3, max(vals) * 1.3
        self.top, self.bottom = top, bottom

    def __call__(self, v: float) -> float:
        f = (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return self.bottom - f * (self.bottom - self.top)

    def draw(self, left: float, right: float, label: str) -> list[str]:
        out = []
        for t in log_ticks(self.lo, self.hi):
            y = self(t)
            out.append(f'<line class="grid" x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                       f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_tick(t)}x</text>')
        y1 = self(1.0)
        # The label sits right of the plot, where no bar or point can hide it.
        out.append(f'<line class="baseline-line" x1="{left}" x2="{right}" y1="{y1:.1f}" y2="{y1:.1f}"/>'
                   f'<text class="note" x="{right + 6}" y="{y1 + 4:.1f}">baseline</text>')
        mid = (self.top + self.bottom) / 2
        out.append(f'<text class="axis-label" x="16" y="{mid:.1f}" text-anchor="middle" '
                   f'transform="rotate(-90 16 {mid:.1f})">{esc(label)}</text>')
        return out


def legend(entrants: dict[str, str], x: float, y: float) -> list[str]:
    out = ['<g class="legend">']
    for i, (name, color) in enumerate(entrants.items()):
        yy = y + 18 * i
        out.append(f'<rect x="{x}" y="{yy - 10}" width="12" height="12" fill="{color}"/>'
                   f'<text class="legend-label" x="{x + 18}" y="{yy}">{esc(name)}</text>')
    out.append("</g>")
    return out


def svg(width: float, height: float, title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{esc(title)}">'
            f"<title>{esc(title)}</title>" + "".join(body) + "</svg>")


# ---------------------------------------------------------------- plots


def speedup_plot(report: Report) -> str:
    """Bars per task, one per agent/model, from the 1.0 line up (faster) or down (slower); a cross where none
    of that entrant's sessions passed."""
    palette = colors(report)
    tasks = sorted({t.task for t in report.tasks})
    entrants = list(palette)
    results = {(t.task, t.entrant): t for t in report.tasks}
    left, top, plot_h, gap = 70, 20 + 18 * len(entrants), 300, 22
    # Bars widen to fill a readable minimum width, up to 36 px; many tasks widen the plot instead.
    bar = max(10.0, min(36.0, (720 - gap * len(tasks)) / max(len(tasks) * len(entrants), 1)))
    group = max(bar * max(len(entrants), 1) + gap, 480 / max(len(tasks), 1))
    longest = max((len(t) for t in tasks), default=4)
    label_h = min(30 + 4 * longest, 220)  # rotated labels: about sin(35°) of 7 px a character
    width = left + group * len(tasks) + 70
    height = top + plot_h + label_h
    axis = LogAxis([t.speedup for t in report.tasks if t.speedup], top, top + plot_h)
    body = axis.draw(left, width - 60, "speedup (geomean over passing sessions, log scale)")
    for i, task in enumerate(tasks):
        x0 = left + (group - bar * len(entrants)) / 2 + i * group
        for j, entrant in enumerate(entrants):
            r = results.get((task, entrant))
            if r is None:
                continue
            x = x0 + j * bar
            tip = f"{task} — {entrant}: " + (f"{r.speedup:.2f}x" if r.speedup else "no passing session") + \
                f" ({r.passing}/{r.sessions} passed)"
            if r.speedup is None:
                body.append(f'<text class="nopass" x="{x + bar / 2:.1f}" y="{axis(1.0) + 4:.1f}" text-anchor="middle" '
                            f'fill="{palette[entrant]}"><title>{esc(tip)}</title>×</text>')
                continue
            y1, y = axis(1.0), axis(r.speedup)
            body.append(f'<rect class="bar" x="{x + 1:.1f}" y="{min(y, y1):.1f}" width="{bar - 2:.1f}" '
                        f'height="{max(abs(y1 - y), 1):.1f}" fill="{palette[entrant]}" data-task="{esc(task)}" '
                        f'data-entrant="{esc(entrant)}"><title>{esc(tip)}</title></rect>')
        cx, cy = x0 + bar * len(entrants) / 2, top + plot_h + 12
        body.append(f'<text class="task-label" x="{cx:.1f}" y="{cy:.1f}" text-anchor="end" '
                    f'transform="rotate(-35 {cx:.1f} {cy:.1f})">{esc(task)}</text>')
    body.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/>')
    body += legend(palette, left + 10, 18)
    return svg(width, height, "Speedup per task, per agent/model", body)


def cost_plot(report: Report) -> tuple[str, int]:
    """One point per scored session: cost (x) against speedup (y, log). Failures earn no speedup; they sit in a
    band under the axis. Returns the SVG and how many sessions had no known cost (not drawn)."""
    palette = colors(report)
    points = [p for p in report.points if p.cost_usd is not None]
    left, top, plot_h, plot_w = 70, 20 + 18 * len(palette), 300, 560
    band = 36  # the failure band under the speedup axis
    width, height = left + plot_w + 70, top + plot_h + band + 50
    axis = LogAxis([p.speedup for p in points if p.speedup], top, top + plot_h)
    hi = max([p.cost_usd or 0.0 for p in points] + [0.0])
    xmax = hi * 1.1 if hi > 0 else 1.0
    ticks = linear_ticks(xmax)
    xmax = max(xmax, ticks[-1])

    def x(cost: float) -> float:
        return left + cost / xmax * plot_w

    body = axis.draw(left, left + plot_w, "speedup (log scale)")
    base = top + plot_h
    for t in ticks:
        body.append(f'<line class="tickmark" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{base + band}" y2="{base + band + 4}"/>'
                    f'<text class="tick" x="{x(t):.1f}" y="{base + band + 17}" text-anchor="middle">${t:g}</text>')
    body.append(f'<rect class="fail-band" x="{left}" y="{base + 4}" width="{plot_w}" height="{band - 8}"/>'
                f'<text class="tick" x="{left - 6}" y="{base + band / 2 + 4}" text-anchor="end">failed</text>')
    body.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{base + band}" y2="{base + band}"/>'
                f'<text class="axis-label" x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle">'
                f'cost per session (USD)</text>')
    for i, p in enumerate(points):
        tip = f"{p.session_id}: " + (f"{p.speedup:.2f}x" if p.speedup else (p.verdict or "failed")) + \
            f", ${p.cost_usd:,.2f}"
        color = palette.get(p.entrant, "#888")
        if p.speedup:
            body.append(f'<circle class="point" cx="{x(p.cost_usd or 0):.1f}" cy="{axis(p.speedup):.1f}" r="5" '
                        f'fill="{color}" data-entrant="{esc(p.entrant)}"><title>{esc(tip)}</title></circle>')
        else:
            cy = base + band / 2 + ((i * 7) % 13 - 6)  # spread failures a little so they don't hide each other
            body.append(f'<circle class="point fail" cx="{x(p.cost_usd or 0):.1f}" cy="{cy:.1f}" r="5" fill="none" '
                        f'stroke="{color}" data-entrant="{esc(p.entrant)}"><title>{esc(tip)}</title></circle>')
    body += legend(palette, left + 10, 18)
    return svg(width, height, "Cost against speedup, one point per session", body), len(report.points) - len(points)


# ---------------------------------------------------------------- page


def html_table(headers: list[str], rows: list[list[str]], cls: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def session_table(lines: list[SessionLine], cls: str, flags: bool) -> str:
    rows = [[s.session_id, s.verdict or s.end_reason or "-", "\n".join(s.flags) if flags else s.message]
            for s in lines]
    return html_table(["session", "verdict", "flags (evidence)" if flags else "message"], rows, cls)


CSS = f"""
body {{ {FONT}; margin: 24px auto; max-width: 1200px; color: #222; padding: 0 16px; }}
h1 {{ font-size: 22px; }} h2 {{ font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }}
table {{ border-collapse: collapse; font-size: 13px; margin: 8px 0; }}
th, td {{ border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; white-space: pre-wrap; }}
th {{ background: #f4f4f4; }} tbody tr:nth-child(even) {{ background: #fafafa; }}
.notes {{ font-size: 13px; color: #555; }} .empty {{ color: #888; font-style: italic; }}
svg.plot {{ display: block; margin: 8px 0; }} svg text {{ {FONT}; font-size: 11px; fill: #333; }}
.grid {{ stroke: #e6e6e6; }} .axis, .tickmark {{ stroke: #999; }}
.baseline-line {{ stroke: #333; stroke-dasharray: 4 3; }} .fail-band {{ fill: #fbeaea; }}
.axis-label {{ font-size: 12px; }} .note {{ fill: #777; font-style: italic; }} .nopass {{ font-size: 14px; }}
"""


def plots(report: Report) -> list[str]:
    """The two plots, or, where the timings say nothing about a GPU, a word on why there are none."""
    if not report.timing_comparable:
        return ["<h2>Speedups</h2>",
                f'<p class="notes not-comparable">No speedup plots: {esc(comparability_line(report))}.</p>']
    speed = speedup_plot(report)
    cost, no_cost = cost_plot(report)
    cost_note = f" {no_cost} session(s) without a known cost are not drawn." if no_cost else ""
    return [
        "<h2>Speedup per task</h2>",
        '<p class="notes">Geometric mean over each agent/model\'s passing sessions; × marks a task where none '
        "passed. Hover a bar for its figures.</p>",
        speed,
        "<h2>Cost against speedup</h2>",
        f'<p class="notes">One point per scored session. Failed sessions earn no speedup and sit in the '
        f"band marked failed, under the axis.{esc(cost_note)}</p>",
        cost,
    ]


def report_html(report: Report) -> str:
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No script, no remote anything: defence in depth behind the escaping.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>crucible report: {esc(report.run_dir)}</title><style>{CSS}</style></head><body>",
        f"<h1>crucible report: {esc(report.run_dir)}</h1>",
        f'<p class="run">{esc(run_line(report))}</p>',
        f'<p class="summary">{report.sessions} sessions, {report.scored} scored, {len(report.infra_errors)} infra '
        f"error(s) (not counted), {len(report.unscored)} unscored, {len(report.flagged)} flagged; total cost "
        f"${report.cost_total_usd:,.2f}</p>",
        '<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in report.notes) + "</ul>",
        "<h2>Results per agent/model</h2>",
        html_table(["agent/model", *RATE_HEADERS], [[e.entrant, *rate_cells(e.overall)] for e in report.entrants],
                   "results"),
        *plots(report),
        "<h2>Usage per session</h2>",
        html_table(["agent/model", *USAGE_HEADERS], [[e.entrant, *usage_cells(e.overall)] for e in report.entrants],
                   "usage"),
        "<h2>By category</h2>",
        html_table(["agent/model", "category", *RATE_HEADERS],
                   [[e.entrant, c, *rate_cells(m)] for e in report.entrants for c, m in e.by_category.items()],
                   "categories"),
        "<h2>Per task</h2>",
        html_table(["task", "agent/model", "passing", "speedup (passing)"],
                   [[t.task, t.entrant, f"{t.passing}/{t.sessions}",
                     speedup_text(t.speedup, t.timing_comparable, t.timing_note)] for t in report.tasks], "tasks"),
        "<h2>Infra errors (left out of every figure)</h2>",
        session_table(report.infra_errors, "infra", flags=False) if report.infra_errors
        else '<p class="empty">none</p>',
        "<h2>Flagged sessions</h2>",
        session_table(report.flagged, "flagged", flags=True) if report.flagged else '<p class="empty">none</p>',
    ]
    if report.audit:
        parts += ["<h2>For audit (speedups above 10x)</h2>", session_table(report.audit, "audit", flags=True)]
    if report.unscored:
        parts += ["<h2>Unscored sessions (not finished; left out)</h2>",
                  session_table(report.unscored, "unscored", flags=False)]
    parts.append("</body></html>")
    return "\n".join(parts)
