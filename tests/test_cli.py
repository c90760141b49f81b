"""The `crucible` command as a user runs it."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from crucible.harness import render
from crucible.harness.cli import main
from crucible.toolkit.evaluation import CPU_LIMIT, EvalRequest
from crucible.toolkit.results import ConfigResult, Evaluation
from crucible.toolkit.task import discover_tasks, find_task
from crucible.toolkit.toolchains import BuildResult, BuildTarget, KernelResources
from crucible.toolkit.workspace import materialize

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(__file__).parent / "planted"
FIXTURES = Path(__file__).parent / "fixtures/tasks"


def crucible(*args: str, tasks: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if tasks is not None:
        import os

        env = {**os.environ, "CRUCIBLE_TASKS": str(tasks)}
    return subprocess.run([sys.executable, "-m", "crucible.harness.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_tasks_json_lists_the_suite_with_its_categories() -> None:
    proc = crucible("tasks", "--json")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    ids = {t["id"] for t in listed}
    assert {"triton2triton/softmax", "cuda2cuda/rmsnorm", "torch2triton/silu_and_mul"} <= ids
    assert all(t["hidden_configs"] >= 6 for t in listed)


def test_tasks_show_gives_the_visible_part_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", "cuda2cuda/rmsnorm", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    task = find_task("cuda2cuda/rmsnorm")
    assert [c["name"] for c in shown["configs"]] == [c.name for c in task.spec.configs]
    text = json.dumps(shown)
    assert "solution" not in shown and not any(c.name in text for c in task.hidden.configs)


def test_an_unknown_task_is_a_usage_error_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", "nope/nothing"]) == 2
    err = capsys.readouterr().err
    assert "no task 'nope/nothing'" in err and "triton2triton/softmax" in err


def workspace_with(task_id: str, source: Path, tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    materialize(find_task(task_id), ws)
    shutil.copyfile(source, ws / find_task(task_id).spec.candidate)
    return ws


TRITON_TASKS = [t for t in discover_tasks()[0] if t.spec.language == "triton"]
QUICK_TASKS = {"triton2triton/softmax", "torch2triton/silu_and_mul"}
"""The quick set runs `tool test` on these; the other Triton tasks run in the slow set (each costs seconds to
tens of seconds in the interpreter, and the slow set's per-task validation checks the same files too)."""


def _plan(task, file: str):
    return pytest.param(task, file, id=f"{task.id}-{file}",
                        marks=() if task.id in QUICK_TASKS else pytest.mark.slow)


PLANS = [_plan(t, t.spec.solution) for t in TRITON_TASKS] + [_plan(t, t.spec.baseline) for t in TRITON_TASKS
                                                              if t.spec.baseline]


@pytest.mark.parametrize(("task", "file"), PLANS)
def test_tool_test_says_correct_for_the_expert_solution_and_the_baseline(task, file: str, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    source = task.file(file)
    ws = workspace_with(task.id, source, tmp_path)
    code = main(["tool", "test", "--task", task.id, "--workspace", str(ws), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "ok" and result["correct"] is True, result["message"]


def test_tool_test_says_incorrect_with_the_mismatch_for_a_planted_wrong_kernel(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    ws = workspace_with("triton2triton/softmax", PLANTED / "softmax_wrong.py", tmp_path)
    code = main(["tool", "test", "--task", "triton2triton/softmax", "--workspace", str(ws)])
    out = capsys.readouterr().out
    assert code == 1
    assert "INCORRECT" in out and "first at [" in out and "max abs err" in out


def test_tool_compile_reports_the_cuda_kernels_resources_without_a_gpu(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    task = find_task("cuda2cuda/rmsnorm")
    ws = workspace_with(task.id, task.file(task.spec.solution), tmp_path)
    assert main(["tool", "compile", "--task", task.id, "--workspace", str(ws), "--json"]) == 0
    build = json.loads(capsys.readouterr().out)
    assert build["ok"] and build["target"]["arch"] == "sm_90"
    assert build["kernels"] and all(k["registers"] for k in build["kernels"])
    # and `test`, `bench` and `profile` say plainly that running it needs a GPU, with the exit code for
    # "nothing could run here", neither the kernel's failure nor bad input
    for tool in ("test", "bench", "profile"):
        assert main(["tool", tool, "--task", task.id, "--workspace", str(ws)]) == 3, tool
        out = capsys.readouterr().out
        assert "NOT_RUN" in out and "needs a GPU" in out and "too large" not in out, tool


def test_tool_compile_gives_file_and_line_of_a_cuda_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    task = find_task("cuda2cuda/rmsnorm")
    ws = workspace_with(task.id, task.file(task.spec.baseline), tmp_path)
    src = (ws / "kernel.cu").read_text().splitlines()
    src.insert(5, "this is not C++;")
    (ws / "kernel.cu").write_text("\n".join(src) + "\n")
    assert main(["tool", "compile", "--task", task.id, "--workspace", str(ws)]) == 1
    assert "kernel.cu:6: error" in capsys.readouterr().out


@pytest.mark.slow  # end to end through the CLI; tests/test_evaluation.py holds the same verdicts quickly
@pytest.mark.parametrize(("planted", "verdict"), [("vadd_crash.py", "CRASH"), ("vadd_hang.py", "TIMEOUT"),
                                                  ("vadd_exit.py", "EXIT"), ("vadd_os_exit.py", "EXIT")])
def test_tool_test_gives_a_clear_verdict_for_a_crash_hang_or_early_exit_and_the_next_call_works(
        planted: str, verdict: str, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert crucible("workspace", "triton2triton/vadd", str(ws), tasks=FIXTURES).returncode == 0
    shutil.copyfile(PLANTED / planted, ws / "kernel.py")
    bad = crucible("tool", "test", "--task", "triton2triton/vadd", "--workspace", str(ws), "--timeout", "10",
                   tasks=FIXTURES)
    assert bad.returncode == 1 and f": {verdict} —" in bad.stdout, bad.stdout + bad.stderr
    shutil.copyfile(FIXTURES / "triton2triton/vadd/solution.py", ws / "kernel.py")
    good = crucible("tool", "test", "--task", "triton2triton/vadd", "--workspace", str(ws), tasks=FIXTURES)
    assert good.returncode == 0 and ": OK —" in good.stdout, good.stdout + good.stderr


def test_tool_profile_prints_timing_kernels_and_what_does_not_apply_on_the_cpu(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = find_task("triton2triton/softmax")
    ws = workspace_with(task.id, task.file(task.spec.solution), tmp_path)
    code = main(["tool", "profile", "--task", task.id, "--workspace", str(ws)])  # the largest config that runs here
    out = capsys.readouterr().out
    assert code == 0, out
    assert "config small_fp32: OK" in out
    assert "speedup" in out and "registers" in out and "note: cpu backend" in out


def test_tool_profile_of_a_config_too_large_for_the_cpu_says_so_and_names_those_that_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = find_task("triton2triton/softmax")
    ws = workspace_with(task.id, task.file(task.spec.solution), tmp_path)
    code = main(["tool", "profile", "--task", task.id, "--workspace", str(ws), "--config", "fp16_2048x32000"])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "too large for the CPU interpreter" in out and "Configs that run here: small_fp32" in out


@pytest.mark.parametrize("timeout", ["-5", "nan", "inf", "1e308", "0", "3601"])
def test_a_timeout_that_is_not_a_time_limit_is_bad_input(timeout: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["tool", "test", "--task", "triton2triton/softmax", "--workspace", str(tmp_path), "--timeout", timeout])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--timeout: {timeout} seconds is not a time limit" in err and "at most 3600" in err


@pytest.mark.parametrize("timeout", [-5.0, math.nan, math.inf, 1e308, 0.0])
def test_an_eval_request_refuses_a_timeout_that_is_not_a_time_limit(timeout: float) -> None:
    with pytest.raises(ValidationError):
        EvalRequest(timeout_s=timeout)
    assert EvalRequest(timeout_s=12.5).timeout_s == 12.5


def test_tool_test_text_names_each_skipped_config_with_its_reason() -> None:
    reason = CPU_LIMIT
    ev = Evaluation(task="t/x", snapshot="0" * 64, backend="cpu", status="ok", message="correct on all 1 configs",
                    configs=[ConfigResult(config="small", status="pass"),
                             ConfigResult(config="big_one", status="skipped", message=reason)])
    text = render.evaluation_text(ev)
    assert f"  big_one: {reason}" in text and "small:" not in text


def test_kernel_names_are_shown_whole() -> None:
    name = "rmsnorm_kernel(" + ", ".join(["__nv_bfloat16 const*"] * 12) + ")"
    build = BuildResult(ok=True, language="cuda", target=BuildTarget(backend="cpu", arch="sm_90"),
                        kernels=[KernelResources(name=name, registers=16, shared_bytes=1024)])
    assert name in render.build_text(build)


def test_the_help_lists_every_tool_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "compile, test, bench, profile" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["tool", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "{compile,test,bench,profile}" in out and "3 nothing could run on this machine" in out


def test_calibrate_without_a_gpu_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate"]) == 2
    assert "NVIDIA GPU" in capsys.readouterr().err
