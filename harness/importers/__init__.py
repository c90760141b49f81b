"""Importers: problems of other benchmarks, written as task folders of this suite.

    importers/
      __init__.py             the registry (IMPORTERS, get_importer) and ImporterError
      kernelbench.py          KernelBench (`Model`, `get_inputs`, `get_init_inputs`) -> torch2triton / torch2cuda
      kernelbench_rules.toml  the default rules that make an imported task's hidden configs (copy and edit)

An importer is a function `(paths, out, category, rules, solution, force) -> list[str]` (one line per task
written); the problem files it reads are run only in a subprocess, never in the caller's process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

IMPORTERS: dict[str, str] = {"kernelbench": "crucible.harness.importers.kernelbench:import_problems"}


class ImporterError(Exception):
    """A problem that cannot be imported, or bad options; the message says what to change."""


def get_importer(name: str) -> Callable[..., list[str]]:
    target = IMPORTERS.get(name)
    if target is None:
        raise ImporterError(f"no importer {name!r}; known: {', '.join(sorted(IMPORTERS))}")
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)
