"""`crucible import kernelbench`: KernelBench problem files (tests/fixtures/kernelbench) become task folders
whose visible config is get_inputs()' shapes, whose hidden configs follow the rules, and whose reference
is the problem's Model."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from crucible.harness.importers import ImporterError
from crucible.harness.importers.kernelbench import DEFAULT_RULES, import_problem, import_problems, load_rules
from crucible.toolkit.runner.loading import import_file
from crucible.toolkit.task import Task, load_task, output_shape

PROBLEMS = Path(__file__).parent / "fixtures" / "kernelbench"
RELU, LINEAR, SUM = (PROBLEMS / n for n in ("19_ReLU.py", "99_Linear_GELU.py",
                                            "47_Sum_reduction_over_a_dimension.py"))


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    import_problems([RELU, LINEAR, SUM], out)
    return out


def _problem(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kb_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _values(task: Task, name: str) -> dict:
    return {k: v for k, v in task.config(name).values.items() if k not in ("model_flops", "model_bytes")}


def test_the_visible_config_is_get_inputs_shapes_and_the_task_loads(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "19_relu")
    assert task.spec.category == "torch2triton" and task.spec.stub == "stub.py"
    assert task.spec.solution is None and not (task.root / "solution.py").exists()
    assert [c.name for c in task.configs("visible")] == ["original"]
    assert _values(task, "original") == {"dtype": "float32", "batch_size": 16, "dim": 4096}
    assert [t.name for t in task.spec.signature.inputs] == ["x"]
    assert task.spec.signature.outputs[0].shape == ["batch_size", "dim"]
    assert "torch.relu(x)" in (task.root / "PROMPT.md").read_text()


def test_hidden_configs_follow_the_default_rules(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "19_relu")
    sizes = {c.name: (c.values["batch_size"], c.values["dim"]) for c in task.configs("hidden")}
    assert sizes == {"half": (8, 2048), "double": (32, 8192), "tail_plus_one": (17, 4097),
                     "tail_minus_one": (15, 4095), "odd_three_quarters": (13, 3073), "single_row": (1, 4096)}
    relu = task.config("double")
    assert relu.values["model_bytes"] == 2 * 32 * 8192 * 4 and relu.values["model_flops"] == 0


def test_init_sizes_scale_with_the_inputs_and_weights_are_inputs(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "99_linear_gelu")
    sig = task.spec.signature
    assert [t.name for t in sig.inputs] == ["x", "linear_weight", "linear_bias"]
    assert [p.name for p in sig.params] == ["in_features", "out_features"]
    assert sig.outputs[0].shape == ["batch_size", "out_features"]
    assert _values(task, "original") == {"dtype": "float32", "batch_size": 64, "in_features": 256,
                                         "out_features": 192}
    double = task.config("double").values
    assert (double["batch_size"], double["in_features"], double["out_features"]) == (128, 512, 384)
    assert double["model_flops"] == 2 * 128 * 512 * 384  # the matmul, from FlopCounterMode


def test_a_non_size_init_argument_stays_fixed(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "47_sum_reduction_over_a_dimension")
    assert task.spec.signature.outputs[0].shape == ["batch_size", 1, "dim2"]
    assert {c.values["dim"] for c in task.configs("all")} == {1}
    assert task.config("tail_plus_one").values["dim2"] == 256


@pytest.mark.parametrize(("problem", "slug"), [(RELU, "19_relu"), (LINEAR, "99_linear_gelu"),
                                               (SUM, "47_sum_reduction_over_a_dimension")])
def test_the_reference_is_the_models_forward_on_generated_inputs(suite: Path, problem: Path, slug: str) -> None:
    task = load_task(suite / "torch2triton" / slug)
    ref = import_file(task.file("reference.py"), f"kb_reference_{slug}")
    module = _problem(problem)
    for name in ("original", "tail_minus_one"):
        config = task.config(name)
        inputs = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(3), torch.device("cpu"))
        again = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(3), torch.device("cpu"))
        assert all(torch.equal(inputs[k], again[k]) for k in inputs), "make_inputs is deterministic per seed"
        params = {p.name: config.values[p.name] for p in task.spec.signature.params}
        got = ref.reference(*inputs.values(), **params)
        # The config's sizes, where the problem's own init inputs are sizes (the Linear's features).
        init = [params[p] for p in params] if slug == "99_linear_gelu" else module.get_init_inputs()
        model = module.Model(*init)
        state = {k: inputs[k.replace(".", "_")] for k, _ in model.state_dict().items()}
        model.load_state_dict(state)
        with torch.no_grad():
            want = model(inputs["x"])
        assert list(got.shape) == output_shape(task.spec.signature.outputs[0], config)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        assert got.std() > 0.1


def test_an_edited_rules_file_changes_the_hidden_configs(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[dims]\nkeep = ["in_features"]\n\n[[rules]]\nname = "triple"\nscale = 3.0\n\n'
                     '[[rules]]\nname = "wide"\ndims = ["out_*"]\nadd = 64\n')
    folder, _ = import_problem(LINEAR, tmp_path / "out", rules=rules)
    task = load_task(folder)
    sizes = {c.name: (c.values["batch_size"], c.values["in_features"], c.values["out_features"])
             for c in task.configs("hidden")}
    assert sizes == {"triple": (192, 256, 576), "wide": (64, 256, 256)}
    assert "rules.toml" in (folder / "hidden.toml").read_text()


def test_bad_rules_and_existing_folders_are_errors_that_say_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rules]]\nname = "original"\n')
    with pytest.raises(ImporterError, match="distinct and not 'original'"):
        load_rules(bad)
    assert load_rules(DEFAULT_RULES).rules
    import_problem(RELU, tmp_path / "out")
    with pytest.raises(ImporterError, match="--force"):
        import_problem(RELU, tmp_path / "out")


def test_a_torch2cuda_import_writes_a_stub_that_compiles(tmp_path: Path) -> None:
    from crucible.toolkit.evaluation import build

    folder, _ = import_problem(LINEAR, tmp_path, category="torch2cuda")
    task = load_task(folder)
    assert task.spec.language == "cuda" and task.spec.stub == "stub.cu"
    stub = (folder / "stub.cu").read_text()
    assert ('extern "C" int entry(const float* x, const float* linear_weight, const float* linear_bias, '
            "float* out, int64_t in_features, int64_t out_features, cudaStream_t stream)") in stub
    if os.environ.get("PATH") and any((Path(p) / "nvcc").exists() for p in os.environ["PATH"].split(":")):
        assert build(task, folder, "stub.cu", "cpu").ok


RELU_SOLUTION = '''"""ReLU over the flattened tensor, 1024 elements per program."""
import torch
import triton
import triton.language as tl


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def entry(x: torch.Tensor, out: torch.Tensor) -> None:
    _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
'''


def test_the_cli_imports_with_a_solution_and_the_task_validates(tmp_path: Path) -> None:
    solution = tmp_path / "relu.py"
    solution.write_text(RELU_SOLUTION)
    env = {**os.environ, "CRUCIBLE_TASKS": str(tmp_path / "suite"), "CRUCIBLE_BACKEND": "cpu"}

    def crucible(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "crucible.harness.cli", *args], capture_output=True,
                              text=True, env=env, timeout=300)

    proc = crucible("import", "kernelbench", str(RELU), "--out", str(tmp_path / "suite"), "--solution", str(solution))
    assert proc.returncode == 0, proc.stderr
    assert "dims batch_size=16, dim=4096" in proc.stdout
    proc = crucible("tasks", "validate", "torch2triton/19_relu", "--seeds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stub_rejected" in proc.stdout and "PASS" in proc.stdout
    assert crucible("import", "kernelbench", str(RELU), "--out", str(tmp_path / "suite")).returncode == 2
