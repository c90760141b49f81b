"""Final scoring's verdicts, from synthetic evaluations (every branch) and from real ones (planted kernels)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crucible.harness.scoring import physics_flags, score_evaluation, score_session
from crucible.toolkit.results import ConfigResult, Evaluation, TimingStats
from crucible.toolkit.task import Task, find_task

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "tasks"


@pytest.fixture(scope="module")
def task() -> Task:
    return find_task("triton2triton/vadd", FIXTURES)  # visible: small, half; hidden: tail, big


def cfg(name: str, status: str = "pass", speedup: float | None = 2.0, peak: float | None = None) -> ConfigResult:
    # A kernel reported at 100 us whose speed of light is `peak` of that.
    timed = None if peak is None else TimingStats(median_us=100, min_us=99, max_us=101, iqr_us=1, rse=0.01, reps=10,
                                                  method="gated_events", comparable=True)
    return ConfigResult(config=name, status=status, speedup=speedup, peak_fraction=peak,  # type: ignore[arg-type]
                        sol_fraction=peak, sol_us=None if peak is None else 100 * peak, candidate=timed)


def ev(status: str = "ok", configs: list[ConfigResult] | None = None, comparable: bool = True) -> Evaluation:
    return Evaluation(task="triton2triton/vadd", snapshot="abc123", backend="cuda", status=status,  # type: ignore[arg-type]
                      message=f"status {status}", configs=configs or [], timing_comparable=comparable,
                      speedup_against="baseline")


def test_right_everywhere_passes_with_visible_and_hidden_speedups_apart(task: Task) -> None:
    score = score_evaluation(task, ev(configs=[cfg("small", speedup=2), cfg("half", speedup=2),
                                               cfg("tail", speedup=8), cfg("big", speedup=8)]))
    assert score.verdict == "pass" and score.correct and score.generalizes
    assert score.speedup_visible == pytest.approx(2) and score.speedup_hidden == pytest.approx(8)
    assert score.speedup == pytest.approx(4) and score.flags == []


def test_right_on_visible_but_wrong_on_hidden_is_incorrect_and_does_not_generalize(task: Task) -> None:
    score = score_evaluation(task, ev("incorrect", [cfg("small"), cfg("half"), cfg("tail", "fail"), cfg("big")]))
    assert (score.verdict, score.correct, score.generalizes, score.speedup) == ("incorrect", True, False, None)


def test_wrong_on_a_visible_config_is_incorrect(task: Task) -> None:
    score = score_evaluation(task, ev("incorrect", [cfg("small", "fail"), cfg("half"), cfg("tail"), cfg("big")]))
    assert (score.verdict, score.correct, score.speedup) == ("incorrect", False, None)


def test_a_candidate_that_raises_on_a_hidden_config_only_does_not_generalize(task: Task) -> None:
    score = score_evaluation(task, ev("error", [cfg("small"), cfg("half"), cfg("tail", "error")]))
    assert (score.verdict, score.correct, score.generalizes) == ("incorrect", True, False)


@pytest.mark.parametrize(("status", "verdict"), [("crash", "incorrect"), ("exit", "flagged"), ("oom", "incorrect"),
                                                 ("error", "incorrect"), ("timeout", "timeout"),
                                                 ("compile_error", "compile_error")])
def test_a_candidate_that_dies_before_reporting_gets_the_matching_verdict(task: Task, status: str, verdict: str) -> None:
    score = score_evaluation(task, ev(status))
    assert score.verdict == verdict and score.speedup is None


def test_a_timeout_after_a_caught_or_wrong_config_keeps_the_catch_and_the_failure(task: Task) -> None:
    # A kernel caught (or wrong) on its first config that then hangs must not end as a plain timeout with
    # the evidence gone.
    from crucible.toolkit.results import IntegrityFinding

    caught = cfg("small", "fail").model_copy(update={"integrity": [
        IntegrityFinding(defence="input_mutation", config="small", evidence="the candidate modified input 'x'")]})
    score = score_evaluation(task, ev("timeout", [caught]))
    assert score.verdict == "flagged" and any("input_mutation" in f for f in score.flags)
    score = score_evaluation(task, ev("timeout", [cfg("small", "fail")]))
    assert score.verdict == "incorrect" and "wrong on small before" in score.message
    assert score_evaluation(task, ev("timeout", [cfg("small")])).verdict == "timeout"
    # the config the runner timed out on is marked error: that is the timeout itself, not a wrong answer
    assert score_evaluation(task, ev("timeout", [cfg("small"), cfg("half", "error")])).verdict == "timeout"


@pytest.mark.parametrize("status", ["crash", "oom", "error"])
def test_a_candidate_that_dies_after_every_config_was_right_is_incorrect_not_our_failure(task: Task,
                                                                                         status: str) -> None:
    # A kernel that would be slow or caught in the phases still to come gains by dying once its checks pass;
    # an infra_error is never counted against it, so this must not be one.
    score = score_evaluation(task, ev(status, [cfg("small"), cfg("half"), cfg("tail"), cfg("big")]))
    assert (score.verdict, score.correct, score.speedup) == ("incorrect", False, None)
    assert f"did not finish ({status})" in score.message


@pytest.mark.parametrize("status", ["infra", "not_run", "cancelled"])
def test_an_evaluation_that_could_not_run_is_an_infra_error_never_a_speedup(task: Task, status: str) -> None:
    score = score_evaluation(task, ev(status))
    assert score.verdict == "infra_error" and score.speedup is None


def test_skipped_hidden_configs_leave_generalization_decided_on_those_that_ran(task: Task) -> None:
    score = score_evaluation(task, ev(configs=[cfg("small"), cfg("half"), cfg("tail"),
                                               cfg("big", "skipped", speedup=None)]))
    assert score.verdict == "pass" and score.generalizes is True
    assert "hidden 1/1 right, 1 skipped" in score.message
    assert (score.hidden_configs, score.hidden_checked) == (2, 1)  # the report says "1 of 2 hidden configs checked"


def test_a_score_records_whether_its_timings_are_comparable(task: Task) -> None:
    everywhere = [cfg("small"), cfg("half"), cfg("tail"), cfg("big")]
    assert score_evaluation(task, ev(configs=everywhere)).timing_comparable is True
    on_cpu = score_evaluation(task, ev(configs=everywhere, comparable=False))
    assert on_cpu.verdict == "pass" and on_cpu.timing_comparable is False and on_cpu.speedup is not None


def test_impossible_figures_are_flagged_but_the_verdict_stays_pass(task: Task) -> None:
    score = score_evaluation(task, ev(configs=[cfg("small", speedup=12), cfg("half", peak=1.3), cfg("tail")]))
    assert score.verdict == "pass"
    assert any(f.startswith("speedup>10x: small") for f in score.flags)
    assert any(f.startswith("peak_fraction>1: half") for f in score.flags)


def test_interpreter_timings_raise_no_physics_flag(task: Task) -> None:
    score = score_evaluation(task, ev(configs=[cfg("small", speedup=40), cfg("half")], comparable=False))
    assert score.verdict == "pass" and score.flags == []


def test_no_submission_scores_no_submission(task: Task) -> None:
    score, evaluation = score_session(task, None, "cpu")
    assert score.verdict == "no_submission" and evaluation is None


def submission_with(task: Task, kernel: Path, dest: Path) -> Path:
    dest.mkdir()
    shutil.copyfile(kernel, dest / task.spec.candidate)
    return dest


def test_a_planted_wrong_kernel_scores_incorrect(task: Task, tmp_path: Path) -> None:
    sub = submission_with(task, HERE / "planted" / "vadd_wrong.py", tmp_path / "wrong")
    score, evaluation = score_session(task, sub, "cpu")
    assert score.verdict == "incorrect" and score.correct is False
    assert evaluation is not None and {c.config for c in evaluation.configs} == {"small", "half", "tail", "big"}


def test_a_submission_that_is_the_baseline_byte_for_byte_is_flagged_no_op(task: Task, tmp_path: Path) -> None:
    sub = submission_with(task, task.file("baseline.py"), tmp_path / "same")
    score, _ = score_session(task, sub, "cpu")
    assert score.verdict == "pass" and any(f.startswith("no_op") for f in score.flags)


def test_a_frozen_submission_that_changed_after_submit_is_flagged(task: Task, tmp_path: Path) -> None:
    sub = submission_with(task, task.file("solution.py"), tmp_path / "changed")
    score, _ = score_session(task, sub, "cpu", expected_hash="0" * 64)
    assert any(f.startswith("hash_mismatch") for f in score.flags)


def test_a_submission_tripping_a_tripwire_carries_the_flag_with_its_line_and_reason(task: Task, tmp_path: Path) -> None:
    sub = submission_with(task, HERE / "planted" / "vadd_identity_cache.py", tmp_path / "cached")
    score, _ = score_session(task, sub, "cpu")
    trips = [f for f in score.flags if f.startswith("tripwire:")]
    assert trips and all(f.startswith("tripwire:identity_cache kernel.py:") for f in trips), score.flags
    assert "input identity" in trips[0]
    # ...and the runtime defences catch what the tripwire only pointed at: the answer kept for the address is
    # wrong on the next call's fresh contents
    assert score.verdict != "pass", score.message
    assert any(f.startswith(("runtime:stale_results", "runtime:timed_recheck")) for f in score.flags) or \
        score.verdict == "incorrect", (score.verdict, score.flags)


def test_a_clean_expert_solution_carries_no_flag(task: Task, tmp_path: Path) -> None:
    sub = submission_with(task, task.file("solution.py"), tmp_path / "expert")
    score, _ = score_session(task, sub, "cpu")
    assert score.verdict == "pass" and score.flags == [], score.flags


def test_a_runtime_finding_makes_the_verdict_flagged_with_its_evidence(task: Task) -> None:
    from crucible.toolkit.results import IntegrityFinding

    seen = IntegrityFinding(defence="precision", config="big", evidence="relative L2 error 3e-03 (3000x)")
    audit = IntegrityFinding(defence="nondeterminism", config="small", evidence="differ in 3 of 1000 elements")
    flagged = score_evaluation(task, ev(configs=[cfg("small"), cfg("half"), cfg("tail"),
                                                 cfg("big").model_copy(update={"integrity": [seen]})]))
    assert flagged.verdict == "flagged" and flagged.speedup is None
    assert "runtime:precision big: relative L2 error" in flagged.flags[0] and "precision" in flagged.message
    only_audit = score_evaluation(task, ev(configs=[cfg("small").model_copy(update={"integrity": [audit]}),
                                                    cfg("half"), cfg("tail"), cfg("big")]))
    assert only_audit.verdict == "pass" and only_audit.flags == [audit.flag()]


def test_a_pass_carries_the_geometric_mean_sol_fraction_of_its_configs(task: Task) -> None:
    score = score_evaluation(task, ev(configs=[cfg("small", peak=0.25), cfg("half", peak=1.0),
                                               cfg("tail", peak=None), cfg("big", peak=0.25)]))
    assert score.verdict == "pass" and score.sol_fraction == pytest.approx(0.25 ** (2 / 3))


def test_the_physics_check_reads_the_reported_time_and_sol_the_time_the_speedup_uses(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from crucible.toolkit.evaluation import with_peak_fraction
    from crucible.toolkit.results import DeviceInfo

    monkeypatch.setenv("CRUCIBLE_CACHE", str(tmp_path))
    task = find_task("cuda2cuda/reduce_sum")
    name = task.configs("visible")[0].name
    # Reported 100 us, raised to the judge's 200 us bound; at the limit the call takes 150 us.
    timed = TimingStats(median_us=100, min_us=99, max_us=101, iqr_us=1, rse=0.01, reps=10, method="gated_events",
                        comparable=True, scored_us=200)
    h200 = DeviceInfo(backend="cuda", name="NVIDIA H200", torch="x")
    result = with_peak_fraction(ConfigResult(config=name, status="pass", bytes=150e-6 * 4.8e12, candidate=timed),
                                h200, task)
    assert result.sol_fraction == pytest.approx(0.75)  # 150 / 200: no SOL from a time under the bound
    flags = physics_flags(Evaluation(task=task.id, snapshot="s", backend="cuda", status="ok", message="",
                                     timing_comparable=True, configs=[result]))
    assert any(f.startswith(f"peak_fraction>1: {name} 1.5") for f in flags)  # 150 / 100, as reported
