"""The run report: what a run's sessions scored, per agent and model, per category and per task.

    store.db ──load_outcomes──▶ [SessionOutcome] ──build_report──▶ Report ──▶ report_text / --json / report_html

Rules (docs/evaluation-rules.md, "Scoring"):
- infra_error sessions, and sessions not yet scored, are listed apart and left out of every figure: an
  infrastructure failure is never the agent's failure, nor a speedup of 1.0;
- fast_p is the fraction of sessions that pass AND are more than p times faster: a failure earns nothing;
- the geometric-mean speedup is over passing sessions only (fast_p is the figure that charges failures);
- with repeats, each figure is computed per repeat, then its mean and 95% confidence interval (Student's t)
  across repeats; speedups are averaged in log space, so their interval is geometric. One repeat: no interval;
- timings not comparable with a GPU's (the cpu backend times Triton's interpreter): the text and HTML show
  speedups and fast_p as `n/c (CPU interpreter)`, and generalization with how many hidden configs were
  checked (the rest were too large for the CPU); the JSON keeps every figure, with `timing_comparable`.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .models import AUDIT_PREFIX, EndReason, Score, Usage
from .render import speedup_text, table, timing_note
from .store import STORE_FILE, RunRow, Store, StoreError

FAST_P = (1.0, 1.5, 2.0)


class ReportError(Exception):
    """The run folder has no store to report on; the message says what to do."""


class SessionOutcome(BaseModel):
    """One session as the report sees it: who ran what, how it ended, its score and what it cost."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    task: str
    category: str
    """The task id's prefix: triton2triton, cuda2cuda, ..."""
    agent: str
    model: str | None
    repeat: int
    state: str
    end_reason: EndReason | None = None
    end_message: str = ""
    score: Score | None = None
    """None until the session is scored."""
    scored_on: str | None = None
    """The backend it was scored on (cpu, cuda, rocm)."""
    usage: Usage = Field(default_factory=Usage)

    @property
    def timing_comparable(self) -> bool:
        """Its speedup comes from timings comparable with a GPU's; a score from before the field was
        recorded goes by the backend it was scored on."""
        if self.score is not None and self.score.timing_comparable is not None and self.score.speedup is not None:
            return self.score.timing_comparable
        return self.scored_on != "cpu"

    @property
    def entrant(self) -> str:
        return f"{self.agent}/{self.model or 'default'}"

    @property
    def infra_error(self) -> bool:
        return (self.state == "infra_error" or self.end_reason == "infra_error"
                or (self.score is not None and self.score.verdict == "infra_error"))

    @property
    def scored(self) -> bool:
        """Counts in the figures: scored, and not an infrastructure failure."""
        return self.score is not None and not self.infra_error

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score.verdict == "pass" and self.score.speedup is not None


def category_of(task_id: str) -> str:
    return task_id.split("/", 1)[0] if "/" in task_id else "other"


# ---------------------------------------------------------------- loading the store


def load_run(run_dir: Path | str) -> tuple[RunRow | None, list[SessionOutcome]]:
    """The run's row and every session of it, with its score and usage where recorded, through the store's
    own typed readers (harness/store.py)."""
    path = Path(run_dir) / STORE_FILE
    if not path.is_file():
        raise ReportError(f"no {STORE_FILE} in {run_dir}: is it a `crucible run` folder?")
    try:
        store = Store(path, read_only=True)  # a report never writes, not even a migration
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    try:
        run = store.run()
        outcomes = []
        for row in store.sessions():
            scored = store.score(row.id)
            outcomes.append(SessionOutcome(
                session_id=row.id, task=row.task, category=category_of(row.task), agent=row.agent, model=row.model,
                repeat=row.repeat, state=row.state, end_reason=row.end_reason,  # type: ignore[arg-type]
                end_message=row.end_message, score=scored.score if scored else None,
                scored_on=scored.backend if scored else None, usage=store.usage(row.id) or Usage()))
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    finally:
        store.close()
    return run, sorted(outcomes, key=lambda o: (o.entrant, o.task, o.repeat))


def load_outcomes(run_dir: Path | str) -> list[SessionOutcome]:
    """Every session of the run in `run_dir/store.db`."""
    return load_run(run_dir)[1]


# ---------------------------------------------------------------- statistics


def t_critical(df: int, confidence: float = 0.95) -> float:
    """Two-sided Student's t quantile, exact for integer df (Abramowitz & Stegun 26.7.3-4, solved by bisection)."""
    if df < 1:
        raise ValueError("df must be at least 1")

    def central(t: float) -> float:  # P(|T| < t)
        theta = math.atan(t / math.sqrt(df))
        s, c2 = math.sin(theta), math.cos(theta) ** 2
        if df % 2:
            term, acc = 1.0, 1.0 if df > 1 else 0.0
            for k in range(1, (df - 3) // 2 + 1):
                term *= c2 * (2 * k) / (2 * k + 1)
                acc += term
            return 2 / math.pi * (theta + (s * math.cos(theta) * acc if df > 1 else 0.0))
        term, acc = 1.0, 1.0
        for k in range(1, (df - 2) // 2 + 1):
            term *= c2 * (2 * k - 1) / (2 * k)
            acc += term
        return s * acc

    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if central(mid) < confidence else (lo, mid)
    return (lo + hi) / 2


class Stat(BaseModel):
    """A figure across repeats: the mean of its per-repeat values and a 95% t interval."""

    mean: float | None = None
    """None when no repeat has a value (e.g. no session passed)."""
    low: float | None = None
    high: float | None = None
    """The 95% interval; None with fewer than two repeats that have a value."""
    n: int = 0
    """Repeats that have a value."""
    per_repeat: dict[int, float] = Field(default_factory=dict)
    geometric: bool = False
    """Averaged in log space (speedups): mean is a geometric mean, the interval is multiplicative."""


def stat(per_repeat: dict[int, float | None], geometric: bool = False) -> Stat:
    values = {r: v for r, v in sorted(per_repeat.items()) if v is not None}
    xs = [math.log(v) for v in values.values()] if geometric else list(values.values())
    back: Callable[[float], float] = math.exp if geometric else float
    if not xs:
        return Stat(geometric=geometric)
    m = sum(xs) / len(xs)
    out = Stat(mean=back(m), n=len(xs), per_repeat=values, geometric=geometric)
    if len(xs) >= 2:
        s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        half = t_critical(len(xs) - 1) * s / math.sqrt(len(xs))
        out.low, out.high = back(m - half), back(m + half)
    return out


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# ---------------------------------------------------------------- the report's models


class Metrics(BaseModel):
    """The figures for one slice of scored sessions (infra errors and unscored sessions already removed)."""

    sessions: int
    passing: int
    repeats: int
    verdicts: dict[str, int]
    correct: Stat
    """Fraction correct on the visible configs."""
    generalizes: Stat
    """Fraction correct on the hidden configs."""
    fast_p: dict[str, Stat]
    """"1.0", "1.5", "2.0": fraction that pass AND have speedup > p."""
    speedup: Stat
    """Geometric-mean speedup over PASSING sessions only."""
    sol_fraction: Stat = Stat()
    """Geometric-mean speed-of-light fraction over PASSING sessions scored on a GPU the datasheet knows: how
    close to the hardware's limit, where the speedup says how far past the baseline."""
    input_tokens: Stat
    output_tokens: Stat
    cache_read_tokens: Stat
    cache_write_tokens: Stat
    """Tokens per session."""
    cost_usd: Stat
    """Per session, over the sessions whose cost is known."""
    cost_total_usd: float
    cost_sources: dict[str, int]
    """How each session's cost was found: cli, price_table, unknown, none (no model)."""
    wall_s: Stat
    turns: Stat
    tool_calls: Stat
    """Per session."""
    timing_comparable: bool = True
    """False when the speedups (and so fast_p) come from timings not comparable with a GPU's."""
    timing_note: str = ""
    """Why not, in a few words ("CPU interpreter"); empty when comparable."""
    hidden_configs: int | None = None
    hidden_checked: int | None = None
    """Hidden configs over these sessions, and how many of them were checked (the rest were skipped as too
    large for the backend); None when some session's score did not record it."""


class EntrantReport(BaseModel):
    agent: str
    model: str | None
    entrant: str
    """agent/model, the row label."""
    overall: Metrics
    by_category: dict[str, Metrics]
    rank_speedup: int | None = None
    rank_sol: int | None = None
    """1 = the best among the run's entrants, by overall speedup and by overall SOL fraction; None without
    comparable figures. The entrants are listed by speedup rank, then by SOL rank."""


class TaskResult(BaseModel):
    """One entrant on one task, over its repeats."""

    task: str
    category: str
    entrant: str
    sessions: int
    passing: int
    speedup: float | None
    """Geometric mean over passing sessions; None if none passed."""
    sol_fraction: float | None = None
    """Geometric mean over passing sessions; None if none passed or none had a speed of light."""
    timing_comparable: bool = True
    timing_note: str = ""


class SessionLine(BaseModel):
    """A session listed by name: an infra error, a flagged session, or a point on the cost/speedup plot."""

    session_id: str
    task: str
    entrant: str
    repeat: int
    verdict: str | None
    end_reason: str | None
    message: str
    flags: list[str] = Field(default_factory=list)
    speedup: float | None = None
    timing_comparable: bool = True
    """Whether `speedup` comes from timings comparable with a GPU's."""
    cost_usd: float | None = None


class Report(BaseModel):
    """The whole report; `crucible report RUN --json` prints it."""

    run_dir: str
    run: RunRow | None
    """What was asked and what it ran on (device, backend, sandbox, versions), from the store."""
    sessions: int
    scored: int
    infra_errors: list[SessionLine]
    """Left out of every figure."""
    unscored: list[SessionLine]
    """Not finished or not yet scored; left out of every figure."""
    flagged: list[SessionLine]
    """Sessions caught by a runtime defence (verdict `flagged`) or carrying an integrity flag (tripwires,
    impossible peak fractions, no-ops, changed submissions), any verdict, with the flags' evidence."""
    audit: list[SessionLine] = Field(default_factory=list)
    """Sessions whose only flags are speedups above 10x: plausible against a slow baseline, worth a look."""
    entrants: list[EntrantReport]
    tasks: list[TaskResult]
    points: list[SessionLine]
    """Every scored session, for the cost/speedup plot."""
    cost_total_usd: float
    """What the whole run spent, infra errors included."""
    timing_comparable: bool = True
    """False when any scored session's timings are not comparable with a GPU's (the cpu backend): the text
    and HTML then show speedups as `n/c`; the figures here stay as measured."""
    timing_note: str = ""
    """Why not ("CPU interpreter"); empty when comparable."""
    notes: list[str]


# ---------------------------------------------------------------- aggregation


def _by_repeat(outcomes: list[SessionOutcome], f: Callable[[list[SessionOutcome]], float | None]) -> dict[int, float | None]:
    groups: dict[int, list[SessionOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.repeat].append(o)
    return {r: f(g) for r, g in groups.items()}


def _rate(pred: Callable[[SessionOutcome], bool]) -> Callable[[list[SessionOutcome]], float | None]:
    return lambda g: sum(pred(o) for o in g) / len(g) if g else None


def _mean(value: Callable[[SessionOutcome], float | None]) -> Callable[[list[SessionOutcome]], float | None]:
    def f(g: list[SessionOutcome]) -> float | None:
        xs = [x for x in map(value, g) if x is not None]
        return sum(xs) / len(xs) if xs else None
    return f


def _fast(p: float) -> Callable[[SessionOutcome], bool]:
    return lambda o: o.passed and o.score is not None and o.score.speedup is not None and o.score.speedup > p


def comparability(outcomes: list[SessionOutcome]) -> tuple[bool, str]:
    """Whether these sessions' timings are comparable with a GPU's, and if not, why."""
    odd = [o for o in outcomes if not o.timing_comparable]
    return (not odd, "" if not odd else timing_note(odd[0].scored_on))


def hidden_counts(outcomes: list[SessionOutcome]) -> tuple[int | None, int | None]:
    scores = [o.score for o in outcomes if o.score is not None]
    if any(s.hidden_configs is None or s.hidden_checked is None for s in scores):
        return None, None
    return sum(s.hidden_configs or 0 for s in scores), sum(s.hidden_checked or 0 for s in scores)


def metrics(outcomes: list[SessionOutcome]) -> Metrics:
    """The figures for `outcomes`, which must all be scored (see SessionOutcome.scored)."""
    assert all(o.scored for o in outcomes), "infra errors and unscored sessions must be filtered out first"
    comparable, note = comparability(outcomes)
    hidden, checked = hidden_counts(outcomes)

    def per(f: Callable[[list[SessionOutcome]], float | None], geometric: bool = False) -> Stat:
        return stat(_by_repeat(outcomes, f), geometric)

    def usage(field: str) -> Stat:
        return per(_mean(lambda o: float(getattr(o.usage, field))))

    return Metrics(
        sessions=len(outcomes),
        passing=sum(o.passed for o in outcomes),
        repeats=len({o.repeat for o in outcomes}),
        verdicts=dict(Counter(o.score.verdict for o in outcomes if o.score)),
        correct=per(_rate(lambda o: bool(o.score and o.score.correct))),
        generalizes=per(_rate(lambda o: bool(o.score and o.score.generalizes))),
        fast_p={f"{p:.1f}": per(_rate(_fast(p))) for p in FAST_P},
        speedup=per(lambda g: geomean([o.score.speedup for o in g if o.passed and o.score and o.score.speedup]),
                    geometric=True),
        sol_fraction=per(lambda g: geomean(_passing_sol(g)), geometric=True),
        input_tokens=usage("input_tokens"),
        output_tokens=usage("output_tokens"),
        cache_read_tokens=usage("cache_read_tokens"),
        cache_write_tokens=usage("cache_write_tokens"),
        cost_usd=per(_mean(lambda o: o.usage.cost_usd)),
        cost_total_usd=sum(o.usage.cost_usd or 0.0 for o in outcomes),
        cost_sources=dict(Counter(o.usage.cost_source for o in outcomes)),
        wall_s=usage("wall_s"),
        turns=usage("turns"),
        tool_calls=per(_mean(lambda o: float(sum(o.usage.tool_calls.values())))),
        timing_comparable=comparable, timing_note=note, hidden_configs=hidden, hidden_checked=checked,
    )


def _line(o: SessionOutcome) -> SessionLine:
    s = o.score
    return SessionLine(session_id=o.session_id, task=o.task, entrant=o.entrant, repeat=o.repeat,
                       verdict=s.verdict if s else None, end_reason=o.end_reason,
                       message=(s.message if s and s.message else o.end_message), flags=list(s.flags) if s else [],
                       speedup=s.speedup if s and o.passed else None, timing_comparable=o.timing_comparable,
                       cost_usd=o.usage.cost_usd)


def _passing_sol(group: list[SessionOutcome]) -> list[float]:
    return [o.score.sol_fraction for o in group if o.passed and o.score and o.score.sol_fraction]


def task_result(task: str, entrant: str, group: list[SessionOutcome]) -> TaskResult:
    comparable, note = comparability(group)
    return TaskResult(task=task, category=group[0].category, entrant=entrant, sessions=len(group),
                      passing=sum(o.passed for o in group),
                      speedup=geomean([o.score.speedup for o in group if o.passed and o.score and o.score.speedup]),
                      sol_fraction=geomean(_passing_sol(group)), timing_comparable=comparable, timing_note=note)


def ranked(rows: list[EntrantReport]) -> list[EntrantReport]:
    """Each entrant's rank by overall speedup and by overall SOL fraction (ties share a rank), listed by
    speedup rank, then SOL rank; figures that are not comparable rank nobody."""

    def ranks(value: Callable[[EntrantReport], float | None]) -> dict[str, int]:
        values = {r.entrant: value(r) for r in rows}
        known = sorted({v for v in values.values() if v is not None}, reverse=True)
        return {e: 1 + sum(k > v for k in known) for e, v in values.items() if v is not None}

    by_speed = ranks(lambda r: r.overall.speedup.mean if r.overall.timing_comparable else None)
    by_sol = ranks(lambda r: r.overall.sol_fraction.mean if r.overall.timing_comparable else None)
    out = [r.model_copy(update={"rank_speedup": by_speed.get(r.entrant), "rank_sol": by_sol.get(r.entrant)})
           for r in rows]
    last = len(rows) + 1
    return sorted(out, key=lambda r: (r.rank_speedup or last, r.rank_sol or last, r.entrant))


def build_report(outcomes: list[SessionOutcome], run_dir: Path | str = "", run: RunRow | None = None) -> Report:
    scored = [o for o in outcomes if o.scored]
    entrants: dict[tuple[str, str | None], list[SessionOutcome]] = defaultdict(list)
    for o in scored:
        entrants[(o.agent, o.model)].append(o)
    rows = []
    for (agent, model), group in sorted(entrants.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        cats: dict[str, list[SessionOutcome]] = defaultdict(list)
        for o in group:
            cats[o.category].append(o)
        rows.append(EntrantReport(agent=agent, model=model, entrant=group[0].entrant, overall=metrics(group),
                                  by_category={c: metrics(g) for c, g in sorted(cats.items())}))
    per_task: dict[tuple[str, str], list[SessionOutcome]] = defaultdict(list)
    for o in scored:
        per_task[(o.task, o.entrant)].append(o)
    tasks = [task_result(t, e, g) for (t, e), g in sorted(per_task.items())]
    comparable, note = comparability(scored)
    if run is not None and run.backend == "cpu" and not scored:
        comparable, note = False, timing_note("cpu")
    repeats = max((r.overall.repeats for r in rows), default=0)
    notes = [
        "rates and fast_p are over scored sessions; infra errors and unscored sessions are left out of every figure",
        "fast_p: fraction of sessions that pass AND have speedup > p (a failure earns nothing)",
        "speedup: geometric mean over passing sessions only",
        ("SOL: speed-of-light fraction, the time at the GPU's datasheet limits (the task's bytes over the "
         "bandwidth or its flops over the peak, whichever is longer) over the kernel's time; geometric mean over "
         "passing sessions; entrants are ranked by speedup and by SOL"),
        "usage figures are per session; cost per session is over the sessions whose cost is known",
        ("with repeats: mean of the per-repeat figure and its 95% interval (Student's t, n = repeats); "
         "speedup intervals are geometric" if repeats > 1 else "one repeat: no confidence interval (n/a)"),
    ]
    forged = [o for o in outcomes if o.usage.foreign_events]
    if forged:
        notes.append(f"{len(forged)} session(s) had events in their CLI's stream that the CLI cannot have written "
                     f"(an agent writing into its own accounting): their usage is the largest any event claimed; "
                     f"look at {', '.join(sorted({o.session_id for o in forged})[:5])}")
    if not comparable:
        notes.append(f"timings not comparable ({note}): speedups come from Triton's interpreter and torch on the "
                     "CPU, so speedups and fast_p are shown as n/c (the figures stay in --json); generalizes is "
                     "over the hidden configs that were checked, the others being too large for the CPU")
    return Report(
        run_dir=str(run_dir), run=run, sessions=len(outcomes), scored=len(scored),
        infra_errors=[_line(o) for o in outcomes if o.infra_error],
        unscored=[_line(o) for o in outcomes if o.score is None and not o.infra_error],
        flagged=[_line(o) for o in outcomes if o.score and (o.score.verdict == "flagged"
                                                             or any(is_integrity_flag(f) for f in o.score.flags))],
        audit=[_line(o) for o in outcomes if o.score and o.score.verdict != "flagged" and o.score.flags
               and not any(is_integrity_flag(f) for f in o.score.flags)],
        entrants=ranked(rows), tasks=tasks, points=[_line(o) for o in scored],
        cost_total_usd=sum(o.usage.cost_usd or 0.0 for o in outcomes), timing_comparable=comparable,
        timing_note=note, notes=notes)


def is_integrity_flag(flag: str) -> bool:
    """Everything but the "speedup>10x" audit note (harness/scoring.py, physics_flags)."""
    return not flag.startswith(AUDIT_PREFIX)


def report_for(run_dir: Path | str) -> Report:
    run, outcomes = load_run(run_dir)
    return build_report(outcomes, run_dir, run)


# ---------------------------------------------------------------- text

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(text: str | None, limit: int = 200) -> str:
    """Untrusted text (task ids, model names, messages, flags) made safe for a terminal: no escape sequences."""
    text = _CONTROL.sub(" ", text or "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fmt_rate(s: Stat) -> str:
    if s.mean is None:
        return "-"
    ci = "" if s.low is None or s.high is None else f" ±{100 * (s.high - s.low) / 2:.0f}"
    return f"{100 * s.mean:.0f}%{ci}"


def fmt_speedup(s: Stat, m: Metrics | None = None) -> str:
    if s.mean is None:
        return "-"
    if m is not None and not m.timing_comparable:
        return speedup_text(s.mean, False, m.timing_note)
    ci = "" if s.low is None or s.high is None else f" ({s.low:.2f}-{s.high:.2f})"
    return f"{s.mean:.2f}x{ci}"


def fmt_generalizes(m: Metrics) -> str:
    """The hidden-config rate, with how many hidden configs were checked when some were not."""
    rate = fmt_rate(m.generalizes)
    if m.hidden_configs is not None and m.hidden_checked is not None:
        if m.hidden_checked < m.hidden_configs:
            return f"{rate} ({m.hidden_checked} of {m.hidden_configs} hidden configs checked)"
        return rate
    return rate if m.timing_comparable else f"{rate} (hidden configs checked: not recorded)"


def fmt_num(s: Stat, unit: str = "", digits: int = 0) -> str:
    if s.mean is None:
        return "-"
    ci = "" if s.low is None or s.high is None else f" ±{(s.high - s.low) / 2:,.{digits}f}"
    return f"{s.mean:,.{digits}f}{unit}{ci}"


def fmt_tokens(s: Stat) -> str:
    if s.mean is None:
        return "-"
    m = s.mean
    return f"{m / 1e6:.2f}M" if m >= 1e6 else f"{m / 1e3:.1f}k" if m >= 1e3 else f"{m:.0f}"


def fmt_cost(m: Metrics) -> str:
    s = m.cost_usd
    if s.mean is None or set(m.cost_sources) == {"none"}:  # no model, nothing spent (the scripted agent)
        return "-"
    return f"${s.mean:,.2f}" + ("" if s.low is None or s.high is None else f" ±${(s.high - s.low) / 2:,.2f}")


def fmt_sources(sources: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(sources.items(), key=lambda kv: -kv[1])) or "-"


def fmt_sol(s: Stat | float | None, comparable: bool = True) -> str:
    mean = s.mean if isinstance(s, Stat) else s
    if not comparable:
        return "n/c"
    if mean is None:
        return "-"
    ci = "" if not isinstance(s, Stat) or s.low is None or s.high is None else f" ({s.low:.2f}-{s.high:.2f})"
    return f"{mean:.2f}{ci}"


RATE_HEADERS = ["sessions", "repeats", "correct", "generalizes", "fast_1", "fast_1.5", "fast_2",
                "speedup (passing)", "SOL (passing)"]


def rate_cells(m: Metrics) -> list[str]:
    fast = [fmt_rate(s) if m.timing_comparable else "n/c" for s in m.fast_p.values()]
    return [f"{m.sessions}", f"{m.repeats}" + (" (CI n/a)" if m.repeats < 2 else ""), fmt_rate(m.correct),
            fmt_generalizes(m), *fast, f"{fmt_speedup(m.speedup, m)} [{m.passing} pass]",
            fmt_sol(m.sol_fraction, m.timing_comparable)]


def rank_cells(e: EntrantReport) -> list[str]:
    return ["-" if e.rank_speedup is None else f"{e.rank_speedup}", "-" if e.rank_sol is None else f"{e.rank_sol}"]


RANK_HEADERS = ["#speedup", "#SOL"]


USAGE_HEADERS = ["input tok", "output tok", "cache read", "cache write", "cost/session", "cost source",
                 "total cost", "wall", "turns", "tool calls"]


def usage_cells(m: Metrics) -> list[str]:
    return [fmt_tokens(m.input_tokens), fmt_tokens(m.output_tokens), fmt_tokens(m.cache_read_tokens),
            fmt_tokens(m.cache_write_tokens), fmt_cost(m), fmt_sources(m.cost_sources), f"${m.cost_total_usd:,.2f}",
            fmt_num(m.wall_s, "s"), fmt_num(m.turns, digits=1), fmt_num(m.tool_calls, digits=1)]


def run_line(r: Report) -> str:
    """Where and how the run ran, for the header."""
    if r.run is None:
        return f"run {r.run_dir} (no run row in the store)"
    x = r.run
    done = f"finished {x.finished_at}" if x.finished_at else "not finished"
    return (f"run {x.id} in {r.run_dir}: {x.device} ({x.backend}), sandbox {x.sandbox}, evaluator "
            f"{x.evaluator_version}, crucible {x.crucible_version}; started {x.started_at}, {done}")


def _header(r: Report) -> str:
    return (f"{clean(run_line(r), 400)}\n{r.sessions} sessions, {r.scored} scored, {len(r.infra_errors)} infra "
            f"error(s) (not counted), {len(r.unscored)} unscored, {len(r.flagged)} flagged; "
            f"total cost ${r.cost_total_usd:,.2f}")


def _session_table(lines: list[SessionLine], with_flags: bool) -> str:
    rows = [[clean(s.session_id, 80), clean(s.verdict or s.end_reason or "-"),
             clean("; ".join(s.flags) if with_flags else s.message, 160)] for s in lines]
    return table(["session", "verdict", "flags (evidence)" if with_flags else "message"], rows)


def leaderboard_text(run_dir: Path | str) -> str:
    """The short form `crucible run` prints at its end: one row per agent/model, and what was left out."""
    r = report_for(run_dir)
    lines = [_header(r), table(["agent/model", *RANK_HEADERS, *RATE_HEADERS, "cost/session"],
                               [[clean(e.entrant, 60), *rank_cells(e), *rate_cells(e.overall), fmt_cost(e.overall)]
                                for e in r.entrants])]
    if not r.timing_comparable:
        lines.append(comparability_line(r))
    if r.infra_errors:
        lines.append(f"infra errors (not counted): {', '.join(clean(s.session_id, 80) for s in r.infra_errors)}")
    if r.flagged:
        lines.append(f"flagged: {', '.join(clean(s.session_id, 80) for s in r.flagged)} "
                     f"(see `crucible report {clean(str(run_dir))}`)")
    return "\n".join(lines)


def comparability_line(r: Report) -> str:
    return (f"timings not comparable ({r.timing_note}): speedups and fast_p are shown as n/c, as they say "
            "nothing about a GPU (the measured figures are in `crucible report RUN --json`); generalizes counts "
            "only the hidden configs that were checked")


def report_text(r: Report) -> str:
    out = [_header(r), "", *(f"note: {n}" for n in r.notes), "", "== results per agent/model",
           table(["agent/model", *RANK_HEADERS, *RATE_HEADERS],
                 [[clean(e.entrant, 60), *rank_cells(e), *rate_cells(e.overall)] for e in r.entrants]),
           "", "== usage per session (total cost: over the scored sessions)",
           table(["agent/model", *USAGE_HEADERS], [[clean(e.entrant, 60), *usage_cells(e.overall)]
                                                   for e in r.entrants]),
           "", "== by category",
           table(["agent/model", "category", *RATE_HEADERS],
                 [[clean(e.entrant, 60), clean(c), *rate_cells(m)] for e in r.entrants for c, m in e.by_category.items()]),
           "", "== per task",
           table(["task", "agent/model", "passing", "speedup (passing)", "SOL (passing)"],
                 [[clean(t.task, 80), clean(t.entrant, 60), f"{t.passing}/{t.sessions}",
                   speedup_text(t.speedup, t.timing_comparable, t.timing_note),
                   fmt_sol(t.sol_fraction, t.timing_comparable)] for t in r.tasks])]
    if r.infra_errors:
        out += ["", "== infra errors (left out of every figure)", _session_table(r.infra_errors, with_flags=False)]
    if r.unscored:
        out += ["", "== unscored (not finished; left out)", _session_table(r.unscored, with_flags=False)]
    if r.flagged:
        out += ["", "== flagged", _session_table(r.flagged, with_flags=True)]
    if r.audit:
        out += ["", "== for audit (speedups above 10x; plausible against a slow baseline)",
                _session_table(r.audit, with_flags=True)]
    return "\n".join(out)
