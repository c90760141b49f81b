"""The CuTe DSL as a kernel language (toolkit/toolchains/cute.py) and its torch2cute tasks, checked on the CPU.

The parent's build is a syntax check; the compile check imports a module and compiles its kernels for the H200
(sm_90a) on every config with fake tensors, no GPU. Tests that need the DSL (`pip install
'kernel-crucible[cute]'`) skip without it; the rest run everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.toolkit.integrity import LIBRARY_KERNEL
from crucible.toolkit.task import CATEGORY_LANGUAGE, SOURCE_SUFFIX, discover_tasks, load_task
from crucible.toolkit.toolchains import BuildTarget, get_toolchain
from crucible.toolkit.toolchains.cute import INSTALL_HINT, available, compile_configs, fake_tensors
from crucible.toolkit.tripwires import scan_python

ROOT = Path(__file__).resolve().parent.parent
CUTE_TASKS = [t for t in discover_tasks()[0] if t.spec.category == "torch2cute"]
needs_dsl = pytest.mark.skipif(not available(), reason=f"the CuTe DSL is not installed: {INSTALL_HINT}")
CPU = BuildTarget(backend="cpu", arch="sm_90a")


def test_cute_is_a_registered_python_module_language_that_needs_a_gpu() -> None:
    chain = get_toolchain("cute")
    assert (chain.loader, chain.runs_on_cpu, chain.traced_build, chain.stub_runs) == ("python_module", False, False,
                                                                                      True)
    assert chain.available() is None if available() else INSTALL_HINT in chain.available()
    assert CATEGORY_LANGUAGE["torch2cute"] == "cute" and SOURCE_SUFFIX["cute"] == ".py"


def test_the_parent_build_checks_syntax_without_importing(tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text("import cutlass_that_does_not_exist\ndef entry(x, y):\n    return None\n")
    assert get_toolchain("cute").build(tmp_path, "kernel.py", CPU, tmp_path / "out").ok
    (tmp_path / "kernel.py").write_text("def entry(x, y)\n    return None\n")
    result = get_toolchain("cute").build(tmp_path, "kernel.py", CPU, tmp_path / "out")
    assert not result.ok and result.diagnostics[0].line == 1


def test_there_are_at_least_four_torch2cute_tasks_each_with_a_stub_and_an_expert() -> None:
    assert len(CUTE_TASKS) >= 4
    for task in CUTE_TASKS:
        assert task.spec.language == "cute" and task.spec.stub and task.spec.solution
        assert len(task.configs("hidden")) >= 6, task.id


def test_cute_generated_kernels_are_the_candidates_own_and_cutlass_library_kernels_are_not() -> None:
    assert not LIBRARY_KERNEL.search("kernel_cutlass__rmsnorm_rows_tensorptrbf16gmemalign16o2048_0")
    assert LIBRARY_KERNEL.search("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16>(Params)")
    assert LIBRARY_KERNEL.search("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cutlass")


@pytest.mark.parametrize("task", CUTE_TASKS, ids=lambda t: t.id)
def test_no_cute_expert_or_stub_trips_anything(task) -> None:
    for name in (task.spec.solution, task.spec.stub):
        assert scan_python(task.file(name).read_text(), name) == [], f"{task.id}/{name}"


@pytest.mark.parametrize("task", CUTE_TASKS, ids=lambda t: t.id)
def test_fake_inputs_have_the_shapes_of_real_ones_without_their_memory(task) -> None:
    import torch

    config = max(task.configs("all"), key=lambda c: sum(v for v in c.values.values() if isinstance(v, int)))
    inputs, outputs, params = fake_tensors(task, config)
    assert [t.name for t in task.spec.signature.params] == list(params)
    assert all(isinstance(t, torch.Tensor) and t.is_contiguous() for t in inputs + outputs)


@needs_dsl
@pytest.mark.parametrize("file", ["solution", "stub"])
@pytest.mark.parametrize("task", CUTE_TASKS, ids=lambda t: t.id)
def test_every_cute_expert_and_stub_compiles_for_the_h200_on_every_config(task, file: str) -> None:
    name = getattr(task.spec, file)
    result = compile_configs(task, task.root, name)
    assert result.ok, "\n".join(str(d) for d in result.diagnostics) + result.log[-3000:]
    assert result.kernels and all(k.name.startswith("kernel_cutlass_") for k in result.kernels)
    assert not any(LIBRARY_KERNEL.search(k.name) for k in result.kernels)
    assert all(not k.spill_stores for k in result.kernels if k.spill_stores is not None), result.kernels
    for config in task.configs("all"):
        assert f"{config.name}: compiled" in result.log, config.name


@needs_dsl
def test_a_kernel_that_does_not_compile_is_a_diagnostic_naming_the_config(tmp_path: Path) -> None:
    task = load_task(ROOT / "tasks/torch2cute/silu_and_mul")
    source = task.file("solution.py").read_text().replace("mY[row, col, None].store(y.to(mY.element_type))",
                                                          "mY[row, col, None].store(y.to(mY.element_type), 1, 2)")
    (tmp_path / "kernel.py").write_text(source)
    result = compile_configs(task, tmp_path, "kernel.py", which="visible")
    assert not result.ok and result.diagnostics
    assert result.diagnostics[0].message.startswith("config ")


@needs_dsl
def test_a_module_without_compile_kernels_is_told_the_contract(tmp_path: Path) -> None:
    task = load_task(ROOT / "tasks/torch2cute/silu_and_mul")
    (tmp_path / "kernel.py").write_text("def entry(x, y):\n    return None\n")
    result = compile_configs(task, tmp_path, "kernel.py")
    assert not result.ok and "compile_kernels" in result.diagnostics[0].message


def test_without_the_dsl_the_cpu_validation_skips_the_compile_and_says_why(monkeypatch) -> None:
    from crucible.toolkit import validation
    from crucible.toolkit.toolchains import cute

    monkeypatch.setattr(cute, "available", lambda: False)
    check = validation._compile_only(CUTE_TASKS[0], CUTE_TASKS[0].spec.solution, "cpu", "solution_correct")
    assert check.status == "skipped" and "not installed" in check.message and "kernel-crucible[cute]" in check.message
