"""What the Python kernel DSLs (CuTe DSL, TileLang) share: a candidate module that defines
`compile_kernels(*inputs, *outputs, **params)` beside its entry, compiled for a GPU arch on a machine without
one, in a subprocess, per config on fake tensors; each kernel's registers and spills from its PTX.

    compile_configs(...)     parent: run `python -c "from <module> import main; main()"` with the DSL's
                             environment, read result.json and every PTX written under dump/
    check(payload, ...)      subprocess: import the module, per config fake_tensors -> compile_kernels

Importing the module runs it, so this is for trusted files (the task's stub and expert solution).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import BuildResult, BuildTarget, Diagnostic, KernelResources
from .cuda import parse_ptxas, trim_log

if TYPE_CHECKING:
    from ..task import Task

CONTRACT = "compile_kernels"
"""The module-level function a DSL candidate defines beside its entry (tasks/README.md)."""


def compile_configs(task: Task, source_dir: Path, file: str, *, language: str, module: str, installed: bool,
                    missing: str, env: Callable[[Path], dict[str, str]], arch: str, which: str,
                    timeout_s: float) -> BuildResult:
    """Import `file` in a subprocess (`module`'s main) and compile its kernels for `arch` on each config of
    `which`. `env(tmp)`: the DSL's variables for a private temporary folder (its PTX goes to tmp/dump).
    Not `installed`: ok=False with `missing` as the diagnostic."""
    start = time.perf_counter()
    source_dir = Path(source_dir).resolve()
    target = BuildTarget(backend="cuda", arch=arch)
    command = [sys.executable, "-c", f"from {module} import main; main()"]

    def result(ok: bool, kernels: list[KernelResources], diagnostics: list[Diagnostic], log: str) -> BuildResult:
        return BuildResult(ok=ok, language=language, target=target, diagnostics=diagnostics, kernels=kernels,
                           log=trim_log(log), artifact=str(source_dir / file),
                           seconds=time.perf_counter() - start, command=command)

    if not installed:
        return result(False, [], [Diagnostic(file=file, message=missing)], "")
    with tempfile.TemporaryDirectory(prefix=f"crucible-{language}-") as tmp:
        dump = Path(tmp) / "dump"
        dump.mkdir()
        payload = {"task_root": str(task.root), "source_dir": str(source_dir), "file": file, "which": which,
                   "out": str(Path(tmp) / "result.json"), "dump": str(dump)}
        try:
            proc = subprocess.run([*command, json.dumps(payload)], capture_output=True, text=True,
                                  env=env(Path(tmp)), timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            return result(False, [], [Diagnostic(file=file, message=f"compiling took more than {timeout_s:g} s")], "")
        log = proc.stderr + proc.stdout
        try:
            found = json.loads((Path(tmp) / "result.json").read_text())
        except (OSError, ValueError):
            return result(False, [], [Diagnostic(file=file, message=f"the compile check died (exit {proc.returncode})"
                                                 f": {trim_log(log, 2000)}")], log)
        diagnostics = [Diagnostic.model_validate(d) for d in found["diagnostics"]]
        kernels = [k for p in sorted(dump.rglob("*.ptx")) for k in _resources(p, arch)]
    if not kernels and not diagnostics:
        diagnostics.append(Diagnostic(file=file, message=f"{CONTRACT}() compiled no kernel: it must compile every "
                                      "kernel the entry launches"))
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

    ref = import_file(task.file("reference.py"), f"crucible_dsl_ref_{task.id.replace('/', '_')}")
    with FakeTensorMode():
        gen = torch.Generator(device="cpu")
        made = ref.make_inputs(dict(config.values), gen, torch.device("cpu"))
        inputs = [made[t.name].contiguous() for t in task.spec.signature.inputs]
        outputs = [torch.empty(output_shape(o, config), dtype=getattr(torch, resolve_dtype(o.dtype, config)))
                   for o in task.spec.signature.outputs]
    return inputs, outputs, {p.name: config.values[p.name] for p in task.spec.signature.params}


def check(payload: dict[str, Any], dsl: str, prepare: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Import the candidate and call its compile_kernels on every config's fake tensors; each failure a
    diagnostic naming the config. `prepare(dump)` runs first (a DSL that must be told where its PTX goes)."""
    from ..task import load_task
    from .triton import _diagnostic_from_exception, import_candidate

    task = load_task(Path(payload["task_root"]))
    source_dir, file = Path(payload["source_dir"]), str(payload["file"])
    log: list[str] = []
    try:
        if prepare is not None:
            prepare(Path(payload["dump"]))
        module = import_candidate(source_dir / file)
    except Exception as e:  # noqa: BLE001 - trusted code, but its failure is a diagnostic, not a crash
        return {"diagnostics": [_diagnostic_from_exception(e, source_dir, file).model_dump()], "log": log}
    compile_kernels = getattr(module, CONTRACT, None)
    if not callable(compile_kernels):
        return {"diagnostics": [Diagnostic(file=file, message=f"{file} defines no function `{CONTRACT}`: a {dsl} "
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


def run(dsl: str, prepare: Callable[[Path], None] | None = None) -> None:
    """The subprocess's main: argv[1] is the payload (JSON); the result goes to the file it names."""
    payload = json.loads(sys.argv[1])
    Path(payload["out"]).write_text(json.dumps(check(payload, dsl, prepare)))
