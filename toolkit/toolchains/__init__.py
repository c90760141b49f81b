"""Language toolchains behind one small interface: build a candidate, report diagnostics and resources.

    toolchains/
      __init__.py   the models (Diagnostic, KernelResources, BuildTarget, BuildResult), the Toolchain
                    protocol and the registry TOOLCHAINS / get_toolchain(language)
      cuda.py       nvcc -> shared library; parses `-Xptxas -v` and nvcc's diagnostics; content-hash cache
      hip.py        hipcc on ROCm, else nvcc with our HIP-on-CUDA headers (toolkit/include); reuses cuda.py
      triton.py     parent side: a syntax check only; worker side: record_launches + compile_records
      cute.py       CuTe DSL: Triton's syntax check; compile_configs compiles a module's kernels offline
      tilelang.py   TileLang: the same, through tilelang.compile and nvcc
      python_dsl.py what the two share: the compile check's subprocess (fake tensors, compile_kernels, PTX -> ptxas -v)

A build never runs candidate code. Triton is the exception by nature (importing the module runs it), so
its full build (import, trace, compile) happens only in the evaluation worker: see triton.trace_build.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ..task import Task


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Diagnostic(_Frozen):
    """One compiler message an agent can act on."""

    file: str
    """Path relative to the source dir (absolute only for files outside it, e.g. system headers)."""
    line: int | None = None
    column: int | None = None
    severity: Literal["error", "warning", "note"] = "error"
    message: str


class KernelResources(_Frozen):
    """What the compiler says one kernel uses, per thread or per block."""

    name: str
    """Demangled where a demangler exists (cu++filt, c++filt), else the mangled name."""
    registers: int | None = None
    """Registers per thread (NVIDIA) or VGPRs per lane (AMD)."""
    shared_bytes: int | None = None
    """Static shared memory (LDS) per block; dynamic shared memory is decided at launch and not counted."""
    spill_stores: int | None = None
    """Bytes of register spill stores per thread (ptxas); on AMD 4 x the spilled VGPRs."""
    spill_loads: int | None = None
    """Bytes of register spill loads per thread (ptxas); on AMD 4 x the spilled VGPRs."""
    stack_bytes: int | None = None
    """Stack frame per thread (local arrays, spills); AMD: scratch bytes per lane."""


class BuildTarget(_Frozen):
    backend: Literal["cuda", "rocm", "cpu"]
    """Where the kernel will run; on `cpu` we still compile for `arch` (sm_90) to report resources."""
    arch: str = Field(pattern=r"^(sm_\d+a?|gfx[0-9a-f]+)$")
    """`sm_90`, `sm_90a`, `gfx942`, ..."""


class BuildResult(_Frozen):
    ok: bool
    language: str
    target: BuildTarget
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    kernels: list[KernelResources] = Field(default_factory=list)
    log: str = ""
    """The compiler's own words (stderr + stdout), head and tail kept when long."""
    artifact: str | None = None
    """CUDA/HIP: the built shared library (a fresh path per content hash, so dlopen never sees a stale
    library); Triton: the candidate module's path."""
    seconds: float = 0.0
    cached: bool = False
    command: list[str] = Field(default_factory=list)
    """The compiler command line, for reproducing the build by hand."""


class Toolchain(Protocol):
    """One kernel language: how it builds (here, trusted) and how a runner loads what it built."""

    language: str
    loader: Literal["python_module", "shared_library"]
    """How a runner calls the built artifact (toolkit/runner/loading.py)."""
    runs_on_cpu: bool
    """Its kernels run on the cpu backend (Triton's interpreter); others compile there but need a GPU."""
    traced_build: bool
    """The compile tool must run the candidate to see its kernels (Triton: kernels are made at launch)."""
    stub_runs: bool
    """A torch2X stub in this language is a correct, naive kernel that validation checks passes (the Python
    DSLs: their plumbing is the hard part to start from); otherwise a stub must fail (a python_module raises
    NotImplementedError, a shared_library returns an error code)."""

    def build(self, source_dir: Path, candidate: str, target: BuildTarget, out_dir: Path) -> BuildResult: ...

    def available(self) -> str | None:
        """None when this machine has what compiling the language's kernels offline needs; else how to
        install it (an optional extra), for a `skipped` that says why."""
        ...

    def compile_configs(self, task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a",
                        which: str = "all", timeout_s: float = 600) -> BuildResult | None:
        """Compile a trusted module's kernels for `arch` on each config of `which` without a GPU (the Python
        DSLs, whose kernels exist only once the module runs: it imports the file); None where `build`
        already compiles them (CUDA, HIP) or only a run can (Triton)."""
        ...


def _registry() -> dict[str, Toolchain]:
    # Imported here so this module's models are defined before the implementations import them.
    from .cuda import CudaToolchain
    from .cute import CuteToolchain
    from .hip import HipToolchain
    from .tilelang import TileLangToolchain
    from .triton import TritonToolchain

    return {t.language: t for t in (CudaToolchain(), HipToolchain(), TritonToolchain(), CuteToolchain(),
                                    TileLangToolchain())}


TOOLCHAINS: dict[str, Toolchain] = _registry()


def get_toolchain(language: str) -> Toolchain:
    try:
        return TOOLCHAINS[language]
    except KeyError:
        raise ValueError(f"no toolchain for language {language!r}; known: {sorted(TOOLCHAINS)}") from None


__all__ = [
    "TOOLCHAINS", "BuildResult", "BuildTarget", "Diagnostic", "KernelResources", "Toolchain", "get_toolchain",
]
