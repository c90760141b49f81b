import math

import pytest
import torch

from crucible.toolkit.checking import (
    check_output,
    compare,
    compare_samples,
    describe,
    poison_,
    pooled_samples,
)
from crucible.toolkit.task import Tolerance


def test_a_correct_output_passes_with_its_errors_reported() -> None:
    ref = torch.linspace(-1, 1, 100)
    check = compare("y", ref + 1e-6, ref, atol=1e-5, rtol=1e-5)
    assert check.ok and check.mismatched == 0
    assert check.max_abs_err == pytest.approx(1e-6, rel=0.05)


def test_the_first_mismatch_is_located_by_its_index() -> None:
    ref = torch.zeros(4, 5)
    out = ref.clone()
    out[2, 3] = 0.5
    out[3, 1] = 0.25
    check = compare("y", out, ref, atol=1e-3, rtol=0)
    assert not check.ok and check.mismatched == 2
    assert check.first_mismatch is not None and check.first_mismatch.index == [2, 3]
    assert check.first_mismatch.got == 0.5 and check.first_mismatch.expected == 0.0
    assert "first at [2, 3]" in describe(check)


def test_unwritten_poisoned_elements_fail_and_are_counted() -> None:
    ref = torch.ones(10, dtype=torch.float16)
    out = torch.empty_like(ref)
    poison_(out)
    out[:7] = 1
    check = compare("y", out, ref, atol=1e-2, rtol=1e-2)
    assert not check.ok and check.unwritten == 3 and check.mismatched == 3
    assert "never written" in describe(check)


def test_nan_and_inf_in_the_output_fail_unless_the_reference_has_them() -> None:
    ref = torch.tensor([1.0, float("inf"), float("nan")])
    assert compare("y", ref.clone(), ref, atol=0, rtol=0).ok
    bad = torch.tensor([float("inf"), float("inf"), float("nan")])
    check = compare("y", bad, ref, atol=1e-3, rtol=1e-3)
    assert not check.ok and math.isinf(check.max_abs_err)


def test_integer_outputs_are_poisoned_with_their_max() -> None:
    t = torch.zeros(3, dtype=torch.int32)
    poison_(t)
    assert t.tolist() == [2**31 - 1] * 3


def test_a_shape_mismatch_is_an_error_naming_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        compare("y", torch.zeros(3), torch.zeros(4), atol=0, rtol=0)


# ---------------------------------------------------------------- FP8 outputs

def test_fp8_outputs_compare_within_one_step_of_the_format_and_poison_as_nan() -> None:
    from crucible.toolkit.checking import values
    from crucible.toolkit.task import Tolerances

    tol = Tolerances().for_dtype("float8_e4m3fn")
    ref = torch.tensor([96.0, 0.3125, -448.0, 2.0**-9]).to(torch.float8_e4m3fn)
    one_step = torch.tensor([104.0, 0.34375, -416.0, 2.0**-8]).to(torch.float8_e4m3fn)  # the next value up
    assert compare("q", one_step, ref, tol.atol, tol.rtol).ok
    two_steps = torch.tensor([112.0, 0.3125, -448.0, 2.0**-9]).to(torch.float8_e4m3fn)
    check = compare("q", two_steps, ref, tol.atol, tol.rtol)
    assert not check.ok and check.mismatched == 1 and check.first_mismatch.expected == 96.0
    out = torch.empty(4, dtype=torch.float8_e4m3fn)
    poison_(out)
    assert bool(values(out).isnan().all())
    check = compare("q", out, ref, tol.atol, tol.rtol)
    assert check.unwritten == 4 and "never written" in describe(check)


# ---------------------------------------------------------------- drawn outputs (check = "sample")

def _probs(rows: int, classes: int, temperature: float = 1.0, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, classes, generator=gen) * 2.0 / temperature, dim=-1)


def _draw(probs: torch.Tensor, seed: int = 1) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed))[:, 0]


def test_honest_draws_pass_the_sample_check_across_many_seeds() -> None:
    probs = _probs(128, 500)
    checks = [compare_samples("token", _draw(probs, seed), probs) for seed in range(10)]
    assert all(c.ok for c in checks), [describe(c) for c in checks if not c.ok]
    assert min(c.p_value for c in checks) > 1e-4
    assert "draws like the reference's probabilities" in describe(checks[0])


def test_always_the_likeliest_class_fails_the_sample_check() -> None:
    probs = _probs(64, 1000)
    check = compare_samples("token", probs.argmax(-1), probs)
    assert not check.ok and check.mismatched == 0 and check.p_value < 1e-6
    assert "unlike the reference's probabilities" in describe(check)


def test_a_sampler_that_reads_only_part_of_the_vocabulary_fails_in_index_order() -> None:
    # Every column alike: a choice of classes made without looking at them leaves the probability-ranked
    # transform uniform, so only the index-order one shows the half never drawn.
    probs = _probs(256, 1000)
    half = probs[:, :500] / probs[:, :500].sum(-1, keepdim=True)
    check = compare_samples("token", _draw(half), probs)
    assert not check.ok and check.mismatched == 0, describe(check)


def test_the_draws_of_several_calls_are_tested_together_where_one_call_has_one_draw() -> None:
    # Greedy decoding at batch 1: no test of one draw can fail it; sixteen together do, and honest single
    # draws pooled the same way pass.
    greedy, honest = [], []
    for call in range(16):
        probs = _probs(1, 4000, seed=100 + call)
        greedy.append(compare_samples("token", probs.argmax(-1), probs))
        honest.append(compare_samples("token", _draw(probs, seed=call), probs))
    assert all(c.ok for c in greedy)  # each call alone
    pooled = pooled_samples("token", greedy)
    assert pooled is not None and not pooled.ok and pooled.total == 16, describe(pooled)
    fair = pooled_samples("token", honest)
    assert fair is not None and fair.ok and fair.p_value > 1e-4
    assert pooled_samples("token", []) is None


def test_a_sampler_that_ignores_the_temperature_fails() -> None:
    probs = _probs(256, 1000, temperature=0.5)
    wrong = _draw(_probs(256, 1000, temperature=1.0))  # the same logits, sampled at temperature 1
    check = compare_samples("token", wrong, probs)
    assert not check.ok, describe(check)


def test_a_draw_of_a_class_of_probability_zero_fails_outright_and_is_located() -> None:
    probs = _probs(8, 10)
    probs[3] = torch.tensor([0.0] * 9 + [1.0])  # a cut-off row: only class 9 is possible
    drawn = _draw(probs)
    drawn[3] = 2
    check = compare_samples("token", drawn, probs)
    assert not check.ok and check.mismatched == 1 and check.first_mismatch.index == [3]
    assert "probability 0" in describe(check) and "class 2" in describe(check)
    poisoned = _draw(probs)
    poison_(poisoned)
    check = compare_samples("token", poisoned, probs)
    assert not check.ok and check.unwritten == 8 and "never written" in describe(check)


def test_draws_and_probabilities_must_have_matching_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(4,\) draws.*\(5, 10\)"):
        compare_samples("token", torch.zeros(4, dtype=torch.int64), _probs(5, 10))


def test_a_sampled_output_must_be_an_index_and_check_is_for_outputs_only() -> None:
    from crucible.toolkit.task import Signature, TensorSpec

    with pytest.raises(ValueError, match='give them dtype "int32" or "int64"'):
        Signature(inputs=[TensorSpec(name="x")], outputs=[TensorSpec(name="t", shape=["B"], check="sample")])
    with pytest.raises(ValueError, match="for outputs only"):
        Signature(inputs=[TensorSpec(name="x", check="sample")], outputs=[TensorSpec(name="y", shape=["B"])])
    ok = Signature(inputs=[TensorSpec(name="x")], outputs=[TensorSpec(name="t", dtype="int64", shape=["B"],
                                                                      check="sample")])
    assert check_output(ok.outputs[0], _draw(_probs(16, 20)), _probs(16, 20), Tolerance(atol=0, rtol=0)).p_value
