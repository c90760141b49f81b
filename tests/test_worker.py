"""The evaluation worker turns every way a candidate can misbehave into a clear verdict, and survives it."""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from worker_jobs import wait_gone

from crucible.toolkit.jobs import JOBS
from crucible.toolkit.sandbox import probe
from crucible.toolkit.worker import STARTUP_LIMIT_S, WorkerLimits, WorkerOutcome, run_job

REPO = Path(__file__).resolve().parents[1]
FAST = WorkerLimits(timeout_s=20, memory_mb=4096)
TEST_JOBS = ["echo", "progress_then_result", "segfault", "abort", "spin", "fork_sleeper_and_hang",
             "fork_sleeper_and_return", "allocate_64_gib", "sys_exit_0", "os_exit_0",
             "atexit_forger_then_sys_exit", "raise_value_error", "print_fake_results", "huge_result", "connect",
             "write_outside_scratch", "sleep_after_progress", "cuda_illegal_address", "cuda_bad_index",
             "cuda_echo", "result_then_hang"]


@pytest.fixture(autouse=True)
def test_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TEST_JOBS:
        monkeypatch.setitem(JOBS, name, f"tests.worker_jobs:{name}")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path / "scratch"


def run(kind: str, scratch: Path, payload: dict[str, Any] | None = None, *,
        limits: WorkerLimits = FAST, **kwargs: Any) -> WorkerOutcome:
    return run_job(kind, payload or {}, limits=limits, backend=kwargs.pop("backend", "cpu"), scratch=scratch,
                   env={"PYTHONPATH": str(REPO)}, **kwargs)


def assert_next_run_works(scratch: Path, **kwargs: Any) -> None:
    outcome = run(kwargs.pop("kind", "echo"), scratch, {"again": True}, **kwargs)
    assert outcome.status == "ok", outcome


def test_a_job_returns_its_result_in_scratch_with_a_clean_environment(scratch: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    outcome = run("echo", scratch, {"x": [1, 2]})
    assert outcome.status == "ok", outcome
    assert outcome.result is not None
    assert outcome.result["echo"] == {"x": [1, 2]}
    assert outcome.result["cwd"] == str(scratch.resolve())
    env = outcome.result["env"]
    assert "ANTHROPIC_API_KEY" not in env
    assert env["HOME"] == str(scratch.resolve())
    assert env["TRITON_INTERPRET"] == "1"
    assert outcome.exit_code == 0 and outcome.signal is None
    assert {"process_group", "network", "memory", "pids", "filesystem"} <= outcome.isolation.keys()


def test_progress_messages_reach_the_caller_in_order(scratch: Path) -> None:
    seen: list[dict[str, Any]] = []
    outcome = run("progress_then_result", scratch, {"steps": 5}, on_progress=seen.append)
    assert outcome.status == "ok", outcome
    assert seen == [{"step": i} for i in range(5)]


def test_a_segfault_is_a_crash_named_sigsegv_and_the_next_run_works(scratch: Path) -> None:
    outcome = run("segfault", scratch)
    assert outcome.status == "crash", outcome
    assert outcome.signal == "SIGSEGV"
    assert "SIGSEGV" in outcome.message
    assert "segfault" in outcome.stderr_tail  # faulthandler's traceback names the job's frame
    assert_next_run_works(scratch)


def test_an_abort_is_a_crash_named_sigabrt_even_in_a_pid_namespace(scratch: Path) -> None:
    outcome = run("abort", scratch)
    assert outcome.status == "crash", outcome
    assert outcome.signal == "SIGABRT"
    assert_next_run_works(scratch)


def test_an_infinite_loop_times_out_and_the_next_run_works(scratch: Path) -> None:
    started = time.monotonic()
    outcome = run("spin", scratch, limits=WorkerLimits(timeout_s=2))
    assert outcome.status == "timeout", outcome
    # the limit counts from the job's start, not the worker's (a loaded CI machine's imports took over 4 s)
    assert 2 <= outcome.seconds <= time.monotonic() - started < 2 + STARTUP_LIMIT_S
    assert "2 s" in outcome.message
    # where it hung: the worker's stack at the limit, down to the job's own loop
    assert "most recent call first" in outcome.stderr_tail, outcome.stderr_tail
    assert re.search(r'worker_jobs\.py", line \d+ in spin', outcome.stderr_tail)
    assert_next_run_works(scratch)


def test_a_worker_that_does_not_start_its_job_in_time_is_an_infrastructure_failure(
        scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        patch.setattr("crucible.toolkit.worker.STARTUP_LIMIT_S", 0.01)  # no interpreter starts that fast
        outcome = run("echo", scratch)
    assert outcome.status == "infra", outcome
    assert "did not start its job within 0.01 s" in outcome.message
    assert outcome.result is None
    assert_next_run_works(scratch)


@pytest.mark.skipif(not (probe().pidns or probe().cgroup_pids),
                    reason="without a pid namespace or a pids cgroup a setsid() escapee survives a timeout")
def test_a_forked_grandchild_that_escapes_the_process_group_is_killed_on_timeout(scratch: Path) -> None:
    marker = f"crucible-test-{uuid.uuid4().hex}"
    outcome = run("fork_sleeper_and_hang", scratch, {"marker": marker}, limits=WorkerLimits(timeout_s=1.5))
    assert outcome.status == "timeout", outcome
    assert wait_gone(marker) == []
    assert_next_run_works(scratch)


def test_grandchildren_left_behind_after_a_result_are_killed_and_do_not_delay_the_verdict(scratch: Path) -> None:
    marker = f"crucible-test-{uuid.uuid4().hex}"
    outcome = run("fork_sleeper_and_return", scratch, {"marker": marker})
    assert outcome.status == "ok", outcome
    assert outcome.seconds < 5
    assert wait_gone(marker) == []


def test_a_sent_result_stands_when_the_worker_then_hangs_instead_of_exiting(scratch: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("crucible.toolkit.worker.FINAL_GRACE_S", 1.0)
    outcome = run("result_then_hang", scratch, limits=WorkerLimits(timeout_s=15, memory_mb=4096))
    assert outcome.status == "ok", outcome
    assert outcome.result == {"decided": True}
    assert outcome.seconds < 10
    assert_next_run_works(scratch)


def test_allocating_64_gib_under_a_small_memory_limit_is_oom(scratch: Path) -> None:
    outcome = run("allocate_64_gib", scratch, limits=WorkerLimits(timeout_s=20, memory_mb=2048))
    assert outcome.status == "oom", outcome
    assert "2048 MiB" in outcome.message
    assert_next_run_works(scratch)


def test_sys_exit_0_in_the_job_is_an_early_exit_not_a_success(scratch: Path) -> None:
    outcome = run("sys_exit_0", scratch)
    assert outcome.status == "exit", outcome
    assert outcome.result is None
    assert "sys.exit(0)" in outcome.message and "failure" in outcome.message
    assert_next_run_works(scratch)


def test_os_exit_0_with_a_forged_result_on_stdout_is_an_early_exit(scratch: Path) -> None:
    outcome = run("os_exit_0", scratch)
    assert outcome.status == "exit", outcome
    assert outcome.exit_code == 0
    assert outcome.result is None
    assert "forged" in outcome.stderr_tail
    assert_next_run_works(scratch)


def test_an_atexit_handler_cannot_forge_a_result(scratch: Path) -> None:
    outcome = run("atexit_forger_then_sys_exit", scratch)
    assert outcome.status == "exit", outcome
    assert outcome.result is None


def test_a_raised_exception_is_an_error_with_its_traceback(scratch: Path) -> None:
    outcome = run("raise_value_error", scratch)
    assert outcome.status == "error", outcome
    assert "ValueError: the candidate's output has the wrong shape" in outcome.message
    assert "raise_value_error" in outcome.message  # the traceback tail
    assert_next_run_works(scratch)


def test_fake_results_printed_to_stdout_and_stderr_stay_in_the_log_tail(scratch: Path) -> None:
    outcome = run("print_fake_results", scratch)
    assert outcome.status == "ok", outcome
    assert outcome.result == {"real": True}
    assert outcome.stderr_tail.count('"forged":true') == 3
    assert "garbage" in outcome.stderr_tail


def test_a_5_mb_result_arrives_whole(scratch: Path) -> None:
    outcome = run("huge_result", scratch, {"size": 5_000_000})
    assert outcome.status == "ok", outcome
    assert outcome.result is not None and len(outcome.result["data"]) == 5_000_000


@pytest.fixture
def listener() -> Any:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.mark.skipif(not probe().netns, reason="no network namespace on this machine")
def test_the_candidate_cannot_reach_a_local_listener_without_network(scratch: Path, listener: int) -> None:
    outcome = run("connect", scratch, {"port": listener})
    assert outcome.status == "ok", outcome
    assert outcome.result is not None and outcome.result["connected"] is False
    assert outcome.isolation["network"].startswith("netns")
    allowed = run("connect", scratch, {"port": listener}, limits=FAST.model_copy(update={"network": True}))
    assert allowed.result is not None and allowed.result["connected"] is True  # the listener was reachable


@pytest.mark.skipif(probe().landlock_abi < 1, reason="no Landlock on this kernel")
def test_the_candidate_cannot_write_outside_scratch(scratch: Path, tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    outcome = run("write_outside_scratch", scratch, {"path": str(target)})
    assert outcome.status == "ok", outcome
    assert outcome.result is not None and outcome.result["written"] is False
    assert not target.exists()
    inside = run("write_outside_scratch", scratch, {"path": str(scratch / "inside.txt")})
    assert inside.result == {"written": True}


def test_cancelling_mid_run_kills_the_worker_and_the_next_run_works(scratch: Path) -> None:
    cancel = threading.Event()
    started = time.monotonic()
    outcome = run("sleep_after_progress", scratch, on_progress=lambda _: cancel.set(), cancel=cancel)
    assert outcome.status == "cancelled", outcome
    assert time.monotonic() - started < 10
    assert_next_run_works(scratch)


def test_an_unknown_job_kind_is_a_caller_bug(scratch: Path) -> None:
    with pytest.raises(ValueError, match="unknown job kind"):
        run("no-such-job", scratch)


def test_a_job_missing_from_its_module_is_an_infra_failure(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(JOBS, "missing", "tests.worker_jobs:no_such_function")
    outcome = run("missing", scratch)
    assert outcome.status == "infra", outcome
    assert "no_such_function" in outcome.message


def test_a_worker_that_cannot_start_is_an_infra_failure(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(sys, "executable", "/nonexistent/python3")
        outcome = run("echo", scratch)
    assert outcome.status == "infra", outcome
    assert "could not be started" in outcome.message
    assert_next_run_works(scratch)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["cuda_illegal_address", "cuda_bad_index"])
def test_an_illegal_memory_access_on_the_gpu_is_a_clear_verdict_and_the_next_run_works(
        scratch: Path, kind: str) -> None:
    outcome = run(kind, scratch, backend="cuda", gpu=0, limits=WorkerLimits(timeout_s=120))
    assert outcome.status in ("crash", "error"), outcome
    text = (outcome.message + outcome.stderr_tail).lower()
    assert "illegal memory access" in text or "device-side assert" in text or outcome.signal, outcome
    assert_next_run_works(scratch, kind="cuda_echo", backend="cuda", gpu=0, limits=WorkerLimits(timeout_s=120))


@pytest.mark.gpu
def test_a_host_memory_hog_on_the_cuda_backend_is_oom_and_the_next_run_works(scratch: Path) -> None:
    outcome = run("allocate_64_gib", scratch, backend="cuda", gpu=0, limits=WorkerLimits(timeout_s=120, memory_mb=2048))
    assert outcome.status == "oom", outcome
    assert_next_run_works(scratch, kind="cuda_echo", backend="cuda", gpu=0, limits=WorkerLimits(timeout_s=120))


@pytest.mark.skipif(probe().landlock_abi < 1, reason="no Landlock on this kernel")
def test_a_job_whose_candidate_runs_in_a_child_hands_the_restriction_to_that_child(
        scratch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The ncu job: ncu runs the candidate in a grandchild, where CUDA needs its own /proc/<pid>/task writable.
    monkeypatch.setitem(JOBS, "ncu", "tests.worker_jobs:landlock_in_child")
    target = tmp_path / "outside.txt"
    outcome = run("ncu", scratch, {"path": str(target)})
    assert outcome.status == "ok", outcome
    assert outcome.result is not None and str(scratch.resolve()) in outcome.result["handed_over"]
    assert json.loads(outcome.result["child"]) == {"outside": False, "own_task": True}, outcome.result
    assert not target.exists()
    assert "in the process that runs the candidate" in outcome.isolation["filesystem"]


@pytest.mark.parametrize(("said", "where"), [
    ("OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of 139.80 GiB",
     "GPU memory"),
    ("MemoryError: ", "host memory (limit 512 MiB)"),
])
def test_an_out_of_memory_verdict_names_the_memory_that_ran_out(said: str, where: str) -> None:
    from crucible.toolkit.worker import _verdict

    status, _, message, _, _ = _verdict(None, {"oom": {"message": said}}, 6, WorkerLimits(memory_mb=512), False, 60)
    assert status == "oom" and f"ran out of {where}" in message and said in message
