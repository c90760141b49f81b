"""TileLang as a kernel language (toolkit/toolchains/tilelang.py) and its torch2tilelang tasks, checked on the CPU.

The parent's build is a syntax check; the compile check imports a module and compiles its kernels for the H200
(sm_90a) on every config with fake tensors, no GPU (nvcc needed). Tests that need TileLang (`pip install
'kernel-crucible[tilelang]'`) skip without it; the rest run everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crucible.toolkit.integrity import LIBRARY_KERNEL
from crucible.toolkit.task import CATEGORY_LANGUAGE, SOURCE_SUFFIX, discover_tasks
from crucible.toolkit.toolchains import BuildTarget, get_toolchain
from crucible.toolkit.toolchains.tilelang import INSTALL_HINT, available, compile_configs
from crucible.toolkit.tripwires import scan_python

TILELANG_TASKS = [t for t in discover_tasks()[0] if t.spec.category == "torch2tilelang"]
needs_tilelang = pytest.mark.skipif(not available(), reason=f"TileLang is not installed: {INSTALL_HINT}")
CPU = BuildTarget(backend="cpu", arch="sm_90a")


def test_tilelang_is_a_registered_python_module_language_whose_stubs_run() -> None:
    chain = get_toolchain("tilelang")
    assert (chain.loader, chain.runs_on_cpu, chain.traced_build, chain.stub_runs) == ("python_module", False,
                                                                                      False, True)
    assert chain.available() is None if available() else "kernel-crucible[tilelang]" in chain.available()
    assert CATEGORY_LANGUAGE["torch2tilelang"] == "tilelang" and SOURCE_SUFFIX["tilelang"] == ".py"


def test_the_parent_build_checks_syntax_without_importing(tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text("import tilelang_that_does_not_exist\ndef entry(x, y):\n    return None\n")
    assert get_toolchain("tilelang").build(tmp_path, "kernel.py", CPU, tmp_path / "out").ok
    (tmp_path / "kernel.py").write_text("def entry(x, y)\n    return None\n")
    result = get_toolchain("tilelang").build(tmp_path, "kernel.py", CPU, tmp_path / "out")
    assert not result.ok and result.diagnostics[0].line == 1


def test_there_are_four_torch2tilelang_tasks_each_with_a_stub_and_an_expert() -> None:
    assert len(TILELANG_TASKS) >= 4
    for task in TILELANG_TASKS:
        assert task.spec.language == "tilelang" and task.spec.stub and task.spec.solution
        assert len(task.configs("hidden")) >= 6, task.id


def test_tilelang_kernel_names_are_the_candidates_own() -> None:
    for name in ("main_kernel", "rmsnorm_kernel", "fused_add_rmsnorm_kernel", "silu_and_mul_kernel", "rope_kernel"):
        assert not LIBRARY_KERNEL.search(name), name


@pytest.mark.parametrize("task", TILELANG_TASKS, ids=lambda t: t.id)
def test_no_tilelang_expert_or_stub_trips_anything(task) -> None:
    for name in (task.spec.solution, task.spec.stub):
        assert scan_python(task.file(name).read_text(), name) == [], f"{task.id}/{name}"


def test_a_torch_call_inside_a_prim_func_is_read_as_tilelang_and_one_in_the_entry_is_not() -> None:
    source = ("import tilelang.language as T\nimport torch\n\n@T.prim_func\ndef main(X: T.Tensor((4,), 'float32')):\n"
              "    X.exp()\n\ndef entry(x, y):\n    torch.exp(x, out=y)\n")
    found = scan_python(source, "kernel.py")
    assert found and all(f.line == 9 for f in found), found


def test_without_tilelang_the_cpu_validation_skips_the_compile_and_says_why(monkeypatch) -> None:
    from crucible.toolkit import validation
    from crucible.toolkit.toolchains import tilelang

    monkeypatch.setattr(tilelang, "available", lambda: False)
    task = TILELANG_TASKS[0]
    check = validation._compile_only(task, task.spec.solution, "cpu", "solution_correct")
    assert check.status == "skipped" and "not installed" in check.message
    assert "kernel-crucible[tilelang]" in check.message
    stub = validation._stub_check(task, "cpu", 1)
    assert stub.status == "skipped" and "kernel-crucible[tilelang]" in stub.message


@needs_tilelang
@pytest.mark.parametrize("file", ["solution", "stub"])
@pytest.mark.parametrize("task", TILELANG_TASKS, ids=lambda t: t.id)
def test_every_tilelang_expert_and_stub_compiles_for_the_h200_on_every_config(task, file: str) -> None:
    name = getattr(task.spec, file)
    result = compile_configs(task, task.root, name)
    assert result.ok, "\n".join(str(d) for d in result.diagnostics) + result.log[-3000:]
    assert result.kernels and all(k.name.endswith("_kernel") for k in result.kernels)
    assert not any(LIBRARY_KERNEL.search(k.name) for k in result.kernels)
    assert all(not k.spill_stores for k in result.kernels if k.spill_stores is not None), result.kernels
    for config in task.configs("all"):
        assert f"{config.name}: compiled" in result.log, config.name


@needs_tilelang
def test_a_module_without_compile_kernels_is_told_the_contract(tmp_path: Path) -> None:
    task = TILELANG_TASKS[0]
    (tmp_path / "kernel.py").write_text("def entry(x, y):\n    return None\n")
    result = compile_configs(task, tmp_path, "kernel.py")
    assert not result.ok and "compile_kernels" in result.diagnostics[0].message
