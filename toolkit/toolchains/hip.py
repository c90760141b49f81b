"""HIP: hipcc on AMD GPUs; on NVIDIA (or with no ROCm here) nvcc with our HIP-on-CUDA headers.

    target.backend == "rocm"  hipcc -shared -fPIC -O3 --offload-arch=gfx942 -Rpass-analysis=kernel-resource-usage
    otherwise                 nvcc -x cu -I toolkit/include ... (the CUDA flags; see docs/hip-on-cuda.md)

Parsing, caching and the build itself are cuda.py's (`build_shared_library`); this module only picks the
compiler, the flags and the resource parser.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from . import BuildResult, BuildTarget, KernelResources
from .cuda import (
    DEFAULT_TIMEOUT_S,
    CudaToolchain,
    build_shared_library,
    demangle,
    failed,
    find_compiler,
    parse_ptxas,
)

if TYPE_CHECKING:
    from ..task import Task

INCLUDE_DIR = Path(__file__).resolve().parent.parent / "include"
"""Holds hip/hip_runtime.h (HIP on CUDA); first on nvcc's include path for .hip sources."""


def _headers_digest() -> str:
    h = hashlib.sha256()
    for path in sorted((INCLUDE_DIR / "hip").glob("*.h")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


# clang's `-Rpass-analysis=kernel-resource-usage` remarks, one value per line after "Function Name: X".
_REMARK = re.compile(r"remark: +(?P<key>[\w ]+?)(?: \[[^\]]*\])?: (?P<value>\S+)(?: \[-Rpass-analysis|$)")


def parse_amdgpu_remarks(log: str) -> list[KernelResources]:
    """hipcc resource remarks -> KernelResources (VGPRs as registers, LDS as shared, scratch as stack)."""
    kernels: dict[str, dict[str, int | None]] = {}
    current: str | None = None
    for line in log.splitlines():
        m = _REMARK.search(line)
        if not m:
            continue
        key, value = m["key"].strip(), m["value"]
        if key == "Function Name":
            current = value
            kernels[current] = {"registers": None, "shared_bytes": None, "spill_stores": None,
                                "spill_loads": None, "stack_bytes": None}
            continue
        if current is None or not value.isdigit():
            continue
        n = int(value)
        if key == "VGPRs":
            kernels[current]["registers"] = n
        elif key == "LDS Size":
            kernels[current]["shared_bytes"] = n
        elif key == "ScratchSize":
            kernels[current]["stack_bytes"] = n
        elif key == "VGPRs Spill":
            # AMD reports spilled VGPRs; 4 bytes per lane each, to match ptxas's bytes.
            kernels[current].update(spill_stores=4 * n, spill_loads=4 * n)
    names = demangle(list(kernels))
    return [KernelResources(name=names[k], **v) for k, v in kernels.items()]  # type: ignore[arg-type]


class HipToolchain:
    language = "hip"
    loader = "shared_library"
    runs_on_cpu = False
    traced_build = False
    stub_runs = False

    def __init__(self, *, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.cache_dir = cache_dir
        self.timeout_s = timeout_s

    def available(self) -> str | None:
        return None  # the compiler's absence is the build's own diagnostic

    def compile_configs(self, task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a",
                        which: str = "all", timeout_s: float = 600) -> BuildResult | None:
        return None  # build compiles for the arch

    def build(self, source_dir: Path, candidate: str, target: BuildTarget, out_dir: Path) -> BuildResult:
        out = self.cache_dir or out_dir
        common = dict(language=self.language, source_dir=source_dir, candidate=candidate, target=target,
                      out_dir=out, timeout_s=self.timeout_s)
        if target.backend == "rocm":
            if not target.arch.startswith("gfx"):
                return failed(self.language, target, candidate, f"the rocm backend needs a gfx arch (gfx942, "
                              f"gfx90a, ...), not {target.arch}")
            hipcc = find_compiler("hipcc", "ROCM_PATH", "HIP_PATH")
            if hipcc is None:
                return failed(self.language, target, candidate, "hipcc not found: install ROCm (6.x) and put "
                              "/opt/rocm/bin on PATH, or set ROCM_PATH")
            flags = ["-shared", "-fPIC", "-O3", f"--offload-arch={target.arch}",
                     "-Rpass-analysis=kernel-resource-usage"]
            return build_shared_library(compiler=hipcc, flags=flags, parse_resources=parse_amdgpu_remarks,
                                        **common)
        if not target.arch.startswith("sm_"):
            return failed(self.language, target, candidate, f"HIP on CUDA builds for NVIDIA archs (sm_90, ...), "
                          f"not {target.arch}; use the rocm backend for gfx targets")
        nvcc = find_compiler("nvcc", "CUDA_HOME", "CUDA_PATH")
        if nvcc is None:
            return failed(self.language, target, candidate, "neither hipcc (ROCm) nor nvcc found: HIP on NVIDIA "
                          "builds with nvcc; install the CUDA toolkit and put its bin/ on PATH")
        # Our include dir first, so <hip/hip_runtime.h> is the HIP-on-CUDA header; `-x cu` because nvcc
        # does not know the .hip suffix.
        flags = ["-I", str(INCLUDE_DIR), "-D__HIP_PLATFORM_NVIDIA__", *CudaToolchain.flags(target.arch), "-x", "cu"]
        return build_shared_library(compiler=nvcc, flags=flags, parse_resources=parse_ptxas,
                                    key_extra=_headers_digest(), extra_roots=[INCLUDE_DIR], **common)
