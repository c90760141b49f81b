"""What reaches the agent: every text the tools and `crucible tool` show passes through an `AgentView`.

    engine result (Evaluation, BuildResult, Profile)          candidate code wrote some of its text
        └─ AgentView.evaluation / build / profile ──▶ the same model, safe to show ──▶ MCP result, CLI output

    text(s)   1. drops each line that reproduces a line of hidden.toml or of the solution
              2. rewrites absolute paths: inside the workspace or snapshot relative to it, others hidden;
                 the task folder is hidden wherever it appears
              3. replaces hidden config names
              4. cuts to the limit
    error(s)  text(s), laid out with the frames in the agent's own files first, then the exception,
              then as many of the other frames as fit

This is the second line of defence: a candidate should not be able to read the task folder at all
(toolkit/sandbox.py), but if it does, what it raises or prints does not carry the secrets out. Final scoring
(harness/scoring.py) is operator-facing and reads the engine's results unfiltered.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .profiling import Profile
from .results import ConfigResult, Evaluation, IntegrityFinding
from .task import Task
from .toolchains import BuildResult
from .workspace import visible_files

HIDDEN_CONFIG = "<hidden config>"
OUTSIDE = "<path outside the workspace>"
REMOVED = "<hidden text removed>"

LONG_LINE = 12
"""A secret line this long (non-space characters) is dropped wherever it appears inside an output line."""
SHORT_LINE = 3
"""hidden.toml's lines are short (`N = 17`): shorter than LONG_LINE, they are dropped when an output line
is exactly one of them, or holds two or more of them (the file printed as one repr line)."""
RAN = ("ok", "incorrect", "not_run")
"""Statuses whose message is ours; any other carries the candidate's error text."""

# Two or more segments, so `x /2` or `N/2` in a code line is not taken for a path.
_PATH = re.compile(r"(?<![\w./~-])(?:/[\w.+@%~-]+){2,}/?")
_FRAME = re.compile(r'^(?P<indent>[ \t]*)File "(?P<file>[^"]*)", line \d+')
_HEADER = "Traceback (most recent call last)"
_CHAIN = ("During handling of the above exception, another exception occurred:",
          "The above exception was the direct cause of the following exception:")


def _squash(line: str) -> str:
    return "".join(line.split())


def _lines(path: Path) -> set[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return set()
    return {s for s in map(_squash, text.splitlines()) if s}


def _cut(s: str, limit: int) -> str:
    """Head and tail of s, at most `limit` characters, saying how much was left out."""
    if len(s) <= limit:
        return s
    room = limit - 48  # the marker, with room for a ten-digit count
    if room < 20:
        return s[:limit]
    head = room * 2 // 5
    tail = room - head
    return f"{s[:head]}\n[... {len(s) - head - tail} characters left out ...]\n{s[len(s) - tail:]}"


def _fit(units: list[str], budget: int) -> str:
    """Whole units (lines, frames) from both ends, the end favoured two to one (the innermost frames and
    the last output matter most), within budget characters; what is left out is counted."""
    if sum(len(u) + 1 for u in units) <= budget:
        return "\n".join(units)
    units = [u if len(u) <= budget // 2 else _cut(u, budget // 2) for u in units]
    reserve = 48  # the "left out" line
    head: list[str] = []
    tail: list[str] = []
    used, i, j, turn = reserve, 0, len(units) - 1, 0
    while i <= j:
        from_head = turn % 3 == 2
        unit = units[i] if from_head else units[j]
        if used + len(unit) + 1 > budget:
            break
        used += len(unit) + 1
        if from_head:
            head.append(unit)
            i += 1
        else:
            tail.append(unit)
            j -= 1
        turn += 1
    left = j - i + 1
    middle = [f"  [... {left} {'frame' if left == 1 else 'frames'} or lines left out ...]"] if left else []
    return "\n".join(head + middle + tail[::-1])


class AgentView(BaseModel):
    """One task's secrets and the folders the agent may see, and the filters that keep the one out of what
    the other is shown."""

    model_config = ConfigDict(frozen=True)

    task_root: Path
    workspace: Path
    snapshot_root: Path | None = None
    """The snapshot a result came from: its paths are shown relative to it, like the workspace's."""
    visible: tuple[str, ...]
    """Names of the task's files the agent may see (toolkit/workspace.py `visible_files`)."""
    hidden_configs: tuple[str, ...] = Field(repr=False, exclude=True)
    secret_lines: frozenset[str] = Field(repr=False, exclude=True)
    """Lines (whitespace removed) of hidden.toml and the solution, of LONG_LINE characters or more, that no
    visible file has."""
    short_hidden_lines: frozenset[str] = Field(repr=False, exclude=True)
    """hidden.toml's shorter lines that no visible file has (`N=17`, `name="tail"`)."""

    @classmethod
    def for_task(cls, task: Task, workspace: Path, snapshot_root: Path | None = None) -> AgentView:
        shown = visible_files(task)
        files = list(shown.values()) + ([task.file(task.spec.stub)] if task.spec.stub else [])
        # Lines the agent may see anyway (its files, the visible spec) are no secret: `import triton`
        # in the solution must not blank the agent's own traceback.
        public = set().union(*(_lines(p) for p in files))
        public |= {s for s in _lines(task.file("task.toml")) if not s.startswith("solution=")}
        solutions = {task.file(task.spec.solution)} if task.spec.solution else set()
        solutions |= set(task.root.glob("solution.*"))
        hidden = _lines(task.file("hidden.toml")) - public
        secret = (hidden | set().union(*(_lines(p) for p in solutions))) - public
        return cls(task_root=task.root, workspace=Path(workspace).absolute(), snapshot_root=snapshot_root,
                   visible=tuple(sorted(shown)), hidden_configs=tuple(c.name for c in task.configs("hidden")),
                   secret_lines=frozenset(s for s in secret if len(s) >= LONG_LINE),
                   short_hidden_lines=frozenset(s for s in hidden if SHORT_LINE <= len(s) < LONG_LINE))

    def with_snapshot(self, snapshot_root: Path) -> AgentView:
        # A fresh model, not model_copy: that would carry over the cached patterns of this one.
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        return AgentView(**{**fields, "snapshot_root": snapshot_root})

    # ------------------------------------------------------------ text

    @cached_property
    def _roots(self) -> list[str]:
        """The agent's folders, as plain and as resolved paths (a traceback may show either), longest first."""
        roots = [self.workspace] + ([self.snapshot_root] if self.snapshot_root else [])
        found = {os.path.normpath(p) for r in roots for p in (str(r), str(r.resolve()))}
        return sorted(found, key=len, reverse=True)

    @cached_property
    def _task_roots(self) -> list[str]:
        return sorted({os.path.normpath(str(self.task_root)), os.path.normpath(str(self.task_root.resolve()))})

    @cached_property
    def _glued(self) -> re.Pattern[str]:
        """The task folder (and its category folder, where its siblings are) anywhere in the text: a path
        glued to a word (`x/home/.../hidden.toml`) is no path to _PATH, but still names the folder."""
        folders = {os.path.normpath(str(p)) for root in (self.task_root, self.task_root.resolve())
                   for p in (root, root.parent) if len(p.parts) >= 3}
        alternatives = "|".join(re.escape(f) for f in sorted(folders, key=len, reverse=True))
        return re.compile(rf"(?:{alternatives})[\w.+@%~/-]*")

    @cached_property
    def _names(self) -> re.Pattern[str] | None:
        if not self.hidden_configs:
            return None
        names = "|".join(re.escape(n) for n in sorted(self.hidden_configs, key=len, reverse=True))
        # The placeholders are matched first and kept, so a config named `path` cannot rewrite them.
        keep = "|".join(re.escape(p) for p in (HIDDEN_CONFIG, OUTSIDE, REMOVED))
        return re.compile(rf"(?P<keep>{keep})|(?<![\w.-])(?:{names})(?![\w-])")

    @cached_property
    def _short(self) -> re.Pattern[str] | None:
        if not self.short_hidden_lines:
            return None
        lines = "|".join(re.escape(s) for s in sorted(self.short_hidden_lines, key=len, reverse=True))
        return re.compile(rf"(?:{lines})(?![\w.])")  # `M=1` is not in `M=128`

    def _secret(self, line: str) -> bool:
        flat = _squash(line)
        if not flat:
            return False
        if flat in self.short_hidden_lines or any(s in flat for s in self.secret_lines):
            return True
        return self._short is not None and len(set(self._short.findall(flat))) >= 2

    def _path(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        trail = raw[len(raw.rstrip(".")):] if not raw.endswith("..") else ""  # a sentence's full stop
        path = os.path.normpath(raw[:len(raw) - len(trail)])  # `ws/../../task` is outside the workspace
        if any(path == r or path.startswith(r + "/") for r in self._task_roots):
            return OUTSIDE + trail
        for root in self._roots:
            if path == root or path.startswith(root + "/"):
                return (path[len(root) + 1:] or ".") + trail
        return OUTSIDE + trail

    def text(self, s: str, limit: int = 4000) -> str:
        """s as the agent may see it: no line of hidden.toml or the solution, no path outside its folders,
        no hidden config name; at most `limit` characters."""
        out: list[str] = []
        dropping = False
        for line in s.split("\n"):
            if self._secret(line):
                if not dropping:  # the indent is kept, so a traceback still parses around the gap
                    out.append(line[:len(line) - len(line.lstrip())] + REMOVED)
                dropping = True
                continue
            dropping = False
            out.append(line)
        text = self._glued.sub(OUTSIDE, _PATH.sub(self._path, "\n".join(out)))
        if self._names is not None:
            text = self._names.sub(lambda m: m.group("keep") or HIDDEN_CONFIG, text)
        return _cut(text, limit)

    def error(self, traceback_text: str, limit: int = 3000) -> str:
        """A candidate's error for the agent: the frames in its own files first (relative file, line, code),
        then the exception, then as many other frames as fit. Free text (compiler output, a CUDA error)
        keeps its head and tail."""
        text = self.text(traceback_text, limit=10**9)
        lines = text.split("\n")
        if not any(_FRAME.match(line) for line in lines):
            return _fit(lines, limit) if len(text) > limit else text
        preamble, ours, others, exceptions = _split(lines)
        top = preamble if sum(len(p) + 1 for p in preamble) <= 300 else []
        if not top:
            others = preamble + others
        head = top + ["In your files (innermost last):"]
        head += ours or ["  (none: the error was raised outside them)"]
        head += exceptions
        first = "\n".join(head)
        if len(first) >= limit - 100 or not others:
            return _cut(first, limit)
        return first + "\nOther frames:\n" + _fit(others, limit - len(first) - len("\nOther frames:\n"))

    # ------------------------------------------------------------ the result models

    def config_result(self, c: ConfigResult) -> ConfigResult | None:
        """None for a hidden config: the agent learns nothing of it, not even that it ran."""
        if c.config in self.hidden_configs:
            return None
        message = self.error(c.message) if c.status == "error" else self.text(c.message, 3000)
        seeds = [s.model_copy(update={"problems": [self.text(p, 1000) for p in s.problems]}) for s in c.seeds]
        return c.model_copy(update={"message": message, "seeds": seeds, "integrity": self._findings(c.integrity)})

    def _findings(self, findings: list[IntegrityFinding]) -> list[IntegrityFinding]:
        return [f.model_copy(update={"evidence": self.text(f.evidence, 1000),
                                     "config": None if f.config is None else self.text(f.config, 200)})
                for f in findings if f.config not in self.hidden_configs]

    def evaluation(self, ev: Evaluation) -> Evaluation:
        configs = [r for r in map(self.config_result, ev.configs) if r is not None]
        kernels = {name: [k.model_copy(update={"name": self.text(k.name, 500)}) for k in rows]
                   for name, rows in ev.kernels.items() if name not in self.hidden_configs}
        build = None if ev.build is None else self.build(BuildResult.model_validate(ev.build)).model_dump(mode="json")
        return ev.model_copy(update={
            "message": self.text(ev.message) if ev.status in RAN else self.error(ev.message, 4000),
            "configs": configs, "kernels": kernels, "build": build, "integrity": self._findings(ev.integrity),
            "isolation": {k: self.text(v, 1000) for k, v in ev.isolation.items()},
            "stderr_tail": self.error(ev.stderr_tail, 4000) if ev.stderr_tail else ""})

    def build(self, b: BuildResult) -> BuildResult:
        diagnostics = [d.model_copy(update={"file": self.text(d.file, 500), "message": self.text(d.message)})
                       for d in b.diagnostics]
        return b.model_copy(update={
            "diagnostics": diagnostics, "log": self.error(b.log, 4000) if b.log else "",
            "kernels": [k.model_copy(update={"name": self.text(k.name, 500)}) for k in b.kernels],
            "artifact": None if b.artifact is None else self.text(b.artifact, 500),
            "command": [self.text(c, 500) for c in b.command]})

    def profile(self, p: Profile) -> Profile:
        ncu = None if p.ncu is None else {
            self.text(k, 500): {m: self.text(v, 500) if isinstance(v, str) else v for m, v in metrics.items()}
            for k, metrics in p.ncu.items()}
        return p.model_copy(update={
            "config": self.text(p.config, 200),
            "message": self.text(p.message) if p.status in RAN else self.error(p.message, 4000),
            "timing": None if p.timing is None else self.config_result(p.timing),
            "kernels": [k.model_copy(update={"name": self.text(k.name, 500)}) for k in p.kernels],
            "resources": [{**r, "name": self.text(str(r["name"]), 500)} if "name" in r else r for r in p.resources],
            "ncu": ncu, "notes": [self.text(n, 1000) for n in p.notes]})


def _split(lines: list[str]) -> tuple[list[str], list[str], list[str], list[str]]:
    """A Python traceback (chained ones too) as (lines before it, frames in the agent's files, the other
    frames and headers, the exception lines). A frame is its `File "...", line N` line with the code and
    caret lines under it; after text(), a file in the agent's folders is the only kind that is relative."""
    preamble: list[str] = []
    ours: list[str] = []
    others: list[str] = []
    exceptions: list[str] = []
    state = "preamble"  # -> frames -> exception -> (a chained traceback) frames ...
    i = 0
    while i < len(lines):
        line = lines[i]
        frame = _FRAME.match(line)
        if frame:
            indent = len(frame["indent"])
            block = [line]
            i += 1
            while i < len(lines) and not _FRAME.match(lines[i]) and lines[i].strip() \
                    and len(lines[i]) - len(lines[i].lstrip()) > indent:
                block.append(lines[i])
                i += 1
            own = not frame["file"].startswith(("<", "/"))
            (ours if own else others).append("\n".join(block))
            state = "frames"
            continue
        stripped = line.strip()
        if stripped.startswith(_HEADER):
            others.append(line)
            state = "header"
        elif stripped in _CHAIN:
            exceptions.append(line)
            state = "preamble-of-next"
        elif state in ("frames", "header") and line[:1] in (" ", "\t"):
            others.append(line)  # `[Previous line repeated 996 more times]` and the like
        elif state in ("frames", "exception"):
            exceptions.append(line)
            state = "exception"
        elif state == "preamble":
            preamble.append(line)
        elif stripped:
            exceptions.append(line)
        i += 1
    while exceptions and not exceptions[-1].strip():
        exceptions.pop()
    return preamble, ours, others, exceptions
