"""The judge's pieces, called in-process: inputs it makes, what-ran and timing-bound findings, and its end of
the runner protocol against runners that misbehave. Whole evaluations are in test_evaluation.py and the
red team (test_redteam.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from crucible.toolkit.judge import timing
from crucible.toolkit.judge.cases import Case, Fresh, Layout
from crucible.toolkit.judge.evaluate import Evaluation
from crucible.toolkit.judge.link import CandidateFailed, ProtocolViolation, RunnerEnded, RunnerLink
from crucible.toolkit.judge.timing import bound_findings as _bound_findings
from crucible.toolkit.judge.what_ran import what_ran_findings
from crucible.toolkit.protocol import Called, KernelClaim, Profiled
from crucible.toolkit.results import TimingStats
from crucible.toolkit.runner.loading import import_file
from crucible.toolkit.shared_memory import Arena
from crucible.toolkit.task import load_task
from crucible.toolkit.worker import WorkerLimits

FIXTURE = Path(__file__).parent / "fixtures/tasks/triton2triton/vadd"
CPU = torch.device("cpu")


def _vadd():
    task = load_task(FIXTURE)
    return task, import_file(FIXTURE / "reference.py", "vadd_reference_for_judge_tests")


def test_inputs_get_a_random_offset_and_scale_per_seed() -> None:
    task, ref = _vadd()
    config = task.config("small")
    raw = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(0), CPU)["x"]
    a, again, b = (Case(task, ref, config, s, CPU).inputs[0] for s in (0, 0, 1))
    assert torch.equal(a, again), "the same seed gives the same inputs"
    assert not torch.allclose(a, raw), "the raw inputs were perturbed"
    scale = float((a - a.mean()).std() / (raw - raw.mean()).std())
    assert 0.45 < scale < 2.1 and abs(scale - 1) > 1e-3
    assert not torch.allclose(a, b)


def test_inputs_marked_not_to_perturb_stay_as_made(tiny_task_dir: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('{ name = "x" }', '{ name = "x", perturb = false }'))
    task = load_task(tiny_task_dir)
    ref = import_file(tiny_task_dir / "reference.py", "vadd_reference_for_judge_tests2")
    config = task.config("small")
    raw = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(3), CPU)
    case = Case(task, ref, config, 3, CPU)
    assert torch.equal(case.inputs[0], raw["x"])
    assert not torch.equal(case.inputs[1], raw["y"])


def test_every_timed_call_gets_inputs_no_call_saw_before_and_the_judge_can_make_them_again() -> None:
    task, ref = _vadd()
    fresh = Fresh(task, ref, task.config("small"), CPU)
    calls = [fresh.draw() for _ in range(50)]
    made = [fresh.inputs(c)[0] for c in calls]
    assert len({tuple(m[:4].tolist()) for m in made}) == 50, "fifty calls, fifty different contents"
    assert torch.equal(fresh.inputs(calls[7])[0], made[7]), "a sampled call's inputs can be made again"


def test_the_arena_layout_aligns_every_tensor_and_holds_the_outputs_shape_and_dtype() -> None:
    task, ref = _vadd()
    config = task.config("half")
    layout = Layout(task, config, Case(task, ref, config, 0, CPU).inputs)
    assert [t.offset % 256 for t in layout.tensors] == [0, 0, 0]
    out = layout.tensors[-1]
    assert (out.role, out.dtype, out.shape) == ("output", "float16", [4099])
    assert layout.nbytes >= sum(4099 * 2 for _ in range(3))


def test_an_arena_of_several_sets_holds_disjoint_copies_of_the_layout_for_a_window_of_calls() -> None:
    task, ref = _vadd()
    config = task.config("half")
    one = Layout(task, config, Case(task, ref, config, 0, CPU).inputs)
    three = Layout(task, config, Case(task, ref, config, 0, CPU).inputs, sets=3)
    assert (three.sets, three.set_bytes, three.nbytes) == (3, one.nbytes, 3 * one.nbytes)
    arena = Arena.create(three.nbytes, CPU)
    try:
        sets = [three.views(arena, s) for s in range(3)]
        for s, (ins, outs) in enumerate(sets):
            for t in ins + outs:
                t.fill_(s + 1)
        assert all(bool((t == s + 1).all()) for s, (ins, outs) in enumerate(sets) for t in ins + outs)
    finally:
        arena.close()
    with pytest.raises(ValueError, match="needs as many input sets"):
        timing.Subject("candidate", None, None, [], [], "candidate", per_go=2)  # type: ignore[arg-type]


def test_a_cpu_arena_cannot_be_resized_by_the_runner_that_holds_its_fd() -> None:
    # Shrinking the memfd under the judge's mapping would make the judge's next read a SIGBUS.
    import os

    arena = Arena.create(4096, CPU)
    theirs = os.dup(arena.fd)  # what the runner holds
    try:
        for size in (0, 8192):
            with pytest.raises(PermissionError):
                os.ftruncate(theirs, size)
        assert os.fstat(theirs).st_size == 4096
    finally:
        os.close(theirs)
        arena.close()


def test_the_judges_measure_of_a_window_is_shared_by_its_calls() -> None:
    """A window of 4 calls: the handshake (chain) is paid once, so each call's judged time is the window's
    less the chain, over 4, less the empty region (as each reported time is)."""
    subject = timing.Subject("candidate", None, None, [], [], "candidate",  # type: ignore[arg-type]
                             sets=[([], [])] * 4, per_go=4)
    subject.bound.judged_us = [300.0 + 4 * 11.0] * 5
    subject.bound.reported_us = [11.0] * 20
    fake = type("E", (), {"device": CPU})()
    stats = Evaluation._stats(fake, subject, chain=300.0, empty=1.0)  # type: ignore[arg-type]
    assert stats.judged_us == pytest.approx(10.0) and stats.median_us == pytest.approx(10.0)
    assert stats.overhead_us == pytest.approx(301.0)


def claims(*kernels: tuple[str, float], launches: float | None = None, ops: tuple[str, ...] = ()) -> Profiled:
    return Profiled(kernels=[KernelClaim(name=n, us=us, calls=1) for n, us in kernels],
                    interpreter_launches=launches, ops=list(ops))


def defences(found: list) -> set[str]:
    return {f.defence for f in found}


def test_a_dummy_kernel_beside_library_work_is_caught_by_its_share_of_the_time() -> None:
    prof = claims(("my_dummy_kernel", 2.0), ("at::native::softmax_warp_forward", 40.0))
    found = what_ran_findings(prof, [], 0.10, "triton", True, 1000, "c")
    assert defences(found) == {"library_time"} and "95%" in found[0].evidence


def test_own_kernels_beside_a_small_library_copy_are_fine() -> None:
    prof = claims(("rmsnorm_kernel", 95.0), ("Memcpy DtoD", 5.0))
    assert what_ran_findings(prof, [], 0.10, "cuda", True, 1000, "c") == []


def test_a_call_whose_every_kernel_is_a_librarys_has_no_kernel_of_its_own() -> None:
    prof = claims(("sm90_xmma_gemm_bf16", 80.0), ("at::native::vectorized_elementwise_kernel", 5.0))
    assert defences(what_ran_findings(prof, [], 0.10, "cuda", True, 1000, "c")) == {"no_own_kernel"}


def test_in_the_interpreter_pytorch_computing_the_whole_problem_is_caught_and_bookkeeping_is_not() -> None:
    whole = Profiled(kernels=[KernelClaim(name="aten::softmax", us=50, calls=1, elements=4096),
                              KernelClaim(name="aten::empty", us=1, calls=1, elements=4096)],
                     interpreter_launches=1)
    assert defences(what_ran_findings(whole, [], 0.10, "triton", False, 4096, "c")) == {"library_time"}
    honest = Profiled(kernels=[KernelClaim(name="aten::empty_like", us=1, calls=1, elements=4096),
                               KernelClaim(name="aten::sum", us=1, calls=1, elements=16)], interpreter_launches=2)
    assert what_ran_findings(honest, [], 0.10, "triton", False, 4096, "c") == []


def test_in_the_interpreter_a_call_that_launched_no_triton_kernel_is_caught() -> None:
    assert defences(what_ran_findings(claims(launches=0), [], 0.1, "triton", False, 10, "c")) == {"no_own_kernel"}


def test_forbidden_ops_are_named_with_what_the_task_forbids() -> None:
    found = what_ran_findings(claims(("k", 1.0), ops=("aten::mm",)), ["aten::mm"], 0.1, "cuda", True, 10, "c")
    assert defences(found) == {"forbidden_op"} and "aten::mm" in found[0].evidence


def stats(median: float, judged: float) -> TimingStats:
    return TimingStats(median_us=median, min_us=median, max_us=median, iqr_us=0, rse=0, reps=10,
                       method="gated_events", comparable=True, judged_us=judged, overhead_us=290)


@pytest.mark.parametrize(("reported", "judged", "flagged"), [
    (100.0, 101.0, False), (8.4, 6.8, False), (50.0, 100.0, True), (0.0, 40.0, True), (3.0, 5.0, False)])
def test_a_reported_time_far_under_the_judges_own_clock_is_caught(reported: float, judged: float,
                                                                    flagged: bool) -> None:
    found = _bound_findings(stats(reported, judged), "c", on_gpu=True)
    assert bool(found) == flagged
    if flagged:
        assert found[0].defence == "timing_bound" and f"{judged:.1f}" in found[0].evidence


# ------------------------------------------------------------------ the protocol, against fake runners

FAKE = r'''
import json, os, socket, sys, time
sock = socket.socket(fileno=int(sys.argv[1]))
mode = sys.argv[2]
sock.recv(1 << 20)  # hello
sock.send(json.dumps({"reply": "ready", "isolation": {}}).encode())
sock.recv(1 << 20)  # the request
if mode == "forged":
    sock.send(json.dumps({"reply": "called", "seq": 999, "us": 0.001}).encode())
elif mode == "unasked":
    sock.send(json.dumps({"reply": "timed", "first_seq": 1, "us": [0.0]}).encode())
elif mode == "garbage":
    sock.send(b"{not json")
elif mode == "huge":
    sock.send(json.dumps({"reply": "failed", "error": "x" * (140 << 10)}).encode())
elif mode == "failed":
    sock.send(json.dumps({"reply": "failed", "error": "RuntimeError: boom"}).encode())
elif mode == "crash":
    os.abort()
elif mode == "exit":
    os._exit(0)
elif mode == "hang":
    time.sleep(60)
'''


def fake_runner(tmp_path: Path, mode: str, deadline_s: float = 20) -> RunnerLink:
    import time

    script = tmp_path / "fake_runner.py"
    script.write_text(FAKE)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, str(script), str(theirs.fileno()), mode], pass_fds=(theirs.fileno(),),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    theirs.close()
    link = RunnerLink("candidate", proc, ours, tmp_path, None, time.monotonic() + deadline_s,
                      WorkerLimits(timeout_s=deadline_s))
    link.send(__import__("crucible.toolkit.protocol", fromlist=["Hello"]).Hello(
        device="cpu", readable=[], writable=[], rlimits={}))
    link.pending_ready = True
    return link


def ask_call(link: RunnerLink) -> Called:
    from crucible.toolkit.protocol import Call

    try:
        return link.ask(Call(kernel="candidate", seq=1, params={}), Called)
    finally:
        link.close()


@pytest.mark.parametrize("mode", ["unasked", "garbage", "huge"])
def test_a_reply_the_judge_did_not_ask_for_is_a_protocol_violation(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ProtocolViolation):
        ask_call(fake_runner(tmp_path, mode))


def test_a_forged_reply_with_another_sequence_number_is_only_a_claim(tmp_path: Path) -> None:
    # The link parses it; the judge's caller compares the sequence number (test_evaluation covers the end).
    assert ask_call(fake_runner(tmp_path, "forged")).seq == 999


def test_a_candidate_error_comes_back_as_its_own_text(tmp_path: Path) -> None:
    with pytest.raises(CandidateFailed, match="boom"):
        ask_call(fake_runner(tmp_path, "failed"))


@pytest.mark.parametrize(("mode", "status"), [("crash", "crash"), ("exit", "exit")])
def test_a_runner_that_dies_ends_with_what_killed_it(tmp_path: Path, mode: str, status: str) -> None:
    with pytest.raises(RunnerEnded) as info:
        ask_call(fake_runner(tmp_path, mode))
    assert info.value.status == status


def test_a_runner_past_its_deadline_is_killed_as_a_timeout(tmp_path: Path) -> None:
    with pytest.raises(RunnerEnded) as info:
        ask_call(fake_runner(tmp_path, "hang", deadline_s=1.5))
    assert info.value.status == "timeout"


def test_in_the_interpreter_pytorch_working_in_slices_is_counted_over_all_its_slices() -> None:
    slices = Profiled(kernels=[KernelClaim(name="aten::add", us=3, calls=3, elements=3 * 1400)],
                      interpreter_launches=1)
    assert defences(what_ran_findings(slices, [], 0.10, "triton", False, 4096, "c")) == {"library_time"}
    gather = Profiled(kernels=[KernelClaim(name="aten::index", us=1, calls=1, elements=8)], interpreter_launches=1)
    assert what_ran_findings(gather, [], 0.10, "triton", False, 4096, "c") == []


def test_a_gpu_kept_busy_while_the_baseline_is_timed_is_caught_and_a_quiet_one_is_not() -> None:
    from crucible.toolkit.judge.timing import contention_findings as _contention_findings

    quiet = [180.0, 182.0, 181.0]
    assert _contention_findings(quiet, [181.0, 183.0, 180.0], "c") == []
    found = _contention_findings(quiet, [2100.0, 1900.0, 2050.0], "c")
    assert defences(found) == {"contention"} and "2050" in found[0].evidence


def test_the_scored_time_is_never_under_the_judges_bound() -> None:
    from crucible.toolkit.judge.timing import bound_us as _bound_us

    assert _bound_us(stats(10.0, 100.0), on_gpu=True) == pytest.approx(0.85 * 100 - 3)
    assert _bound_us(stats(10.0, 2.0), on_gpu=True) == 0.0


def test_a_negative_reported_time_is_a_protocol_violation(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from crucible.toolkit.protocol import REPLY

    with pytest.raises(ValidationError):
        REPLY.validate_python({"reply": "timed", "first_seq": 1, "us": [1.0, -5.0]})


# ---------------------------------------------------------------- a trusted runner starved of GPU memory

def test_a_trusted_runner_out_of_gpu_memory_is_the_candidates_failure_only_when_its_runner_held_the_memory() -> None:
    from crucible.toolkit.judge.evaluate import STARVED_BYTES, starvation
    from crucible.toolkit.protocol import is_gpu_oom

    ended = starvation("baseline", 40 << 30)
    assert ended is not None and ended.status == "oom"
    assert "baseline runner ran out of GPU memory" in ended.message and "40.0 GiB" in ended.message
    # a runner's own CUDA context is not a hoard: under the bar the failure stays ours (infra)
    assert starvation("baseline", STARVED_BYTES - 1) is None and starvation("baseline", 600 << 20) is None
    assert is_gpu_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB")
    assert not is_gpu_oom("MemoryError") and not is_gpu_oom("CUDA error: an illegal memory access")


# ---------------------------------------------------------------- the CPU's judged time covers the whole batch

def test_cpu_time_a_runner_spends_between_calls_is_charged_to_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:

    class Link:  # the runner's CPU clock: 1 ms in each call
        role = "candidate"

        def __init__(self) -> None:
            self.clock, self.calls = 5.0, 0

        def cpu_seconds(self) -> float:
            return self.clock

        def ask(self, request, expected):
            self.calls += 1
            self.clock += 0.001
            return Called(seq=request.seq, us=1000.0)

    link = Link()

    def prepare(inputs, outputs, fresh):  # while the judge writes the third call's inputs, a thread computes ahead
        if link.calls == 2:
            link.clock += 0.040

    monkeypatch.setattr(timing, "_prepare", prepare)
    subject = timing.Subject("candidate", link, None, [], [], "candidate")  # type: ignore[arg-type]
    timing.cpu_batch(subject, None, {}, 4, set())
    judged = subject.bound.judged_us
    assert [round(j) for j in judged] == [1000, 1000, 41000, 1000], judged


def test_the_kept_timed_calls_are_a_uniform_draw_over_the_whole_phase_and_never_more_than_the_rechecks() -> None:
    # A kernel that counts its calls must not be able to tell which are checked: the last calls of a long
    # phase are kept as often as the first (only the first few were, once), and memory stays bounded.
    import random

    offers, trials = 200, 400
    rng = random.Random(7)
    kept_per_call = [0] * offers
    for _ in range(trials):
        bound = timing.Bound()
        for n in range(offers):
            bound.keep(timing.Sample(call=n, outputs=[], previous=None), rng)  # type: ignore[arg-type]
        assert len(bound.samples) == timing.RECHECKS and bound.offered == offers
        for s in bound.samples:
            kept_per_call[s.call] += 1  # type: ignore[index]
    expected = trials * timing.RECHECKS / offers  # 16 each
    first, last = sum(kept_per_call[:offers // 4]), sum(kept_per_call[-offers // 4:])
    assert abs(first - last) < 0.2 * expected * offers / 4, (first, last)
    assert sum(kept_per_call[timing.RECHECKS:]) > 0.9 * trials * timing.RECHECKS


def test_the_judge_makes_itself_undumpable_and_its_runners_are_not() -> None:
    # Non-dumpable: no process of the same user can ptrace it or open its /proc/<pid>/mem (the reference
    # outputs, the hidden configs); a runner it execs is dumpable again (its own rules apply).
    code = ("import ctypes, subprocess, sys\nfrom crucible.toolkit.judge.jobs import undumpable\nundumpable()\n"
            "libc = ctypes.CDLL(None)\nchild = subprocess.run([sys.executable, '-c', 'import ctypes; "
            "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))'], capture_output=True, text=True).stdout.strip()\n"
            "print(libc.prctl(3, 0, 0, 0, 0), child)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["0", "1"]
