"""Named suites: `crucible run --suite NAME` picks the tasks whose ids match one of the suite's globs.

The data is `suites.toml` next to the suite's task folders (`$CRUCIBLE_TASKS/suites.toml`, in this checkout
`tasks/suites.toml`); a suite folder without that file has only `core`, every task. A suite whose tasks
are imported (`kernelbench-l1`) says in `build` how to make them; `crucible import` writes its entries into
the folder it imports to, so `CRUCIBLE_TASKS=<that folder>` finds them.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crucible.toolkit.task import Task, suite_root

SUITES_FILE = "suites.toml"


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    tasks: list[str] = Field(min_length=1)
    """Globs over task ids."""
    build: str = ""
    """How to get the tasks when none are here (imported suites)."""

    def matches(self, task_id: str) -> bool:
        return any(fnmatch.fnmatchcase(task_id, g) for g in self.tasks)


class SuiteError(Exception):
    """An unknown suite or a broken suites.toml; the message says which and what exists."""


def load_suites(root: Path | None = None) -> dict[str, Suite]:
    path = (root or suite_root()) / SUITES_FILE
    if not path.is_file():
        return {"core": Suite(name="core", description="the whole suite", tasks=["*"])}
    try:
        data = tomllib.loads(path.read_text())
        return {name: Suite(name=name, **body) for name, body in data.items()}
    except (tomllib.TOMLDecodeError, ValidationError, TypeError) as exc:
        raise SuiteError(f"{path}: {exc}") from None


def suite_entries(names: list[str], source: Path | None = None) -> str:
    """The suites.toml text of these suites, as `source` (default: this checkout's tasks/) defines them."""
    from crucible.toolkit.task import TASKS_ROOT

    path = (source or TASKS_ROOT) / SUITES_FILE
    data = tomllib.loads(path.read_text())
    out = []
    for name in names:
        body = data[name]
        out.append(f"[{name}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in body.items()))
    return "\n".join(out)


def _toml(v: object) -> str:
    import json

    return "[" + ", ".join(json.dumps(x) for x in v) + "]" if isinstance(v, list) else json.dumps(v)


def get_suite(name: str, root: Path | None = None) -> Suite:
    suites = load_suites(root)
    if name not in suites:
        raise SuiteError(f"no suite {name!r}; known: {', '.join(sorted(suites))}")
    return suites[name]


def select(tasks: list[Task], *, pattern: str = "*", suite: str | None = None) -> list[Task]:
    """The tasks a run asked for: a suite's (when named), else those matching the glob."""
    if suite is not None:
        chosen = get_suite(suite)
        picked = [t for t in tasks if chosen.matches(t.id)]
        if not picked and chosen.build:
            raise SuiteError(f"suite {suite!r} has no tasks in {suite_root()}: {chosen.build}")
        return picked
    return [t for t in tasks if fnmatch.fnmatchcase(t.id, pattern)]
