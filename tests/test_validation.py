"""`crucible tasks validate`: what makes a task sound, checked on the fixture task and broken copies of it.

On the CPU the checks that need a GPU (speed, launch overhead) are skipped and said so; their logic is
tested on hand-made timings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crucible.toolkit.task import load_task
from crucible.toolkit.validation import (
    ConfigTiming,
    TaskValidation,
    _speed_checks,
    markdown_table,
    validate,
)

PLANTED = Path(__file__).parent / "planted"


def _validate(folder: Path) -> TaskValidation:
    return validate(load_task(folder), "cpu", seeds=1)


def test_the_fixture_task_passes_and_the_gpu_checks_say_they_were_skipped(tiny_task_dir: Path) -> None:
    result = _validate(tiny_task_dir)
    checks = {c.name: c for c in result.checks}
    assert result.status == "pass", [c.message for c in result.checks]
    for name in ("reference_deterministic", "reference_not_degenerate", "baseline_correct", "solution_correct"):
        assert checks[name].status == "pass", checks[name].message
    assert checks["solution_faster"].status == "skipped" and "GPU" in checks["solution_faster"].message
    assert checks["launch_overhead"].status == "skipped"
    figures = checks["solution_correct"].figures
    assert figures["configs_run"] == 3 and figures["configs_skipped"] == ["big"]  # > 2^18 outputs: GPU only


def test_a_nondeterministic_reference_fails(tiny_task_dir: Path) -> None:
    ref = tiny_task_dir / "reference.py"
    ref.write_text(ref.read_text().replace("return 2 * x + y", "return 2 * x + y + 1e-3 * torch.rand_like(x)"))
    result = _validate(tiny_task_dir)
    assert result.status == "fail"
    assert result.check("reference_deterministic").status == "fail"
    assert "differ" in result.check("reference_deterministic").message


@pytest.mark.parametrize(("body", "words"), [
    ("return 0 * x", "all zeros"),
    ("return 0 * x + 1000", "near-constant"),
    ("return torch.ones_like(x) + torch.arange(x.numel(), dtype=x.dtype)", "ignores its inputs"),
])
def test_a_degenerate_reference_fails(tiny_task_dir: Path, body: str, words: str) -> None:
    ref = tiny_task_dir / "reference.py"
    ref.write_text(ref.read_text().replace("return 2 * x + y", body))
    result = _validate(tiny_task_dir)
    check = result.check("reference_not_degenerate")
    assert check.status == "fail" and words in check.message, check.message


def test_a_wrong_expert_solution_fails(tiny_task_dir: Path) -> None:
    shutil.copyfile(PLANTED / "vadd_wrong.py", tiny_task_dir / "solution.py")
    result = _validate(tiny_task_dir)
    assert result.status == "fail"
    assert result.check("solution_correct").status == "fail"
    assert result.check("baseline_correct").status == "pass"


def test_a_wrong_baseline_fails(tiny_task_dir: Path) -> None:
    shutil.copyfile(PLANTED / "vadd_wrong.py", tiny_task_dir / "baseline.py")
    assert _validate(tiny_task_dir).check("baseline_correct").status == "fail"


def test_a_task_without_an_expert_solution_loads_and_fails_validation(tiny_task_dir: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('solution = "solution.py"\n', ""))
    (tiny_task_dir / "solution.py").unlink()
    assert load_task(tiny_task_dir).spec.solution is None
    check = _validate(tiny_task_dir).check("solution_correct")
    assert check.status == "fail" and "needs an expert solution" in check.message


def _timing(config: str, base: float, expert: float, *, small: bool = False) -> ConfigTiming:
    return ConfigTiming(config=config, hidden=False, baseline_us=base, expert_us=expert, speedup=base / expert,
                        peak_fraction=0.6, small=small, launch_bound=not small and base < 10)


def test_an_expert_slower_than_the_baseline_fails_and_thin_headroom_warns() -> None:
    assert _speed_checks([_timing("a", 100, 120), _timing("b", 100, 110)])[0].status == "fail"
    assert _speed_checks([_timing("a", 100, 90), _timing("b", 100, 85)])[0].status == "warn"
    fast = _speed_checks([_timing("a", 100, 50), _timing("b", 100, 40)])[0]
    assert fast.status == "pass" and fast.figures["min_speedup"] == pytest.approx(2.0)


def test_launch_bound_big_configs_warn_and_small_ones_are_marked_not_warned() -> None:
    launch = _speed_checks([_timing("big", 400, 100), _timing("tiny", 4, 2, small=True)])[1]
    assert launch.status == "pass" and "tiny" in launch.message
    launch = _speed_checks([_timing("big", 400, 100), _timing("mid", 6, 3)])[1]
    assert launch.status == "warn" and "mid" in launch.message and launch.figures["launch_bound"] == ["mid"]


def test_the_markdown_table_has_a_row_per_task_and_the_per_config_figures() -> None:
    timings = [_timing("big", 400, 100), _timing("mid", 300, 150)]
    result = TaskValidation(task="triton2triton/x", backend="cuda", status="pass", checks=_speed_checks(timings),
                            timings=timings, baseline_us=346.4, expert_us=122.5, speedup=2.83, min_speedup=2.0,
                            peak_fraction=0.6, device="NVIDIA H200")
    table = markdown_table([result])
    assert "| triton2triton/x | 2 | 346.4 | 122.5 | 2.83x | 2.00x | 0.60 | pass |" in table
    assert "## triton2triton/x" in table and "| big |" in table and "NVIDIA H200" in table


def _cli(*args: str, tasks: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CRUCIBLE_TASKS": str(tasks), "CRUCIBLE_BACKEND": "cpu"}
    return subprocess.run([sys.executable, "-m", "crucible.harness.cli", "tasks", "validate", *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_cli_prints_json_writes_the_table_and_exits_1_on_a_failure(tiny_task_dir: Path, tmp_path: Path) -> None:
    suite = tiny_task_dir.parent.parent
    table = tmp_path / "validation.md"
    proc = _cli("triton2triton/vadd", "--json", "--seeds", "1", "--table", str(table), tasks=suite)
    assert proc.returncode == 0, proc.stderr
    [result] = json.loads(proc.stdout)
    assert result["task"] == "triton2triton/vadd" and result["status"] == "pass"
    assert "| triton2triton/vadd |" in table.read_text()

    shutil.copyfile(PLANTED / "vadd_wrong.py", tiny_task_dir / "solution.py")
    proc = _cli("--seeds", "1", tasks=suite)
    assert proc.returncode == 1
    assert "fail" in proc.stdout and "solution_correct" in proc.stdout
    assert _cli("nope/nothing", tasks=suite).returncode == 2
