"""The runtime defences' checks (toolkit/integrity.py) on synthetic inputs; the red-team corpus
(tests/test_redteam.py) runs them end to end through the worker."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from crucible.toolkit import integrity


def softmax64(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)  # float64 in, float64 out: an oracle


def test_a_bf16_shortcut_on_an_fp32_task_is_far_outside_rounding() -> None:
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    ref = torch.softmax(x, -1)
    cheat = torch.softmax(x.bfloat16().float(), -1)
    found = integrity.precision_findings(softmax64, [x], {}, [cheat], [ref], ["y"], "c")
    assert [f.defence for f in found] == ["precision"] and "float64" in found[0].evidence and found[0].config == "c"


def test_an_honest_fp32_kernel_in_another_order_is_not_flagged() -> None:
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(1))
    ref = torch.softmax(x, -1)
    e = torch.exp2((x - x.amax(-1, keepdim=True)) * 1.4426950408889634)  # exp2 with log2(e) folded in
    honest = e / e.flip(-1).sum(-1, keepdim=True)  # summed the other way round
    assert integrity.precision_findings(softmax64, [x], {}, [honest], [ref], ["y"], "c") == []


def test_a_reference_that_narrows_inside_gives_no_oracle_and_no_flag() -> None:
    x = torch.randn(8, 16)

    def narrowing(t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(t.float(), -1)

    cheat = torch.softmax(x.half().float(), -1)
    assert integrity.precision_findings(narrowing, [x], {}, [cheat], [torch.softmax(x, -1)], ["y"], "c") == []


def test_runs_that_differ_in_one_bit_are_nondeterministic_and_equal_ones_are_not() -> None:
    a = torch.randn(100)
    b = a.clone()
    assert integrity.nondeterminism_findings([a], [b], ["y"], "c") == []
    b[7] = torch.nextafter(b[7], torch.tensor(float("inf")))
    found = integrity.nondeterminism_findings([a], [b], ["y"], "c")
    assert len(found) == 1 and "1 of 100" in found[0].evidence and not found[0].caught


def test_nan_where_both_runs_have_nan_is_not_a_difference() -> None:
    a = torch.tensor([1.0, float("nan")])
    assert integrity.nondeterminism_findings([a], [a.clone()], ["y"], "c") == []


def profile_of(kernels: dict[str, float], ops: list[str] | None = None, launches: float | None = None) -> dict:
    return {"kernels": kernels, "ops": ops or [], "interpreter_launches": launches}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_one_profiler_session_attributes_each_op_to_the_call_that_ran_it(device: str) -> None:
    prepared: list[str] = []

    def make_call(key: str):  # the preparation's own ops and kernels (randn) belong to no call
        prepared.append(key)
        a, b = torch.randn(64, 64, device=device), torch.randn(64, 64, device=device)
        if key == "adds":
            return lambda: torch.add(a, b)
        if key == "products":
            return lambda: torch.mm(a, b)
        return lambda: a.view(-1, 3)  # 4096 elements: not a multiple of 3, raises

    profiles, errors = integrity.profile_calls(["adds", "broken", "products"], make_call, torch.device(device),
                                               reps=2)
    assert prepared == ["adds", "broken", "products"]
    assert set(profiles) == {"adds", "products"} and set(errors) == {"broken"}
    assert "aten::add" in profiles["adds"]["ops"] and "aten::mm" not in profiles["adds"]["ops"]
    assert "aten::mm" in profiles["products"]["ops"] and "aten::add" not in profiles["products"]["ops"]
    assert not any("randn" in op or "normal" in op for p in profiles.values() for op in p["ops"])
    assert profiles["adds"]["host_calls"]["aten::add"] == 1  # per call, over the two reps
    if device == "cpu":
        assert profiles["adds"]["interpreter_launches"] == 0
        return
    # On the GPU the device kernels too, each in the range of the call that launched it.
    adds, products = profiles["adds"]["kernels"], profiles["products"]["kernels"]
    assert len(adds) == 1 and "add" in next(iter(adds)).lower(), adds
    assert products and not any("add" in k.lower() for k in products), products
    assert not any("normal" in k for p in profiles.values() for k in p["kernels"])
    assert profiles["adds"]["kernel_calls"][next(iter(adds))] == 1


def test_the_profiled_pass_does_not_import_torch_inductor() -> None:
    # torch.profiler's wrapper imports torch._inductor on its first start: 4.4 s in every fresh worker on the
    # H200, which was nearly all of the defences' cost (benchmarks/RESULTS.md). A fresh interpreter, as the
    # worker is, must get its profile without it.
    script = ("import sys, torch\n"
              "from crucible.toolkit import integrity\n"
              "x = torch.ones(8)\n"
              "profiles, errors = integrity.profile_calls(['k'], lambda key: lambda: torch.add(x, x),"
              " torch.device('cpu'), reps=1)\n"
              "assert 'aten::add' in profiles['k']['ops'], profiles\n"
              "print('torch._inductor' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_a_call_whose_every_kernel_is_pytorchs_or_a_librarys_has_no_kernel_of_its_own() -> None:
    prof = profile_of({"void at::native::vectorized_elementwise_kernel<4, ...>": 10.0,
                       "sm90_xmma_gemm_f16f16_f32": 50.0, "Memcpy DtoD (Device -> Device)": 2.0})
    found = integrity.what_ran_findings(prof, [], "cuda", True, "c")
    assert [f.defence for f in found] == ["no_own_kernel"] and "sm90_xmma" in found[0].evidence


def test_a_call_with_its_own_kernel_beside_library_copies_is_fine() -> None:
    prof = profile_of({"void (anonymous namespace)::argmax_group<4>(float const*, long*, long, int)": 30.0,
                       "_softmax_fused": 3.0, "Memset (Device)": 1.0})
    assert integrity.what_ran_findings(prof, [], "cuda", True, "c") == []


def test_forbidden_ops_are_named_with_what_the_task_forbids() -> None:
    prof = profile_of({"_mm_kernel": 5.0}, ops=["aten::empty", "aten::mm"])
    found = integrity.what_ran_findings(prof, ["aten::mm", "aten::bmm"], "triton", True, "c")
    assert [f.defence for f in found] == ["forbidden_op"] and "aten::mm" in found[0].evidence


def test_in_the_interpreter_a_call_that_launched_no_triton_kernel_is_caught() -> None:
    found = integrity.what_ran_findings(profile_of({}, ops=["aten::add"], launches=0), [], "triton", False, "c")
    assert [f.defence for f in found] == ["no_own_kernel"] and "aten::add" in found[0].evidence
    assert integrity.what_ran_findings(profile_of({}, launches=2), [], "triton", False, "c") == []


@pytest.mark.parametrize(("median_us", "flagged"), [(100.0, False), (60.0, False), (10.0, True)])
def test_a_timer_far_below_the_profilers_device_time_is_caught(median_us: float, flagged: bool) -> None:
    prof = profile_of({"own_kernel": 80.0, "Memcpy DtoD": 20.0})
    found = integrity.crosscheck_findings(prof, median_us, "c")
    assert bool(found) is flagged
    if flagged:
        assert "10.0 us" in found[0].evidence and "100.0 us" in found[0].evidence


def test_tiny_calls_are_not_cross_checked() -> None:
    assert integrity.crosscheck_findings(profile_of({"k": 3.0}), 0.5, "c") == []


def test_a_patched_timer_is_reported_by_name_and_nothing_when_untouched() -> None:
    before = integrity.runtime_snapshot()
    assert integrity.patched_findings(before, "c") == []
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0  # type: ignore[assignment]
        found = integrity.patched_findings(before, "c")
    finally:
        time.perf_counter = original
    assert len(found) == 1 and found[0].defence == "patched_runtime" and "time.perf_counter" in found[0].evidence
    assert integrity.patched_findings(before, "c") == []


def test_the_cli_shows_what_the_defences_saw() -> None:
    from crucible.harness.render import evaluation_text
    from crucible.toolkit.results import ConfigResult, Evaluation, IntegrityFinding

    seen = IntegrityFinding(defence="stale_results", config="small", evidence="the result for the old values")
    audit = IntegrityFinding(defence="nondeterminism", config="small", evidence="differ in 2 of 10 elements")
    ev = Evaluation(task="t", snapshot="abc", backend="cpu", status="ok", message="m",
                    configs=[ConfigResult(config="small", status="pass", integrity=[seen, audit])])
    text = evaluation_text(ev)
    assert "CAUGHT runtime:stale_results small: the result for the old values" in text
    assert "audit  runtime:nondeterminism small" in text
