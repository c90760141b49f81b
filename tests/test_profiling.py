"""`profile` on the CPU backend, and the roofline against measured ceilings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crucible.toolkit.hardware import KNOWN, Ceilings, ceilings_for, measured_ceilings_path
from crucible.toolkit.profiling import cannot_run, profile, roofline, runnable_configs
from crucible.toolkit.results import DeviceInfo
from crucible.toolkit.task import find_task, load_task
from crucible.toolkit.workspace import materialize, take_snapshot

FIXTURE = Path(__file__).parent / "fixtures/tasks/triton2triton/vadd"
PLANTED = Path(__file__).parent / "planted"


def snapshot(tmp_path: Path, source: Path):
    task = load_task(FIXTURE)
    materialize(task, tmp_path / "ws")
    shutil.copyfile(source, tmp_path / "ws/kernel.py")
    return task, take_snapshot(task, tmp_path / "ws")


def test_a_cpu_profile_times_the_candidate_lists_host_ops_and_says_what_does_not_apply(tmp_path: Path) -> None:
    task, snap = snapshot(tmp_path, FIXTURE / "solution.py")
    prof = profile(task, snap, "small", ncu=True, backend="cpu")
    assert prof.status == "ok", prof.message
    assert prof.timing is not None and prof.timing.candidate is not None and prof.timing.baseline is not None
    assert prof.timing.speedup is not None
    assert prof.kernels and all(k.total_us > 0 for k in prof.kernels)
    assert abs(sum(k.share for k in prof.kernels) - 1) < 1e-6
    assert prof.resources and prof.resources[0]["registers"], "Triton kernels compiled for sm_90 report registers"
    assert prof.roofline is not None and prof.roofline.achieved_gbps > 0 and prof.roofline.peak_fraction is None
    joined = " ".join(prof.notes)
    assert "not comparable" in joined and "Nsight Compute needs an NVIDIA GPU" in joined


def test_profiling_a_kernel_that_does_not_compile_says_where(tmp_path: Path) -> None:
    task, snap = snapshot(tmp_path, PLANTED / "vadd_syntax.py")
    prof = profile(task, snap, backend="cpu")
    assert prof.status == "compile_error" and "kernel.py:1" in prof.message


def test_profiling_an_unknown_config_names_the_known_ones(tmp_path: Path) -> None:
    task, snap = snapshot(tmp_path, FIXTURE / "solution.py")
    with pytest.raises(KeyError, match="small, half"):
        profile(task, snap, "huge", backend="cpu")


def test_measured_ceilings_are_preferred_and_give_the_bound() -> None:
    device = DeviceInfo(backend="cuda", name="Fake GPU 9000", torch="x")
    assert ceilings_for(device) is None
    path = measured_ceilings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fake = Ceilings(name="Fake GPU 9000", memory_bytes_per_s=1e12, flops_per_s={"float32": 1e13}, source="test")
    path.write_text(json.dumps({fake.name: fake.model_dump()}))
    try:
        roof = roofline(device, "float32", flops=1e9, nbytes=1e9, seconds=2e-3)
        assert roof is not None and roof.bound == "memory"
        assert roof.memory_fraction == pytest.approx(0.5) and roof.compute_fraction == pytest.approx(0.05)
        assert roof.peak_fraction == pytest.approx(0.5) and "test" in roof.ceilings
    finally:
        path.unlink()


def test_the_bandwidth_measurement_times_a_copy_and_a_read() -> None:
    import torch

    from crucible.toolkit.calibration import measure_bandwidth

    copy_bw, read_bw = measure_bandwidth(torch.device("cpu"), 4 << 20)
    assert 1e8 < copy_bw < 1e13 and 1e8 < read_bw < 1e13  # bytes per second a host can plausibly move


def test_past_the_measured_ceiling_is_no_physics_flag_past_the_datasheet_is(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    from crucible.harness.scoring import physics_flags
    from crucible.toolkit.evaluation import with_peak_fraction
    from crucible.toolkit.results import ConfigResult, Evaluation, TimingStats
    from crucible.toolkit.task import find_task

    monkeypatch.setenv("CRUCIBLE_CACHE", str(tmp_path))  # no measured ceilings: the built-in 4.3 TB/s
    task = find_task("cuda2cuda/reduce_sum")
    config = task.configs("visible")[0].name
    device = DeviceInfo(backend="cuda", name="NVIDIA H200", torch="x")
    timed = TimingStats(median_us=1000, min_us=990, max_us=1010, iqr_us=5, rse=0.01, reps=100,
                        method="cuda_graph", comparable=True)

    def scored(gb_per_s: float) -> ConfigResult:
        result = ConfigResult(config=config, status="pass", bytes=gb_per_s * 1e6, candidate=timed)
        return with_peak_fraction(result, device, task)

    fast = scored(4560)  # what a good read kernel reaches on the H200: 1.06 of the copy ceiling
    assert fast.peak_fraction is not None and fast.peak_fraction > 1.0
    assert fast.sol_fraction is not None and 0.9 < fast.sol_fraction < 1.0
    assert fast.sol_us == pytest.approx(4560e6 / 4.8e12 * 1e6)  # bytes over the datasheet's bandwidth, in us
    assert fast.sol_fraction == pytest.approx(fast.sol_us / 1000)
    # A config that did not run still has its speed of light; off a known GPU there is none.
    assert with_peak_fraction(ConfigResult(config=config, status="skipped", bytes=1e9), device, task).sol_us
    cpu = DeviceInfo(backend="cpu", name="cpu (Triton interpreter)", torch="x")
    assert with_peak_fraction(ConfigResult(config=config, status="pass", bytes=1e9, candidate=timed), cpu,
                              task).sol_us is None
    impossible = scored(6000)  # past the 4.8 TB/s of the datasheet
    ev = Evaluation(task=task.id, snapshot="s", backend="cuda", status="ok", message="", timing_comparable=True,
                    configs=[fast, impossible])
    assert physics_flags(ev) == [f"peak_fraction>1: {config} 1.25 of the datasheet peak"]


def test_the_default_profile_config_is_the_largest_that_runs_on_this_backend() -> None:
    softmax = find_task("triton2triton/softmax")
    assert [c.name for c in runnable_configs(softmax, "cpu")] == ["small_fp32"]  # the others: too large
    on_gpu = runnable_configs(softmax, "cuda")
    assert {c.name for c in on_gpu} == {c.name for c in softmax.spec.configs} and on_gpu[-1].name != "small_fp32"


def test_a_config_that_cannot_run_here_is_said_so_with_the_real_reason() -> None:
    rmsnorm, softmax = find_task("cuda2cuda/rmsnorm"), find_task("triton2triton/softmax")
    assert runnable_configs(rmsnorm, "cpu") == []
    needs_gpu = cannot_run(rmsnorm, "cpu", rmsnorm.spec.configs[0].name, [], asked=False)
    assert "needs a GPU" in needs_gpu and "too large" not in needs_gpu
    too_large = cannot_run(softmax, "cpu", "fp16_2048x32000", runnable_configs(softmax, "cpu"), asked=True)
    assert "too large for the CPU interpreter" in too_large and "Configs that run here: small_fp32" in too_large
    assert cannot_run(softmax, "cpu", "small_fp32", runnable_configs(softmax, "cpu"), asked=True) == ""


def test_fp8_work_is_measured_against_the_fp8_rate_even_after_a_calibration_that_skipped_it() -> None:
    """Calibration measures bf16 matmuls, not fp8: an fp8 GEMM must not be held to the fp32 rate (its SOL
    fraction would pass 1 and flag every good kernel)."""
    device = DeviceInfo(backend="cuda", name="NVIDIA H200", torch="x")
    path = measured_ceilings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    calibrated = Ceilings(name="NVIDIA H200", memory_bytes_per_s=4.4e12,
                          flops_per_s={"float32": 60e12, "bfloat16": 800e12}, source="calibrated here")
    path.write_text(json.dumps({calibrated.name: calibrated.model_dump()}))
    try:
        ceil = ceilings_for(device)
        assert ceil is not None and ceil.flops_per_s["bfloat16"] == 800e12  # the measured rate wins
        assert ceil.flops_per_s["float8_e4m3fn"] == KNOWN["H200"].flops_per_s["float8_e4m3fn"] > 1000e12
        roof = roofline(device, "float8_e4m3fn", flops=2e12, nbytes=1e6, seconds=2e-3)  # 1000 TFLOP/s of fp8
        assert roof is not None and roof.bound == "compute" and 0.5 < roof.peak_fraction < 1
    finally:
        path.unlink()
