"""The worker-side pieces, called in-process: inputs, tolerances."""

from __future__ import annotations

from pathlib import Path

import torch

from crucible.toolkit.runtime import Case, import_file
from crucible.toolkit.task import load_task

FIXTURE = Path(__file__).parent / "fixtures/tasks/triton2triton/vadd"


def test_inputs_get_a_random_offset_and_scale_per_seed() -> None:
    task = load_task(FIXTURE)
    ref = import_file(FIXTURE / "reference.py", "vadd_reference_for_test")
    config = task.config("small")
    raw = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(0), torch.device("cpu"))["x"]
    a = Case(task, ref, config, 0, torch.device("cpu")).inputs[0]
    again = Case(task, ref, config, 0, torch.device("cpu")).inputs[0]
    b = Case(task, ref, config, 1, torch.device("cpu")).inputs[0]
    assert torch.equal(a, again), "the same seed gives the same inputs"
    assert not torch.allclose(a, raw), "the raw inputs were perturbed"
    scale = float((a - a.mean()).std() / (raw - raw.mean()).std())
    assert 0.45 < scale < 2.1 and abs(scale - 1) > 1e-3
    assert not torch.allclose(a, b)


def test_inputs_marked_not_to_perturb_stay_as_made(tiny_task_dir: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text().replace('{ name = "x" }', '{ name = "x", perturb = false }'))
    task = load_task(tiny_task_dir)
    ref = import_file(tiny_task_dir / "reference.py", "vadd_reference_for_test2")
    config = task.config("small")
    raw = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(3), torch.device("cpu"))
    case = Case(task, ref, config, 3, torch.device("cpu"))
    assert torch.equal(case.inputs[0], raw["x"])
    assert not torch.equal(case.inputs[1], raw["y"])


def test_outputs_come_poisoned_with_the_configs_shape_and_dtype() -> None:
    task = load_task(FIXTURE)
    ref = import_file(FIXTURE / "reference.py", "vadd_reference_for_test3")
    case = Case(task, ref, task.config("half"), 0, torch.device("cpu"))
    (out,) = case.new_outputs()
    assert out.shape == (4099,) and out.dtype == torch.float16 and torch.isnan(out).all()


def test_a_task_can_override_the_tolerance_of_one_dtype(tiny_task_dir: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text() + '\n[tolerance]\nfloat16 = { atol = 0.05, rtol = 0.01 }\n'
                    'reason = "accumulates in fp16"\n')
    tol = load_task(tiny_task_dir).spec.tolerance
    assert (tol.for_dtype("float16").atol, tol.for_dtype("float16").rtol) == (0.05, 0.01)
    assert (tol.for_dtype("float32").atol, tol.for_dtype("float32").rtol) == (1e-4, 1e-4)
    assert tol.for_dtype("int32").atol == 0
