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
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from . import BuildResult, python_dsl
from .python_dsl import CONTRACT, fake_tensors  # noqa: F401 - the DSL's contract and fake inputs, by this name too
from .triton import TritonToolchain

if TYPE_CHECKING:
    from ..task import Task

PACKAGE = "nvidia-cutlass-dsl"
INSTALL_HINT = "pip install 'kernel-crucible[cute]' (nvidia-cutlass-dsl==4.8.1)"
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
    `which` (visible, hidden, all), without a GPU (python_dsl.compile_configs). Not installed: ok=False with
    a diagnostic saying so."""
    def env(tmp: Path) -> dict[str, str]:
        return {**os.environ, "CUTE_DSL_ARCH": arch, "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp / "dump"),
                "CUTE_DSL_CACHE_DIR": str(tmp / "cache"), "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp)}

    return python_dsl.compile_configs(task, source_dir, file, language="cute", module=__name__,
                                      installed=available(), missing=f"the CuTe DSL is not installed here: "
                                      f"{INSTALL_HINT}", env=env, arch=arch, which=which, timeout_s=timeout_s)


def main() -> None:
    """The compile check's subprocess (python_dsl.run)."""
    python_dsl.run("CuTe")
