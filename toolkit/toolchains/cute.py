"""CuTe DSL (`nvidia-cutlass-dsl`, `import cutlass.cute as cute`): a candidate is a Python module, like Triton's.

    parent (trusted)                     compile check (a subprocess; no GPU needed)
    ─────────────────                    ────────────────────────────────────────────────────────────────
    CuteToolchain.build                  compile_configs(task, source_dir, file)
      syntax check of every .py            cute.main() in a fresh interpreter
      (ast only, no import: Triton's)        import the module; per config, fake tensors (shapes, strides,
                                             dtypes, no memory) from the task's make_inputs and signature;
                                             module.compile_kernels(*inputs, *outputs, **params)
                                             under CUTE_DSL_ARCH=sm_90a, CUTE_DSL_KEEP=ptx
                                           -> the kernels' names, and registers/spills from `ptxas -v`

The candidate's contract (tasks/README.md, "CuTe DSL"): besides `entry(*inputs, *outputs, **params)` the
module defines `compile_kernels(*inputs, *outputs, **params)`, which compiles (`cute.compile`) every kernel
the entry would launch for those shapes and dtypes, reading nothing of the tensors but their shapes,
strides and dtypes, and keeps them in a cache keyed on those; the entry looks its kernels up through it and
launches them on the current stream. So a kernel compiles for the H200 on a machine without a GPU.

On a GPU the runner imports the module and calls `entry` (loader `python_module`), which compiles on first
use inside the runner; CuTe's file cache goes to the runner's TMPDIR (its private scratch).

Importing the module runs candidate code, so compile_configs is for trusted files (the task's stub and
expert solution, in `crucible tasks validate` and the tests), never an agent's workspace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import BuildResult, BuildTarget, Diagnostic, KernelResources
from .cuda import parse_ptxas, trim_log
from .triton import TritonToolchain

if TYPE_CHECKING:
    from ..task import Task

PACKAGE = "nvidia-cutlass-dsl"
INSTALL_HINT = "pip install 'kernel-crucible[cute]' (nvidia-cutlass-dsl==4.8.1)"
CONTRACT = "compile_kernels"
"""The module-level function a CuTe candidate defines beside its entry (see the module docstring)."""
OWN_KERNEL = re.compile(r"^kernel_cutlass_")
"""How the CuTe DSL names the kernels it generates (`kernel_cutlass_<function>_<argument types>`): the
candidate's own, unlike CUTLASS's C++ kernels in libraries (`cutlass::Kernel...`)."""


class CuteToolchain(TritonToolchain):
    """Parent side: Triton's syntax check (no import); compile_configs compiles for the H200 offline."""

    language = "cute"
    loader = "python_module"
    runs_on_cpu = False
    traced_build = False
    stub_runs = True
    """A CuTe stub is a correct, naive kernel: the DSL's plumbing (compile_kernels, pointers, the stream)."""

    def available(self) -> str | None:
        return None if available() else f"the CuTe DSL is not installed here ({INSTALL_HINT})"

    def compile_configs(self, task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a",
                        which: str = "all", timeout_s: float = 600) -> BuildResult:
        return compile_configs(task, source_dir, file, arch=arch, which=which, timeout_s=timeout_s)


def available() -> bool:
    """Is the CuTe DSL importable here (without importing it: that takes seconds)?"""
    return importlib.util.find_spec("cutlass") is not None and importlib.util.find_spec("cuda") is not None


def compile_configs(task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a", which: str = "all",
                    timeout_s: float = 600) -> BuildResult:
    """Import `file` (trusted code) in a subprocess and compile its kernels for `arch` on each config of
    `which` (visible, hidden, all), without a GPU. Not installed: ok=False with a diagnostic saying so."""
    start = time.perf_counter()
    source_dir = Path(source_dir).resolve()
    target = BuildTarget(backend="cuda", arch=arch)
    command = [sys.executable, "-c", "from crucible.toolkit.toolchains.cute import main; main()"]

    def result(ok: bool, kernels: list[KernelResources], diagnostics: list[Diagnostic], log: str) -> BuildResult:
        return BuildResult(ok=ok, language="cute", target=target, diagnostics=diagnostics, kernels=kernels,
                           log=trim_log(log), artifact=str(source_dir / file),
                           seconds=time.perf_counter() - start, command=command)

    if not available():
        return result(False, [], [Diagnostic(file=file, message=f"the CuTe DSL is not installed here: "
                                             f"{INSTALL_HINT}")], "")
    with tempfile.TemporaryDirectory(prefix="crucible-cute-") as tmp:
        payload = {"task_root": str(task.root), "source_dir": str(source_dir), "file": file, "which": which,
                   "out": str(Path(tmp) / "result.json")}
        env = {**os.environ, "CUTE_DSL_ARCH": arch, "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(Path(tmp) / "dump"),
               "CUTE_DSL_CACHE_DIR": str(Path(tmp) / "cache"), "CUDA_VISIBLE_DEVICES": "", "TMPDIR": tmp}
        (Path(tmp) / "dump").mkdir()
        try:
            proc = subprocess.run([*command, json.dumps(payload)], capture_output=True, text=True, env=env,
                                  timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            return result(False, [], [Diagnostic(file=file, message=f"compiling took more than {timeout_s:g} s")], "")
        log = proc.stderr + proc.stdout
        try:
            found = json.loads((Path(tmp) / "result.json").read_text())
        except (OSError, ValueError):
            return result(False, [], [Diagnostic(file=file, message=f"the compile check died (exit {proc.returncode})"
                                                 f": {trim_log(log, 2000)}")], log)
        diagnostics = [Diagnostic.model_validate(d) for d in found["diagnostics"]]
        kernels = [_resources(p, arch) for p in sorted((Path(tmp) / "dump").rglob("*.ptx"))]
    kernels = [k for group in kernels for k in group]
    if not kernels and not diagnostics:
        diagnostics.append(Diagnostic(file=file, message=f"{CONTRACT}() compiled no kernel: it must cute.compile "
                                      "every kernel the entry launches"))
    log += "\n".join(found["log"])
    return result(not any(d.severity == "error" for d in diagnostics), kernels, diagnostics, log)


def _resources(ptx: Path, arch: str) -> list[KernelResources]:
    """Registers and spills of each kernel of one PTX file, by `ptxas -v` (names only without a ptxas)."""
    text = ptx.read_text(errors="replace")
    names = re.findall(r"^\.visible \.entry (\w+)\(", text, re.M)
    ptxas = shutil.which("ptxas") or _triton_ptxas()
    if ptxas is None:
        return [KernelResources(name=n) for n in names]
    try:
        proc = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(ptx), "-o", str(ptx.with_suffix(".o"))],
                              capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return [KernelResources(name=n) for n in names]
    found = {k.name: k for k in parse_ptxas(proc.stderr + proc.stdout)}
    return [found.get(n, KernelResources(name=n)) for n in names]


def _triton_ptxas() -> str | None:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return str(get_ptxas(90).path)
    except Exception:  # noqa: BLE001 - no Triton, or one without a bundled ptxas: names only
        return None


# --- the compile check's subprocess ---------------------------------------------------------------


def fake_tensors(task: Task, config: Any) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """The inputs (from the task's make_inputs), outputs (from the signature) and params of one config as
    fake tensors: shapes, strides and dtypes without memory, made in no time whatever the config's size."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ..runner.loading import import_file
    from ..task import output_shape, resolve_dtype

    ref = import_file(task.file("reference.py"), f"crucible_cute_ref_{task.id.replace('/', '_')}")
    with FakeTensorMode():
        gen = torch.Generator(device="cpu")
        made = ref.make_inputs(dict(config.values), gen, torch.device("cpu"))
        inputs = [made[t.name].contiguous() for t in task.spec.signature.inputs]
        outputs = [torch.empty(output_shape(o, config), dtype=getattr(torch, resolve_dtype(o.dtype, config)))
                   for o in task.spec.signature.outputs]
    return inputs, outputs, {p.name: config.values[p.name] for p in task.spec.signature.params}


def _check(payload: dict[str, Any]) -> dict[str, Any]:
    from ..task import load_task
    from .triton import _diagnostic_from_exception, import_candidate

    task = load_task(Path(payload["task_root"]))
    source_dir, file = Path(payload["source_dir"]), str(payload["file"])
    log: list[str] = []
    try:
        module = import_candidate(source_dir / file)
    except Exception as e:  # noqa: BLE001 - trusted code, but its failure is a diagnostic, not a crash
        return {"diagnostics": [_diagnostic_from_exception(e, source_dir, file).model_dump()], "log": log}
    compile_kernels = getattr(module, CONTRACT, None)
    if not callable(compile_kernels):
        return {"diagnostics": [Diagnostic(file=file, message=f"{file} defines no function `{CONTRACT}`: a CuTe "
                                           "module compiles its kernels through it (tasks/README.md)").model_dump()],
                "log": log}
    diagnostics = []
    for config in task.configs(payload["which"]):
        started = time.perf_counter()
        try:
            inputs, outputs, params = fake_tensors(task, config)
            compile_kernels(*inputs, *outputs, **params)
        except Exception as e:  # noqa: BLE001 - as above
            d = _diagnostic_from_exception(e, source_dir, file)
            diagnostics.append(d.model_copy(update={"message": f"config {config.name}: {d.message}"}).model_dump())
            continue
        log.append(f"{config.name}: compiled in {time.perf_counter() - started:.1f} s")
    return {"diagnostics": diagnostics, "log": log}


def main() -> None:
    """The subprocess: argv[1] is the payload (JSON); the result goes to the file it names."""
    payload = json.loads(sys.argv[1])
    Path(payload["out"]).write_text(json.dumps(_check(payload)))
