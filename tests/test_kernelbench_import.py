"""`crucible import kernelbench`: KernelBench problem files (tests/fixtures/kernelbench) become task folders
whose visible config is get_inputs()' shapes, whose hidden configs follow the rules, and whose reference
is the problem's Model."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from crucible.harness.importers import ImporterError
from crucible.harness.importers.kernelbench import import_batch, import_problem, import_problems
from crucible.harness.importers.kernelbench_rules import DEFAULT_RULES, candidate_sizes, load_rules
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


def test_the_visible_config_is_the_problems_own_numbers_and_the_task_loads(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "19_relu")
    assert task.spec.category == "torch2triton" and task.spec.stub == "stub.py"
    assert task.spec.solution is None and not (task.root / "solution.py").exists()
    assert [c.name for c in task.configs("visible")] == ["original"]
    assert _values(task, "original") == {"dtype": "float32", "batch_size": 16, "dim": 4096}
    assert [t.name for t in task.spec.signature.inputs] == ["x"]
    assert task.spec.signature.outputs[0].shape == ["batch_size", "dim"]
    assert "torch.relu(x)" in (task.root / "PROMPT.md").read_text()


def test_every_hidden_config_changes_every_size(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "19_relu")
    sizes = {c.name: (c.values["batch_size"], c.values["dim"]) for c in task.configs("hidden")}
    assert sizes == {"half": (8, 2048), "double": (32, 8192), "odd_three_quarters": (13, 3073),
                     "tail_plus_one": (17, 4097), "tail_minus_one": (15, 4095), "skew": (12, 5120)}
    relu = task.config("double")
    assert relu.values["model_bytes"] == 2 * 32 * 8192 * 4 and relu.values["model_flops"] == 0


def test_init_sizes_scale_with_the_inputs_and_weights_are_inputs(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "99_linear_gelu")
    sig = task.spec.signature
    assert [t.name for t in sig.inputs] == ["x", "linear_weight", "linear_bias"]
    assert [p.name for p in sig.params] == ["batch_size", "in_features", "out_features"]
    assert sig.outputs[0].shape == ["batch_size", "out_features"]
    double = task.config("double").values
    assert (double["batch_size"], double["in_features"], double["out_features"]) == (128, 512, 384)
    assert double["model_flops"] == 2 * 128 * 512 * 384  # the matmul, from FlopCounterMode


def test_a_number_that_shapes_no_input_stays_fixed(suite: Path) -> None:
    task = load_task(suite / "torch2triton" / "47_sum_reduction_over_a_dimension")
    assert task.spec.signature.outputs[0].shape == ["batch_size", 1, "dim2"]
    assert {c.values["reduce_dim"] for c in task.configs("all")} == {1}
    assert task.config("tail_plus_one").values["dim2"] == 256  # 255 in the problem


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
        init = {"99_linear_gelu": [params.get("in_features"), params.get("out_features")],
                "47_sum_reduction_over_a_dimension": [params.get("reduce_dim")]}.get(slug, [])
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
    rules.write_text('hidden_configs = 2\nmin_hidden_configs = 1\n[sizes]\nkeep = ["in_features"]\n\n'
                     '[[candidates]]\nname = "triple"\nscale = 3.0\n\n[[candidates]]\nname = "wide"\nadd = 64\n')
    folder, _, _ = import_problem(LINEAR, tmp_path / "out", rules=rules)
    task = load_task(folder)
    sizes = {c.name: (c.values["batch_size"], c.values["in_features"], c.values["out_features"])
             for c in task.configs("hidden")}
    assert sizes == {"triple": (192, 256, 576), "wide": (128, 256, 256)}
    assert "rules.toml" in (folder / "hidden.toml").read_text()


def test_bad_rules_and_existing_folders_are_errors_that_say_what_to_do(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[candidates]]\nname = "original"\n')
    with pytest.raises(ImporterError, match="distinct and not 'original'"):
        load_rules(bad)
    assert load_rules(DEFAULT_RULES).candidates
    import_problem(RELU, tmp_path / "out")
    with pytest.raises(ImporterError, match="--force"):
        import_problem(RELU, tmp_path / "out")


def test_a_torch2cuda_import_writes_a_stub_that_compiles(tmp_path: Path) -> None:
    from crucible.toolkit.evaluation import build

    folder, _, _ = import_problem(LINEAR, tmp_path, category="torch2cuda")
    task = load_task(folder)
    assert task.spec.language == "cuda" and task.spec.stub == "stub.cu"
    stub = (folder / "stub.cu").read_text()
    assert ('extern "C" int entry(const float* x, const float* linear_weight, const float* linear_bias, '
            "float* out, int64_t batch_size, int64_t in_features, int64_t out_features, cudaStream_t stream)") in stub
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


def entry(x: torch.Tensor, out: torch.Tensor, *, batch_size: int, dim: int) -> None:
    _relu[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
'''


@pytest.mark.slow  # validation compiles the reference with torch.compile
def test_the_cli_imports_with_a_solution_and_the_task_validates(tmp_path: Path) -> None:
    solution = tmp_path / "relu.py"
    solution.write_text(RELU_SOLUTION)
    env = {**os.environ, "CRUCIBLE_TASKS": str(tmp_path / "suite"), "CRUCIBLE_BACKEND": "cpu"}

    def crucible(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "crucible.harness.cli", *args], capture_output=True,
                              text=True, env=env, timeout=300)

    proc = crucible("import", "kernelbench", str(RELU), "--out", str(tmp_path / "suite"), "--solution", str(solution))
    assert proc.returncode == 0, proc.stderr
    assert "sizes batch_size, dim; fixed none; 6 hidden configs" in proc.stdout
    proc = crucible("tasks", "validate", "torch2triton/19_relu", "--seeds", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stub_rejected" in proc.stdout and "PASS" in proc.stdout
    assert "pass     hidden_configs_differ" in proc.stdout and "pass     baselines_correct" in proc.stdout
    again = crucible("import", "kernelbench", str(RELU), "--out", str(tmp_path / "suite"))
    assert "refused" in again.stdout and "(exists)" in again.stdout and "--force" in again.stdout


# ---------------------------------------------------------------- the failure classes of the first importer

LEVEL2 = PROBLEMS / "level2"


BATCH = pytest.mark.slow  # a whole batch import of tests/fixtures/kernelbench/level2 (~40 s of tracing)


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("batch")
    outcomes = import_batch(sorted(LEVEL2.glob("*.py")), out)
    return out, {Path(o.path).name: o for o in outcomes}


def _task(out: Path, slug: str) -> Task:
    return load_task(out / "torch2triton" / slug)


@BATCH
def test_a_batch_reports_every_refusal_with_its_reason_and_goes_on(batch: tuple[Path, dict]) -> None:
    out, outcomes = batch
    assert outcomes["6_No_Sizes.py"].reason == "no_sizes"
    assert outcomes["7_Broken.py"].reason == "load_error" and "broken on purpose" in outcomes["7_Broken.py"].message
    assert [n for n, o in outcomes.items() if o.status == "imported"] == [
        "1_Conv2d_BiasAdd_square.py", "2_Conv2d_GroupNorm_MaxPool.py", "3_Matmul_Dropout.py", "4_Huge_Scale.py",
        "5_Pairwise_Broadcast.py", "8_Conv2d_Min_BroadcastBias.py"]
    assert (out / "suites.toml").is_file() and "[kernelbench-l2]" in (out / "suites.toml").read_text()
    again = import_batch([LEVEL2 / "3_Matmul_Dropout.py", LEVEL2 / "6_No_Sizes.py"], out)
    assert [o.reason for o in again] == ["exists", "no_sizes"]


@BATCH
def test_equal_sizes_keep_their_own_names_and_a_hidden_config_tells_them_apart(batch: tuple[Path, dict]) -> None:
    out, _ = batch
    task = _task(out, "kb2_1_conv2d_biasadd_square")
    record = json.loads((task.root / "imported.json").read_text())
    assert record["sizes"] == ["batch_size", "in_channels", "out_channels", "height", "width"]
    assert record["fixed"] == ["kernel_size"]
    out_shape = task.spec.signature.outputs[0].shape
    assert out_shape[:2] == ["batch_size", "out_channels"]  # not in_channels, though equal in the problem
    skew = task.config("skew").values
    assert skew["height"] != skew["width"] and skew["in_channels"] != skew["out_channels"]
    visible = task.config("original").values
    assert all(c.values[s] != visible[s] for c in task.configs("hidden") for s in record["sizes"])


@BATCH
def test_a_tuple_init_argument_follows_the_sizes_it_is_built_from(batch: tuple[Path, dict]) -> None:
    out, _ = batch
    task = _task(out, "kb2_1_conv2d_biasadd_square")
    ref = import_file(task.file("reference.py"), "kb_square_reference")
    config = task.config("skew")
    inputs = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(0), torch.device("cpu"))
    assert list(inputs["bias"].shape) == [config.values["out_channels"], 1, 1]
    assert list(inputs["conv_weight"].shape) == [config.values["out_channels"], config.values["in_channels"], 3, 3]
    params = {p.name: config.values[p.name] for p in task.spec.signature.params}
    got = ref.reference(*[inputs[t.name] for t in task.spec.signature.inputs], **params)
    assert list(got.shape) == output_shape(task.spec.signature.outputs[0], config)


@BATCH
def test_kernel_size_group_count_and_pooling_window_stay_fixed(batch: tuple[Path, dict]) -> None:
    out, _ = batch
    task = _task(out, "kb2_2_conv2d_groupnorm_maxpool")
    record = json.loads((task.root / "imported.json").read_text())
    assert set(record["fixed"]) == {"kernel_size", "num_groups", "pool_size"}
    for c in task.configs("all"):
        assert (c.values["kernel_size"], c.values["num_groups"], c.values["pool_size"]) == (3, 4, 8)
    assert len(task.configs("hidden")) >= 4


@BATCH
def test_the_model_runs_in_eval_mode_so_dropout_does_not_make_the_reference_random(batch: tuple[Path, dict]) -> None:
    out, _ = batch
    task = _task(out, "kb2_3_matmul_dropout")
    ref = import_file(task.file("reference.py"), "kb_dropout_reference")
    config = task.config("original")
    inputs = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(1), torch.device("cpu"))
    params = {p.name: config.values[p.name] for p in task.spec.signature.params}
    args = [inputs[t.name] for t in task.spec.signature.inputs]
    first, second = ref.reference(*args, **params), ref.reference(*args, **params)
    assert torch.equal(first, second)
    want = inputs["x"] @ inputs["linear_weight"].T + inputs["linear_bias"]  # no element dropped
    torch.testing.assert_close(first, want)


@BATCH
def test_the_trace_allocates_nothing_and_the_problems_own_shape_stays_visible(batch: tuple[Path, dict]) -> None:
    out, _ = batch  # 4_Huge_Scale's input is 4 TiB: building it for real would have killed the import
    task = _task(out, "kb2_4_huge_scale")
    assert _values(task, "original") == {"dtype": "float32", "rows": 1 << 20, "cols": 1 << 20}
    visible_bytes = task.config("original").values["model_bytes"]
    assert all(c.values["model_bytes"] <= visible_bytes for c in task.configs("hidden"))


def test_hidden_configs_over_the_byte_caps_are_dropped_with_the_reason(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    text = DEFAULT_RULES.read_text().replace("max_output_bytes = 4_294_967_296", "max_output_bytes = 2_000")
    rules.write_text(text)
    folder, _, analysis = import_problem(LEVEL2 / "3_Matmul_Dropout.py", tmp_path / "out", rules=rules)
    assert any(d.startswith("double: outputs need") for d in analysis.dropped)
    assert all(c.values["batch_size"] * c.values["out_features"] * 4 <= 2_000
               for c in load_task(folder).configs("hidden"))


@BATCH
def test_sizes_that_must_stay_equal_move_together(batch: tuple[Path, dict]) -> None:
    out, _ = batch
    task = _task(out, "kb2_5_pairwise_broadcast")
    record = json.loads((task.root / "imported.json").read_text())
    assert record["follows"] == {"input_shape_0": "batch_size"}
    assert all(c.values["input_shape_0"] == c.values["batch_size"] for c in task.configs("all"))
    assert task.spec.signature.outputs[0].shape == [1]


def test_skew_gives_every_size_its_own_scale_even_past_the_end_of_its_list() -> None:
    skew = next(c for c in load_rules(DEFAULT_RULES).candidates if c.name == "skew")
    # A square 2D conv: batch, channels in and out, height and width all 128 in the problem.
    sizes = {name: 128 for name in ("batch_size", "in_channels", "out_channels", "height", "width", "depth")}
    new = candidate_sizes(skew, sizes)
    assert len(set(new.values())) == len(sizes) and 128 not in new.values()


@BATCH
def test_a_broadcast_one_in_a_parameters_shape_stays_fixed(batch: tuple[Path, dict]) -> None:
    out, _ = batch
    record = json.loads((_task(out, "kb2_8_conv2d_min_broadcastbias").root / "imported.json").read_text())
    assert {"bias_shape_0", "bias_shape_1", "bias_shape_2"} <= set(record["fixed"])
    assert "broadcast" in record["why"]["bias_shape_0"]
