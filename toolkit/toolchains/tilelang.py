"""TileLang (`tilelang`, `import tilelang.language as T`): a candidate is a Python module, like Triton's and CuTe's.

    parent (trusted)                     compile check (a subprocess; no GPU needed, nvcc needed)
    ─────────────────                    ────────────────────────────────────────────────────────────────
    TileLangToolchain.build              compile_configs(task, source_dir, file)
      syntax check of every .py            main() in a fresh interpreter, TILELANG_DEFAULT_TARGET = sm_90a,
      (ast only, no import: Triton's)      TILELANG_CACHE_DIR fresh: nvcc's CUDA -> cubin is watched and each
                                           kernel's PTX kept; per config, fake tensors (cute.fake_tensors),
                                           module.compile_kernels(*inputs, *outputs, **params)
                                         -> the kernels' names, and registers/spills from `ptxas -v`

The candidate's contract (tasks/README.md, "TileLang") is CuTe's: besides `entry(*inputs, *outputs, **params)`
the module defines `compile_kernels(*inputs, *outputs, **params)`, which compiles (`tilelang.compile`, with
no target: the environment's default) every kernel the entry would launch for those shapes and dtypes,
reading nothing of the tensors but their shapes, strides and dtypes, and caches them keyed on those; the
entry gets its kernels through it and calls them with the tensors (TVM-FFI launches on PyTorch's current
stream). TileLang names a kernel after its `@T.prim_func`: `<name>_kernel` (`main_kernel` for `def main`).

On a GPU the runner imports the module and calls `entry` (loader `python_module`); kernels compile on first
use inside the runner (nvcc from PATH; TileLang's cache under HOME, the runner's private scratch).

Importing the module runs candidate code, so compile_configs is for trusted files (the task's stub and
expert solution, in `crucible tasks validate` and the tests), never an agent's workspace.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import BuildResult, BuildTarget, Diagnostic, KernelResources
from .cuda import trim_log
from .cute import _resources, fake_tensors
from .triton import TritonToolchain

if TYPE_CHECKING:
    from ..task import Task

PACKAGE = "tilelang"
INSTALL_HINT = "pip install 'kernel-crucible[tilelang]' (tilelang==0.1.15; its kernels compile with nvcc)"
CONTRACT = "compile_kernels"
"""The module-level function a TileLang candidate defines beside its entry (see the module docstring)."""


class TileLangToolchain(TritonToolchain):
    """Parent side: Triton's syntax check (no import); compile_configs compiles for the H200 offline."""

    language = "tilelang"
    loader = "python_module"
    runs_on_cpu = False
    traced_build = False
    stub_runs = True
    """A TileLang stub is a correct, naive kernel: the plumbing (compile_kernels, dynamic shapes, scalars)."""

    def available(self) -> str | None:
        return None if available() else f"TileLang is not installed here ({INSTALL_HINT})"

    def compile_configs(self, task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a",
                        which: str = "all", timeout_s: float = 600) -> BuildResult:
        return compile_configs(task, source_dir, file, arch=arch, which=which, timeout_s=timeout_s)


def available() -> bool:
    """Is TileLang importable here (without importing it: that takes seconds)?"""
    return importlib.util.find_spec("tilelang") is not None


def compile_configs(task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a", which: str = "all",
                    timeout_s: float = 600) -> BuildResult:
    """Import `file` (trusted code) in a subprocess and compile its kernels for `arch` on each config of
    `which` (visible, hidden, all), without a GPU. Not installed: ok=False with a diagnostic saying so."""
    start = time.perf_counter()
    source_dir = Path(source_dir).resolve()
    target = BuildTarget(backend="cuda", arch=arch)
    command = [sys.executable, "-c", "from crucible.toolkit.toolchains.tilelang import main; main()"]

    def result(ok: bool, kernels: list[KernelResources], diagnostics: list[Diagnostic], log: str) -> BuildResult:
        return BuildResult(ok=ok, language="tilelang", target=target, diagnostics=diagnostics, kernels=kernels,
                           log=trim_log(log), artifact=str(source_dir / file),
                           seconds=time.perf_counter() - start, command=command)

    if not available():
        return result(False, [], [Diagnostic(file=file, message=f"TileLang is not installed here: {INSTALL_HINT}")],
                      "")
    with tempfile.TemporaryDirectory(prefix="crucible-tilelang-") as tmp:
        dump = Path(tmp) / "dump"
        dump.mkdir()
        payload = {"task_root": str(task.root), "source_dir": str(source_dir), "file": file, "which": which,
                   "out": str(Path(tmp) / "result.json"), "dump": str(dump)}
        env = {**os.environ, "TILELANG_DEFAULT_TARGET": json.dumps({"kind": "cuda", "arch": arch}),
               "TILELANG_CACHE_DIR": str(Path(tmp) / "cache"), "TILELANG_PRINT_ON_COMPILATION": "0",
               "CUDA_VISIBLE_DEVICES": "", "TMPDIR": tmp}
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
        kernels = [k for p in sorted(dump.glob("*.ptx")) for k in _resources(p, arch)]
    if not kernels and not diagnostics:
        diagnostics.append(Diagnostic(file=file, message=f"{CONTRACT}() compiled no kernel: it must tilelang.compile "
                                      "every kernel the entry launches"))
    log += "\n".join(found["log"])
    return result(not any(d.severity == "error" for d in diagnostics), kernels, diagnostics, log)


# --- the compile check's subprocess ---------------------------------------------------------------


def _keep_ptx(dump: Path) -> None:
    """Wrap TileLang's nvcc step: each CUDA source it compiles to a cubin is also compiled to PTX, with the
    same options, into `dump` (TileLang reports resources on HIP only; ptxas -v reads the PTX)."""
    from tilelang.contrib import nvcc

    compile_cuda = nvcc.compile_cuda

    def watched(code: str, target_format: str = "ptx", arch: Any = None, options: Any = None, *args: Any,
                **kwargs: Any) -> Any:
        out = compile_cuda(code, target_format, arch, options, *args, **kwargs)
        if target_format == "cubin":
            n = len(list(dump.glob("*.ptx")))
            (dump / f"kernel_{n:03d}.ptx").write_bytes(bytes(compile_cuda(code, "ptx", arch, options, *args,
                                                                          **kwargs)))
        return out

    nvcc.compile_cuda = watched


def _check(payload: dict[str, Any]) -> dict[str, Any]:
    from ..task import load_task
    from .triton import _diagnostic_from_exception, import_candidate

    task = load_task(Path(payload["task_root"]))
    source_dir, file = Path(payload["source_dir"]), str(payload["file"])
    log: list[str] = []
    try:
        _keep_ptx(Path(payload["dump"]))
        module = import_candidate(source_dir / file)
    except Exception as e:  # noqa: BLE001 - trusted code, but its failure is a diagnostic, not a crash
        return {"diagnostics": [_diagnostic_from_exception(e, source_dir, file).model_dump()], "log": log}
    compile_kernels = getattr(module, CONTRACT, None)
    if not callable(compile_kernels):
        return {"diagnostics": [Diagnostic(file=file, message=f"{file} defines no function `{CONTRACT}`: a TileLang "
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
