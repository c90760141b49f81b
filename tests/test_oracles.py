"""The float64 oracle (toolkit/oracles.py): every task's reference gives one, a reference that narrows is told
what to fix, and the precision and determinism comparisons on plain tensors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from crucible.toolkit.checking import compare
from crucible.toolkit.evaluation import output_elements
from crucible.toolkit.judge.cases import Case
from crucible.toolkit.oracles import (
    OracleError,
    float64_reference,
    narrowed_outputs,
    nondeterminism_findings,
    precision_findings,
)
from crucible.toolkit.runner.loading import import_file
from crucible.toolkit.task import TaskError, load_task, resolve_dtype
from crucible.toolkit.validation import _reference_checks

ROOT = Path(__file__).resolve().parent.parent
TASK_DIRS = sorted(p.parent for pattern in ("tasks/*/*/task.toml", "tests/fixtures/tasks/*/*/task.toml",
                                            "tests/redteam/tasks/*/*/task.toml") for p in ROOT.glob(pattern))


@pytest.mark.parametrize("folder", TASK_DIRS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_task_reference_is_a_float64_oracle_that_agrees_with_itself(folder: Path) -> None:
    task = load_task(folder)
    assert task.spec.oracle.float64, f"{task.id}: {task.spec.oracle.reason}"
    ref = import_file(task.file("reference.py"), f"oracle_ref_{task.id.replace('/', '_')}")
    config = min(task.configs("visible"), key=lambda c: output_elements(task, c))
    case = Case(task, ref, config, 0, torch.device("cpu"))
    names = [o.name for o in task.spec.signature.outputs]

    refs64 = float64_reference(ref.reference, case.inputs, case.params, names)
    assert narrowed_outputs(ref.reference, case.inputs, case.params, names) == []
    # The float64 run computes the same function: rounded to the task's dtype it passes the task's tolerance.
    with torch.no_grad():
        refs = ref.reference(*[t.clone() for t in case.inputs], **case.params)
    refs = list(refs) if isinstance(refs, tuple | list) else [refs]
    for spec, r, r64 in zip(task.spec.signature.outputs, refs, refs64, strict=True):
        assert r64.shape == r.shape
        # a drawn output's reference is its probabilities: they agree within their own dtype's tolerance
        dtype = str(r.dtype).removeprefix("torch.") if spec.check == "sample" else resolve_dtype(spec.dtype, config)
        tol = task.spec.tolerance.for_dtype(dtype)
        check = compare(spec.name, r64.to(r.dtype), r, tol.atol, tol.rtol)
        assert check.ok, f"{task.id} {spec.name}: {check}"


def softmax_in_fp32(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1)


def test_a_reference_that_downcasts_raises_an_oracle_error_saying_what_to_change() -> None:
    with pytest.raises(OracleError) as caught:
        float64_reference(softmax_in_fp32, [torch.randn(4, 8)], {}, ["y"])
    text = str(caught.value)
    assert "output 0 (y) as float32" in text and "float64" in text
    assert "x.dtype" in text and "[oracle]" in text  # the fix, and the way out when there is none


def test_a_reference_that_raises_on_float64_inputs_is_an_oracle_error_too() -> None:
    def fp16_only(x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float64:
            raise RuntimeError('"addmm" not implemented for \'Double\'')
        return x

    with pytest.raises(OracleError, match="raised RuntimeError on float64 inputs.*not implemented"):
        float64_reference(fp16_only, [torch.randn(4)], {})


def test_integer_inputs_reach_the_reference_unchanged_and_params_are_passed() -> None:
    def gather(table: torch.Tensor, ids: torch.Tensor, *, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        assert table.dtype == torch.float64 and ids.dtype == torch.int64
        return table[ids] * scale, ids

    table, ids = torch.randn(5, 3), torch.tensor([4, 0, 2])
    out, same_ids = float64_reference(gather, [table, ids], {"scale": 2.0})
    assert out.dtype == torch.float64 and torch.equal(out, table.double()[ids] * 2.0)
    assert torch.equal(same_ids, ids)


def test_a_reference_that_rounds_to_fp32_inside_but_returns_float64_is_seen_narrowing() -> None:
    def sneaky(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float(), dim=-1).to(x.dtype)

    assert narrowed_outputs(sneaky, [torch.randn(4, 8)], {}, ["y"]) == ["output 0 (y)"]
    assert narrowed_outputs(lambda x: torch.softmax(x, dim=-1), [torch.randn(4, 8)], {}, ["y"]) == []


def _softmax_case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    return x, torch.softmax(x, -1), float64_reference(lambda t: torch.softmax(t, -1), [x], {})[0]


def test_an_output_computed_in_fp16_is_a_precision_finding_and_the_references_own_is_not() -> None:
    x, ref, ref64 = _softmax_case()
    cheat = torch.softmax(x.half(), -1).float()
    found = precision_findings([cheat], [ref], [ref64], ["y"], "c")
    assert [f.defence for f in found] == ["precision"] and "float64" in found[0].evidence and found[0].config == "c"
    assert precision_findings([ref.clone()], [ref], [ref64], ["y"], "c") == []


def test_nan_where_the_float64_reference_is_finite_is_a_precision_finding() -> None:
    _, ref, ref64 = _softmax_case()
    out = ref.clone()
    out[3, 7] = float("nan")
    out[5, 0] = float("inf")
    found = precision_findings([out], [ref], [ref64], ["y"], "c")
    assert len(found) == 1 and "2 of 32768 elements are NaN or Inf" in found[0].evidence and found[0].caught


def test_inf_where_the_float64_value_overflows_the_output_dtype_is_the_right_rounding() -> None:
    ref64 = torch.tensor([1.0, 70000.0], dtype=torch.float64)  # beyond fp16's 65504
    out = ref64.half()
    assert torch.isinf(out[1])
    assert precision_findings([out], [out.clone()], [ref64], ["y"], "c") == []


def test_runs_that_differ_in_one_bit_are_nondeterministic_and_equal_ones_are_not() -> None:
    a = torch.randn(100)
    b = a.clone()
    assert nondeterminism_findings([a], [b], ["y"], "c") == []
    b[7] = torch.nextafter(b[7], torch.tensor(float("inf")))
    found = nondeterminism_findings([a], [b], ["y"], "c")
    assert len(found) == 1 and "1 of 100" in found[0].evidence and not found[0].caught
    nan = torch.tensor([1.0, float("nan")])
    assert nondeterminism_findings([nan], [nan.clone()], ["y"], "c") == []


# ---------------------------------------------------------------- task.toml and `crucible tasks validate`

def _record_no_oracle(folder: Path, reason: str) -> None:
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("[signature]", f'[oracle]\nfloat64 = false\nreason = "{reason}"\n\n'
                                             "[signature]"))


def _downcast_reference(folder: Path) -> None:
    ref = folder / "reference.py"
    ref.write_text(ref.read_text().replace("return 2 * x + y", "return (2 * x + y).float()"))


def test_a_task_that_disables_the_oracle_without_a_reason_does_not_load(tiny_task_dir: Path) -> None:
    _record_no_oracle(tiny_task_dir, " ")
    with pytest.raises(TaskError, match="oracle: .*reason"):
        load_task(tiny_task_dir)


def test_validation_fails_a_downcasting_reference_with_the_oracle_error(tiny_task_dir: Path) -> None:
    _downcast_reference(tiny_task_dir)
    check = next(c for c in _reference_checks(load_task(tiny_task_dir), "cpu") if c.name == "float64_oracle")
    assert check.status == "fail" and "small (CPU)" in check.message and "output 0 (out) as float32" in check.message


def test_validation_passes_a_task_that_records_why_it_has_no_oracle_and_says_so(tiny_task_dir: Path) -> None:
    _downcast_reference(tiny_task_dir)
    _record_no_oracle(tiny_task_dir, "torch.fancy has no float64 kernel")
    check = next(c for c in _reference_checks(load_task(tiny_task_dir), "cpu") if c.name == "float64_oracle")
    assert check.status == "pass" and "no float64 oracle" in check.message and "torch.fancy" in check.message


def test_validation_passes_the_fixture_tasks_working_oracle(tiny_task_dir: Path) -> None:
    check = next(c for c in _reference_checks(load_task(tiny_task_dir), "cpu") if c.name == "float64_oracle")
    assert check.status == "pass" and "float64 outputs on small (CPU)" in check.message
