from pathlib import Path

import pytest

from crucible.toolkit.task import TaskError, evaluate_expr, load_task, output_shape, task_metrics


def test_the_fixture_task_loads_with_its_visible_and_hidden_configs(tiny_task_dir: Path) -> None:
    task = load_task(tiny_task_dir)
    assert task.id == "triton2triton/vadd"
    assert [c.name for c in task.configs("visible")] == ["small", "half"]
    assert [c.name for c in task.configs("hidden")] == ["tail", "big"]
    assert task.config("tail").values["N"] == 17
    assert output_shape(task.spec.signature.outputs[0], task.config("half")) == [4099]
    assert task_metrics(task.spec, task.config("half")) == (2 * 4099, 3 * 4099 * 2)


def test_loading_reports_every_problem_with_its_file_and_field(tiny_task_dir: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    text = toml.read_text().replace('language = "triton"', 'language = "cobol"')
    text = text.replace('bytes = "3*N*itemsize"', 'bytes = "3*M"')
    toml.write_text(text)
    (tiny_task_dir / "hidden.toml").write_text('[[configs]]\nname = "small"\nN = 3\ndtype = "float32"\n')
    (tiny_task_dir / "solution.py").unlink()
    with pytest.raises(TaskError) as err:
        load_task(tiny_task_dir)
    problems = [(p.file, p.field) for p in err.value.problems]
    assert ("task.toml", "language") in problems
    assert ("hidden.toml", "configs") not in problems  # hidden.toml itself is valid
    # Once task.toml is fixed, the other problems surface together.
    toml.write_text(text.replace('"cobol"', '"triton"'))
    with pytest.raises(TaskError) as err:
        load_task(tiny_task_dir)
    found = {(p.file, p.field): p.message for p in err.value.problems}
    assert "file 'solution.py' not found" in found[("task.toml", "solution")]
    assert "also used by visible configs" in found[("hidden.toml", "configs")]
    assert "unknown name 'M'" in found[("task.toml", "configs[small]")]
    assert "problem(s)" in str(err.value) and "Traceback" not in str(err.value)


def test_a_toml_syntax_error_is_a_problem_not_a_traceback(tiny_task_dir: Path) -> None:
    (tiny_task_dir / "hidden.toml").write_text("[[configs]\nname=")
    with pytest.raises(TaskError) as err:
        load_task(tiny_task_dir)
    assert err.value.problems[0].file == "hidden.toml"
    assert "not valid TOML" in err.value.problems[0].message


def test_a_config_missing_a_signature_param_is_reported(tiny_task_dir: Path) -> None:
    (tiny_task_dir / "hidden.toml").write_text('[[configs]]\nname = "nosize"\ndtype = "float32"\n')
    with pytest.raises(TaskError) as err:
        load_task(tiny_task_dir)
    assert any(p.field == "configs[nosize]" for p in err.value.problems)


def test_overriding_a_tolerance_needs_a_reason(tiny_task_dir: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text() + "\n[tolerance]\nfloat32 = { atol = 1e-3, rtol = 1e-3 }\n")
    with pytest.raises(TaskError) as err:
        load_task(tiny_task_dir)
    assert any(p.field == "tolerance" and "reason" in p.message for p in err.value.problems)


def test_expressions_allow_arithmetic_over_config_values_and_nothing_else() -> None:
    assert evaluate_expr("2*M*N + cdiv(N, 128)", {"M": 3, "N": 256}) == 2 * 3 * 256 + 2
    with pytest.raises(ValueError, match="only numbers"):
        evaluate_expr("__import__('os').system('true')", {})


# ---------------------------------------------------------------- [hardware]: the GPU a task's scoring needs


def hip_task_dir(tmp_path: Path, hardware: str) -> Path:
    """A copy of a HIP task of the suite with `hardware` appended to its task.toml."""
    import shutil

    from crucible.toolkit.task import TASKS_ROOT

    folder = tmp_path / "gemv_fp32"
    shutil.copytree(TASKS_ROOT / "hip2hip" / "gemv_fp32", folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text() + "\n" + hardware)
    return folder


def hardware_problems(folder: Path) -> dict[str, str]:
    with pytest.raises(TaskError) as err:
        load_task(folder)
    return {p.field: p.message for p in err.value.problems}


def test_a_task_asks_for_any_hardware_unless_it_says_otherwise(tmp_path: Path, tiny_task_dir: Path) -> None:
    assert load_task(tiny_task_dir).spec.hardware.vendor == "any"
    assert load_task(tiny_task_dir).spec.hardware.fallback is None
    amd = load_task(hip_task_dir(tmp_path, '[hardware]\nvendor = "amd"\nfallback = "hip-on-cuda"\n')).spec.hardware
    assert (amd.vendor, amd.fallback) == ("amd", "hip-on-cuda")
    strict = load_task(hip_task_dir(tmp_path / "b", '[hardware]\nvendor = "amd"\n')).spec.hardware
    assert (strict.vendor, strict.fallback) == ("amd", None)


@pytest.mark.parametrize(("hardware", "field", "says"), [
    ('[hardware]\nvendor = "intel"\n', "hardware.vendor",
     """vendor = 'intel' is not a GPU vendor crucible scores on; write vendor = "amd\""""),
    ('[hardware]\nvendor = "AMD"\n', "hardware.vendor", 'vendor = "nvidia" (NVIDIA GPUs only), or leave it out'),
    ('[hardware]\nvendor = "amd"\nfallback = "cpu"\n', "hardware.fallback",
     """fallback = 'cpu' is not a fallback crucible knows; write fallback = "hip-on-cuda\""""),
    ('[hardware]\nfallback = "hip-on-cuda"\n', "hardware",
     "with vendor = 'any' there is nothing to fall back from: write vendor = \"amd\" with it"),
    ('[hardware]\nvendor = "amd"\ngpus = 2\n', "hardware.gpus", "Extra inputs are not permitted"),
])
def test_a_bad_hardware_requirement_says_what_is_wrong_and_what_to_write(
        tmp_path: Path, hardware: str, field: str, says: str) -> None:
    problems = hardware_problems(hip_task_dir(tmp_path, hardware))
    assert field in problems, problems
    assert says in problems[field]


def test_a_requirement_that_does_not_fit_the_tasks_language_is_refused(tiny_task_dir: Path, tmp_path: Path) -> None:
    toml = tiny_task_dir / "task.toml"
    toml.write_text(toml.read_text() + '\n[hardware]\nvendor = "amd"\nfallback = "hip-on-cuda"\n')
    problems = hardware_problems(tiny_task_dir)
    assert 'fallback = "hip-on-cuda" is for HIP tasks; this task is triton: drop the fallback' in problems[""]
    # a Triton task may ask for AMD hardware (Triton runs there); a CUDA task may not
    toml.write_text(toml.read_text().replace('fallback = "hip-on-cuda"\n', ""))
    assert load_task(tiny_task_dir).spec.hardware.vendor == "amd"
    import shutil

    from crucible.toolkit.task import TASKS_ROOT

    cuda = tmp_path / "cuda_task"
    shutil.copytree(TASKS_ROOT / "cuda2cuda" / "transpose", cuda)
    (cuda / "task.toml").write_text((cuda / "task.toml").read_text() + '\n[hardware]\nvendor = "amd"\n')
    assert 'vendor = "amd" cannot score a CUDA task' in hardware_problems(cuda)[""]
