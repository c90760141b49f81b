"""The task author's own checks of the suite's first tasks, on the CPU.

Triton kernels run in the Triton interpreter (TRITON_INTERPRET=1, set in a fresh interpreter before triton
is imported); CUDA sources are compiled with nvcc when it is installed, nothing runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from crucible.toolkit.task import Task, load_task, resolve_dtype

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tasks"
TRITON_TASKS = ["triton2triton/softmax", "torch2triton/silu_and_mul"]
CUDA_TASKS = ["cuda2cuda/rmsnorm"]
ALL_TASKS = TRITON_TASKS + CUDA_TASKS

# For each Triton task: the visible config small enough for the interpreter, a hidden tail config, and
# extra shapes that reach code paths no small config reaches (softmax's online path for long rows).
INTERPRETER_CASES = {
    "triton2triton/softmax": {"visible": "small_fp32", "hidden": "odd_fp16",
                              "extra": [{"name": "online_path", "dtype": "float16", "M": 3, "N": 33001}]},
    "torch2triton/silu_and_mul": {"visible": "small_fp32", "hidden": "odd_fp16", "extra": []},
}

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _task(task_id: str) -> Task:
    return load_task(TASKS / task_id)


def _reference(task: Task) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"reference_{task.id.replace('/', '_')}", task.file("reference.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _smallest_config(task: Task):
    def elements(config) -> int:
        n = 1
        for key in ("M", "N", "T", "D"):
            n *= int(config.values.get(key, 1))
        return n

    return min(task.configs("visible"), key=elements)


@pytest.mark.parametrize("task_id", ALL_TASKS)
def test_each_task_loads_with_visible_and_hidden_configs(task_id: str) -> None:
    task = _task(task_id)
    assert task.id == task_id
    assert 2 <= len(task.configs("visible")) <= 4
    assert len(task.configs("hidden")) >= 6
    assert task.file("PROMPT.md").read_text().strip()
    starter = task.spec.stub if task.spec.is_torch_task else task.spec.baseline
    assert starter is not None and task.file(starter).is_file()
    assert task.file(task.spec.solution).is_file()


@pytest.mark.parametrize("task_id", ALL_TASKS)
def test_make_inputs_is_deterministic_per_seed_and_not_near_constant(task_id: str) -> None:
    task = _task(task_id)
    ref = _reference(task)
    config = _smallest_config(task)
    values = dict(config.values)

    def draw(seed: int) -> dict[str, torch.Tensor]:
        return ref.make_inputs(values, torch.Generator().manual_seed(seed), torch.device("cpu"))

    first, again, other = draw(0), draw(0), draw(1)
    assert list(first) == [t.name for t in task.spec.signature.inputs]
    for spec in task.spec.signature.inputs:
        x = first[spec.name]
        assert x.dtype == DTYPES[resolve_dtype(spec.dtype, config)]
        assert torch.equal(x, again[spec.name]), "same seed, same inputs"
        assert not torch.equal(x, other[spec.name]), "another seed, other inputs"
        xf = x.float()
        assert xf.std() > 0.1 * (xf.abs().mean() + 1e-6), f"{spec.name} is near-constant"
    params = {p.name: values[p.name] for p in task.spec.signature.params}
    out = ref.reference(*first.values(), **params)
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(task.spec.signature.outputs)
    for o in outs:
        assert torch.isfinite(o.float()).all()
        assert o.float().std() > 1e-3, "reference output is near-constant"


# The checker runs in a fresh interpreter so TRITON_INTERPRET=1 is set before triton is imported.
_CHECK = r"""
import importlib.util, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from crucible.toolkit.task import Config, load_task, output_shape, resolve_dtype

root, config_names, extra, seeds = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), (0, 1)
task = load_task(root)
DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

def module(name):
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), task.file(name))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m

ref = module("reference.py")
files = [f for f in (task.spec.baseline, task.spec.solution) if f]
entries = {f: getattr(module(f), task.spec.entry) for f in files}
configs = [task.config(n) for n in config_names] + [Config.model_validate(e) for e in extra]
results = []
for config in configs:
    values = dict(config.values)
    params = {p.name: values[p.name] for p in task.spec.signature.params}
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        inputs = ref.make_inputs(values, gen, torch.device("cpu"))
        for spec in task.spec.signature.inputs:  # the runtime's random offset and scale
            if spec.perturb:
                x = inputs[spec.name]
                scale = 0.5 + 1.5 * torch.rand((), generator=gen).item()
                offset = torch.randn((), generator=gen).item()
                inputs[spec.name] = (x.float() * scale + offset).to(x.dtype)
        args = list(inputs.values())
        want = ref.reference(*[a.clone() for a in args], **params)
        want = want if isinstance(want, tuple) else (want,)
        for name, entry in entries.items():
            outs = [torch.full(output_shape(o, config), float("nan"), dtype=DT[resolve_dtype(o.dtype, config)])
                    for o in task.spec.signature.outputs]
            before = [a.clone() for a in args]
            returned = entry(*args, *outs, **params)
            worst, bad = 0.0, 0
            for out, ref_out in zip(outs, want):
                tol = task.spec.tolerance.for_dtype(str(out.dtype).removeprefix("torch."))
                diff = (out.float() - ref_out.float()).abs()
                limit = tol.atol + tol.rtol * ref_out.float().abs()
                bad += int((~(diff <= limit)).sum())  # NaN (an unwritten element) counts as bad
                worst = max(worst, float(diff.nan_to_num(float("inf")).max()))
            results.append({"file": name, "config": config.name, "seed": seed, "bad": bad, "worst": worst,
                            "returned_none": returned is None,
                            "inputs_unchanged": all(torch.equal(a, b) for a, b in zip(args, before))})
if task.spec.stub:
    stub = module(task.spec.stub)
    config = task.config(config_names[0])
    inputs = ref.make_inputs(dict(config.values), torch.Generator().manual_seed(0), torch.device("cpu"))
    outs = [torch.full(output_shape(o, config), float("nan"), dtype=DT[resolve_dtype(o.dtype, config)])
            for o in task.spec.signature.outputs]
    try:
        getattr(stub, task.spec.entry)(*inputs.values(), *outs)
        results.append({"file": task.spec.stub, "raised": None})
    except NotImplementedError:
        results.append({"file": task.spec.stub, "raised": "NotImplementedError"})
print("RESULTS " + json.dumps(results))
"""


@pytest.mark.parametrize("task_id", TRITON_TASKS)
def test_triton_baseline_and_solution_match_the_reference_in_the_interpreter(task_id: str) -> None:
    pytest.importorskip("numpy", reason="the Triton interpreter needs numpy")
    task = _task(task_id)
    case = INTERPRETER_CASES[task_id]
    assert case["visible"] in {c.name for c in task.configs("visible")}
    assert case["hidden"] in {c.name for c in task.configs("hidden")}
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-c", _CHECK, str(task.root), json.dumps([case["visible"], case["hidden"]]),
         json.dumps(case["extra"])],
        capture_output=True, text=True, env=env, timeout=240, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS "))
    results = json.loads(line.removeprefix("RESULTS "))
    runs = [r for r in results if "bad" in r]
    files = {f for f in (task.spec.baseline, task.spec.solution) if f}
    n_configs = 2 + len(case["extra"])
    assert len(runs) == len(files) * n_configs * 2
    for r in runs:
        assert r["bad"] == 0, f"{r['file']} on {r['config']} seed {r['seed']}: {r['bad']} elements off, worst {r['worst']}"
        assert r["returned_none"], f"{r['file']} should return None"
        assert r["inputs_unchanged"], f"{r['file']} modified its inputs"
    if task.spec.stub:
        assert {"file": task.spec.stub, "raised": "NotImplementedError"} in results


@pytest.mark.parametrize("task_id", CUDA_TASKS)
def test_cuda_baseline_and_solution_compile_for_sm90_and_export_the_entry(task_id: str, tmp_path: Path) -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    task = _task(task_id)
    builds = {}
    for name in (task.spec.baseline, task.spec.solution):
        assert name is not None
        lib = tmp_path / (Path(name).stem + ".so")
        builds[name] = (lib, subprocess.Popen(
            ["nvcc", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", "-o", str(lib), str(task.file(name))],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for name, (lib, proc) in builds.items():
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"{name} does not compile:\n{out}"
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                                 check=True).stdout
        assert any(line.split()[-2:] == ["T", task.spec.entry] for line in symbols.splitlines()), (
            f"{name} does not export `{task.spec.entry}`")


def test_cuda_entry_takes_the_signature_params_in_order() -> None:
    """The C entry of every CUDA file lists inputs, outputs, params (int64_t / double), then the stream."""
    task = _task("cuda2cuda/rmsnorm")
    c_type = {"int64": "int64_t", "int32": "int32_t", "float64": "double", "float32": "float"}
    params = ", ".join(f"{c_type[p.type]} {p.name}" for p in task.spec.signature.params)
    expected = (f'extern "C" int entry(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,'
                f" {params}, cudaStream_t stream)")
    for name in (task.spec.baseline, task.spec.solution):
        assert name is not None
        source = " ".join(task.file(name).read_text().split())
        assert expected in source, f"{name} lacks: {expected}"
