"""The reward service: the verdicts final scoring gives, for batches; backpressure, per-request time
limits, cancellation, and nothing of one request left for the next."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from crucible.harness.models import Placement, Score
from crucible.harness.placement import Placed
from crucible.harness.rewards import Busy, RewardRequest, RewardService
from crucible.harness.scoring import score_session
from crucible.toolkit.task import find_task

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures" / "tasks"
TASK = "triton2triton/vadd"


@pytest.fixture(autouse=True)
def fixture_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRUCIBLE_TASKS", str(FIXTURES))


class HeldScorer:
    """A Scorer that holds each evaluation until released, and records what it was given."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.seen: list[dict] = []
        self.closed = False

    def score(self, task, submission, backend, *, expected_hash=None, timeout_s=None, cancel=None) -> Placed:  # type: ignore[no-untyped-def]
        files = {p.name: p.read_text() for p in submission.iterdir()}
        self.seen.append({"folder": submission, "files": files, "timeout_s": timeout_s, "cancel": cancel})
        self.started.release()
        while not self.release.wait(0.02):
            if cancel is not None and cancel.is_set():
                return Placed(score=Score(verdict="infra_error", message="cancelled"), evaluation=None,
                              placement=Placement())
        return Placed(score=Score(verdict="pass", message=files["kernel.py"]), evaluation=None,
                      placement=Placement(gpu=0, gpu_name="declared"))

    def close(self) -> None:
        self.closed = True


def test_a_full_service_refuses_more_until_some_finish_and_a_blocking_submit_waits() -> None:
    scorer = HeldScorer()
    service = RewardService(scorer, "cpu", workers=1, max_pending=2)
    first = service.submit(RewardRequest(task=TASK, source="one"))
    second = service.submit(RewardRequest(task=TASK, source="two"))
    with pytest.raises(Busy, match="2 requests are in flight"):
        service.submit(RewardRequest(task=TASK, source="three"))
    assert service.pending() == 2
    waiting = threading.Thread(target=lambda: service.submit(RewardRequest(task=TASK, source="four"), block=True))
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive(), "a blocking submit waits for room"
    scorer.release.set()
    assert first.result(10).score.message == "one" and second.result(10).score.message == "two"
    waiting.join(10)
    assert not waiting.is_alive()
    service.close()
    assert scorer.closed


def test_a_batch_comes_back_in_the_order_asked_with_each_requests_own_source_and_limit() -> None:
    scorer = HeldScorer()
    scorer.release.set()
    with RewardService(scorer, "cpu", workers=3, max_pending=2) as service:  # a batch larger than the room
        rewards = service.score([RewardRequest(task=TASK, source=f"src {i}", timeout_s=5 + i) for i in range(5)])
    assert [r.score.message for r in rewards] == [f"src {i}" for i in range(5)]
    assert sorted(s["timeout_s"] for s in scorer.seen) == [5, 6, 7, 8, 9]
    assert all(r.placement.gpu_name == "declared" and r.task == TASK for r in rewards)


def test_nothing_of_a_request_is_left_for_the_next() -> None:
    scorer = HeldScorer()
    scorer.release.set()
    with RewardService(scorer, "cpu", workers=1) as service:
        service.score([RewardRequest(task=TASK, source="a", files={"helper.py": "secret = 1"}),
                       RewardRequest(task=TASK, source="b")])
    first, second = scorer.seen
    assert first["folder"] != second["folder"]
    assert not first["folder"].exists() and not second["folder"].exists(), "each request's folder is removed"
    assert second["files"] == {"kernel.py": "b"}, "the first request's files are not in the second's folder"
    assert first["cancel"] is not second["cancel"]


def test_cancel_stops_a_request_in_flight_and_one_still_waiting() -> None:
    scorer = HeldScorer()
    with RewardService(scorer, "cpu", workers=1) as service:
        running = service.submit(RewardRequest(task=TASK, source="x", id="run"))
        queued = service.submit(RewardRequest(task=TASK, source="y", id="queued"))
        assert scorer.started.acquire(timeout=5)
        assert service.cancel("queued") and service.cancel("run")
        assert not service.cancel("unknown")
        assert running.result(10).score.verdict == "infra_error"
        assert queued.result(10).score.message == "cancelled before it started"
        assert len(scorer.seen) == 1, "a request cancelled while it waited is never evaluated"
        assert service.pending() == 0


def test_bad_requests_are_refused_at_submit() -> None:
    with RewardService(HeldScorer(), "cpu", workers=1) as service:
        with pytest.raises(ValueError, match="no-such/task"):
            service.submit(RewardRequest(task="no-such/task", source=""))
        with pytest.raises(ValueError, match="timeout_s"):
            RewardRequest(task=TASK, source="", timeout_s=0)
        held = service.submit(RewardRequest(task=TASK, source="", id="same"))
        with pytest.raises(ValueError, match="already in flight"):
            service.submit(RewardRequest(task=TASK, source="", id="same"))
        service.cancel("same")
        held.result(10)


def test_a_file_that_escapes_the_submission_folder_fails_its_request() -> None:
    scorer = HeldScorer()
    scorer.release.set()
    with RewardService(scorer, "cpu", workers=1) as service:
        future = service.submit(RewardRequest(task=TASK, source="x", files={"../../escape.py": "x"}))
        with pytest.raises(ValueError, match="escapes"):
            future.result(10)
    assert not scorer.seen


# ---------------------------------------------------------------- real verdicts (the judge on the CPU)


@pytest.mark.slow  # five evaluations in the Triton interpreter on 2 cores
def test_the_service_gives_final_scorings_verdicts_and_keeps_each_requests_time_limit(tmp_path: Path) -> None:
    task = find_task(TASK)
    sources = {"solution": task.file("solution.py").read_text(),
               "wrong": (HERE / "planted" / "vadd_wrong.py").read_text(),
               "syntax": (HERE / "planted" / "vadd_syntax.py").read_text()}
    with RewardService.local() as service:
        rewards = service.score([RewardRequest(task=TASK, source=s, id=name) for name, s in sources.items()]
                                + [RewardRequest(task=TASK, source=(HERE / "planted" / "vadd_hang.py").read_text(),
                                                 timeout_s=5, id="hang")])
    got = {r.id: r.score for r in rewards}
    assert got["solution"].verdict == "pass" and got["wrong"].verdict == "incorrect"
    assert got["syntax"].verdict == "compile_error" and got["hang"].verdict == "timeout"
    sub = tmp_path / "wrong"
    sub.mkdir()
    (sub / task.spec.candidate).write_text(sources["wrong"])
    final, _ = score_session(task, sub, "cpu")
    keys = ("verdict", "correct", "generalizes", "compiled", "hidden_checked", "submission_hash")
    assert {k: getattr(got["wrong"], k) for k in keys} == {k: getattr(final, k) for k in keys}


@pytest.mark.slow  # a local Ray cluster and two evaluations
def test_the_service_on_a_ray_cluster_scores_a_batch_on_its_evaluators(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray", reason="pip install 'kernel-crucible[ray]' (scripts/setup.sh does)")
    monkeypatch.setenv("CRUCIBLE_BACKEND", "cpu")
    task = find_task(TASK)
    solution = task.file("solution.py").read_text()
    with RewardService.on_ray("local:2") as service:
        rewards = service.score([{"task": TASK, "source": solution}, {"task": TASK, "source": solution}])
    assert [r.score.verdict for r in rewards] == ["pass", "pass"]
    assert all(r.placement.host and r.placement.gpu in (0, 1) for r in rewards)


@pytest.mark.slow  # four evaluations in the Triton interpreter
def test_reward_hacks_meet_the_same_defences_and_a_results_store_left_by_one_request_helps_no_later_one() -> None:
    cheats = HERE / "redteam"
    batch = [RewardRequest(task=TASK, source=(cheats / path).read_text(), id=name) for name, path in (
        ("timer", "tampering/triton_timer_patch.py"), ("in_place", "answers/triton_mutates_input.py"),
        ("store_1", "state/triton_leftover_files.py"), ("store_2", "state/triton_leftover_files.py"))]
    with RewardService.local() as service:
        got = {r.id: r.score for r in service.score(batch[:2] + batch[2:3])}
        got.update({r.id: r.score for r in service.score(batch[3:])})  # after the first store was written
    assert got["timer"].verdict == "flagged" and any(f.startswith("runtime:timing_bound") for f in got["timer"].flags)
    assert got["in_place"].verdict == "flagged" and any("input_mutation" in f for f in got["in_place"].flags)
    assert got["store_1"].verdict == got["store_2"].verdict == "incorrect", (got["store_1"], got["store_2"])
