"""The engine end to end on the CPU backend: build, check and time in a fresh worker, with the fixture
task and the planted candidates of tests/planted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crucible.toolkit.evaluation import CPU_LIMIT, EvalRequest, evaluate, fits_cpu
from crucible.toolkit.sandbox import probe
from crucible.toolkit.task import load_task
from crucible.toolkit.workspace import materialize, take_snapshot

FIXTURE = Path(__file__).parent / "fixtures/tasks/triton2triton/vadd"
PLANTED = Path(__file__).parent / "planted"
QUICK = EvalRequest(configs=["small", "tail"], timing="quick", backend="cpu", timeout_s=60)


def candidate(tmp_path: Path, source: Path):
    task = load_task(FIXTURE)
    ws = tmp_path / "ws"
    materialize(task, ws)
    shutil.copyfile(source, ws / "kernel.py")
    return task, take_snapshot(task, ws)


def run(tmp_path: Path, source: Path, request: EvalRequest = QUICK):
    task, snap = candidate(tmp_path, source)
    return evaluate(task, snap, request)


def test_the_baseline_is_correct_and_timed_against_itself(tmp_path: Path) -> None:
    result = run(tmp_path, FIXTURE / "baseline.py")
    assert result.status == "ok", result.message
    assert result.correct is True
    assert [c.config for c in result.configs] == ["small", "tail"]
    small = result.configs[0]
    assert small.status == "pass" and len(small.seeds) == 2
    assert small.candidate is not None and small.baseline is not None
    assert small.candidate.method == "cpu_wall" and not small.candidate.comparable
    assert result.speedup_against == "baseline" and not result.timing_comparable
    assert result.device is not None and result.device.backend == "cpu"
    assert result.isolation  # the worker says what isolation it applied


def test_a_wrong_kernel_is_incorrect_and_the_mismatch_is_located(tmp_path: Path) -> None:
    result = run(tmp_path, PLANTED / "vadd_wrong.py")
    assert result.status == "incorrect" and result.correct is False
    small = result.configs[0]
    assert small.status == "fail"
    out = small.seeds[0].outputs[0]
    assert out.first_mismatch is not None and out.first_mismatch.index == [255]
    assert out.unwritten > 0
    assert "never written" in small.message and "[255]" in result.message


@pytest.mark.parametrize(("planted", "status", "words"), [
    ("vadd_crash.py", "crash", "SIGSEGV"),
    ("vadd_exit.py", "exit", "exit"),
    ("vadd_os_exit.py", "exit", "exit"),
    ("vadd_oom.py", "oom", "memory"),
])
def test_a_dying_candidate_gets_a_clear_verdict_and_the_next_evaluation_works(
        tmp_path: Path, planted: str, status: str, words: str) -> None:
    bad = run(tmp_path / "bad", PLANTED / planted)
    assert bad.status == status, bad.message
    assert words in bad.message.lower() or words in bad.message
    good = run(tmp_path / "good", FIXTURE / "solution.py")
    assert good.status == "ok", good.message


def test_a_hanging_candidate_times_out_and_the_next_evaluation_works(tmp_path: Path) -> None:
    bad = run(tmp_path / "bad", PLANTED / "vadd_hang.py", QUICK.model_copy(update={"timeout_s": 8}))
    assert bad.status == "timeout", bad.message
    assert run(tmp_path / "good", FIXTURE / "solution.py").status == "ok"


def test_mutating_an_input_fails_even_with_the_right_answer(tmp_path: Path) -> None:
    result = run(tmp_path, PLANTED / "vadd_mutates_input.py")
    assert result.status == "incorrect"
    assert "modified input 'y'" in result.message


def test_returning_a_tensor_instead_of_writing_the_output_is_an_error_that_says_so(tmp_path: Path) -> None:
    result = run(tmp_path, PLANTED / "vadd_returns.py")
    assert result.status == "error"
    assert "write the results into the output tensors" in result.message


def test_a_syntax_error_is_a_compile_error_with_file_and_line(tmp_path: Path) -> None:
    result = run(tmp_path, PLANTED / "vadd_syntax.py")
    assert result.status == "compile_error"
    diags = result.build["diagnostics"]
    assert diags[0]["file"] == "kernel.py" and diags[0]["line"] == 1


def test_configs_too_large_for_the_interpreter_are_skipped_and_say_so(tmp_path: Path) -> None:
    result = run(tmp_path, FIXTURE / "solution.py", QUICK.model_copy(update={"configs": ["tail", "big"],
                                                                             "timing": "none"}))
    assert result.status == "ok"
    big = next(c for c in result.configs if c.config == "big")
    assert big.status == "skipped" and "GPU" in big.message


def test_an_unknown_config_name_is_rejected_naming_the_known_ones(tmp_path: Path) -> None:
    task, snap = candidate(tmp_path, FIXTURE / "solution.py")
    with pytest.raises(KeyError, match="visible configs: small, half"):
        evaluate(task, snap, QUICK.model_copy(update={"configs": ["nope"]}))


def test_pointing_an_output_at_another_tensor_leaves_the_shared_output_unwritten(tmp_path: Path) -> None:
    # The judge reads the arena it shares with the runner: a tensor the runner re-points is not it.
    result = run(tmp_path, PLANTED / "vadd_replaces_output.py")
    assert result.status == "incorrect"
    assert "never written" in result.message


def test_a_kernel_right_only_before_the_reference_runs_fails(tmp_path: Path) -> None:
    """The candidate runs before and after the reference; both runs must be right."""
    result = run(tmp_path, PLANTED / "vadd_only_first_call.py")
    assert result.status == "incorrect"


def test_an_identity_kernel_fails_on_every_seed(tmp_path: Path) -> None:
    result = run(tmp_path, PLANTED / "vadd_identity.py")
    assert result.status == "incorrect"
    assert all(not s.ok for c in result.configs for s in c.seeds)


def test_a_pooled_evaluation_gives_the_same_verdicts(tmp_path: Path) -> None:
    from crucible.toolkit.evaluation import worker_pool

    task, good = candidate(tmp_path / "a", FIXTURE / "solution.py")
    _, bad = candidate(tmp_path / "b", PLANTED / "vadd_crash.py")
    pool = worker_pool(task, "cpu")
    try:
        assert evaluate(task, good, QUICK, pool=pool).status == "ok"
        assert evaluate(task, bad, QUICK, pool=pool).status == "crash"
        assert evaluate(task, good, QUICK, pool=pool).status == "ok"
    finally:
        pool.close()


def test_a_kernel_right_on_the_checked_calls_and_wrong_on_timed_ones_fails_on_its_timed_inputs(
        tmp_path: Path) -> None:
    # Every timed call's inputs are fresh and some are checked after the fact; the judge calls the kernel
    # again, checked, on a wrong call's inputs: wrong again, so it is wrong (not a timing trick).
    result = run(tmp_path, PLANTED / "vadd_right_then_wrong.py",
                 QUICK.model_copy(update={"configs": ["small"], "seeds": 1}))
    assert result.status == "incorrect", result.message
    assert "drawn for a timed call" in result.message


@pytest.mark.skipif(not (probe().is_root and probe().setpriv), reason="capabilities are dropped only as root, by setpriv")
def test_the_candidates_runner_reports_it_holds_no_capability(tmp_path: Path) -> None:
    result = run(tmp_path, FIXTURE / "solution.py", EvalRequest(configs=["small"], timing="none", backend="cpu"))
    assert result.status == "ok", result.message
    assert result.isolation["candidate_user"].endswith("effective capabilities none"), result.isolation


FP8 = Path(__file__).parent / "fixtures/fp8_tasks/triton2triton/quant_fp8"  # a root of its own: runs over
# the fixture tasks stay one task


def test_an_fp8_output_is_checked_timed_and_audited_like_any_other(tmp_path: Path) -> None:
    task = load_task(FP8)
    ws = tmp_path / "ws"
    materialize(task, ws)
    shutil.copyfile(FP8 / "solution.py", ws / "kernel.py")
    full = EvalRequest(configs="all", timing="quick", integrity="full", backend="cpu", timeout_s=120)
    result = evaluate(task, take_snapshot(task, ws), full)
    assert result.status == "ok", result.message
    assert all(c.status == "pass" and not c.integrity for c in result.configs), result.configs
    # a kernel that never writes q: the FP8 NaN poison is still there, and the check says so
    (ws / "kernel.py").write_text((FP8 / "solution.py").read_text().replace(
        "    tl.store(q_ptr + row * n + offs, _e4m3(w), mask=offs < n)\n", ""))
    result = evaluate(task, take_snapshot(task, ws), full)
    assert result.status == "incorrect" and "never written (still the NaN poison)" in result.message, result.message


def test_on_the_cpu_a_config_with_small_outputs_but_many_bytes_is_skipped_as_validation_skips_it(
        tiny_task_dir: Path, tmp_path: Path) -> None:
    """One rule for evaluation, profiling and validation (evaluation.fits_cpu): a config whose output is
    small but whose inputs are huge (a reduction) would hang the interpreter in `tool test` otherwise."""
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('bytes = "3*N*itemsize"', 'bytes = "3*N*itemsize*100000"'))
    task = load_task(tiny_task_dir)
    assert not fits_cpu(task, task.config("small"))  # 1000 outputs, but 1.2 GB of compulsory bytes
    ws = tmp_path / "ws"
    materialize(task, ws)
    result = evaluate(task, take_snapshot(task, ws), EvalRequest(configs=["small"], timing="none", backend="cpu"))
    assert [(c.config, c.status, c.message) for c in result.configs] == [("small", "skipped", CPU_LIMIT)]
