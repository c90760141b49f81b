"""Shared fixtures: a tiny Triton task that builds the engine's tests fast on the CPU."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Builds, snapshots and Triton's cache go to a per-session folder, never the user's."""
    os.environ["CRUCIBLE_CACHE"] = str(tmp_path_factory.mktemp("crucible-cache"))
    os.environ.setdefault("CRUCIBLE_BACKEND", "cpu")


@pytest.fixture
def tiny_task_dir(tmp_path: Path) -> Path:
    """A copy of tests/fixtures/tasks/triton2triton/vadd that a test may break."""
    dest = tmp_path / "tasks" / "triton2triton" / "vadd"
    shutil.copytree(FIXTURES / "tasks" / "triton2triton" / "vadd", dest)
    return dest
