"""TileLang (`tilelang`, `import tilelang.language as T`): a candidate is a Python module, like Triton's and CuTe's.

    parent (trusted)                     compile check (a subprocess; no GPU needed, nvcc needed)
    ─────────────────                    ────────────────────────────────────────────────────────────────
    TileLangToolchain.build              compile_configs(task, source_dir, file)
      syntax check of every .py            main() in a fresh interpreter, TILELANG_DEFAULT_TARGET = sm_90a,
      (ast only, no import: Triton's)      TILELANG_CACHE_DIR fresh: nvcc's CUDA -> cubin is watched and each
                                           kernel's PTX kept; per config, fake tensors (python_dsl.fake_tensors),
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import BuildResult, python_dsl
from .python_dsl import CONTRACT  # noqa: F401 - the DSL's contract, by this name too
from .triton import TritonToolchain

if TYPE_CHECKING:
    from ..task import Task

PACKAGE = "tilelang"
INSTALL_HINT = "pip install 'kernel-crucible[tilelang]' (tilelang==0.1.15; its kernels compile with nvcc)"


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
    `which` (visible, hidden, all), without a GPU (python_dsl.compile_configs). Not installed: ok=False with
    a diagnostic saying so."""
    def env(tmp: Path) -> dict[str, str]:
        return {**os.environ, "TILELANG_DEFAULT_TARGET": json.dumps({"kind": "cuda", "arch": arch}),
                "TILELANG_CACHE_DIR": str(tmp / "cache"), "TILELANG_PRINT_ON_COMPILATION": "0",
                "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp)}

    return python_dsl.compile_configs(task, source_dir, file, language="tilelang", module=__name__,
                                      installed=available(), missing=f"TileLang is not installed here: {INSTALL_HINT}",
                                      env=env, arch=arch, which=which, timeout_s=timeout_s)


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


def main() -> None:
    """The compile check's subprocess (python_dsl.run), TileLang's nvcc step watched for the PTX."""
    python_dsl.run("TileLang", prepare=_keep_ptx)
