"""CUDA C++: nvcc builds the candidate into a shared library that exports the task's `extern "C"` entry.

    source_dir/kernel.cu ──nvcc -shared -Xptxas -v──▶ out_dir/<digest>/libkernel.so + result.json
                                   │
                                   ├─ ptxas info lines ──▶ KernelResources per entry function
                                   └─ file(line): error ──▶ Diagnostics (paths relative to source_dir)

The cache key is a digest of every source file of source_dir, the compiler's version, the flags and the
target, so an unchanged snapshot returns its earlier result (`cached=True`) without running nvcc. A fresh
directory per digest also means the runtime's dlopen never returns a stale library of the same path.
The helpers here (diagnostic and resource parsing, the cached build) are shared with hip.py.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import BuildResult, BuildTarget, Diagnostic, KernelResources

SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".hip", ".cpp", ".inl")
"""Files whose content enters the cache key (anything a candidate may #include)."""
LOG_LIMIT = 20_000
DEFAULT_TIMEOUT_S = 300.0
# Bump when the flags, the parsing or result.json's meaning change, so old cache entries are not reused.
CACHE_VERSION = "1"

ResourceParser = Callable[[str], list[KernelResources]]


def find_compiler(name: str, *env_homes: str) -> str | None:
    """`name` on PATH, else under $<HOME>/bin for each of env_homes (CUDA_HOME, ROCM_PATH, ...)."""
    found = shutil.which(name)
    if found:
        return found
    for env in env_homes:
        home = os.environ.get(env)
        if home and (Path(home) / "bin" / name).is_file():
            return str(Path(home) / "bin" / name)
    return None


@functools.cache
def compiler_version(exe: str) -> str:
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)
    return (proc.stdout + proc.stderr).strip()


def source_digest(source_dir: Path, suffixes: Sequence[str] = SOURCE_SUFFIXES) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in source_dir.rglob("*") if p.is_file() and p.suffix in suffixes):
        rel = path.relative_to(source_dir).as_posix()
        h.update(rel.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def trim_log(text: str, limit: int = LOG_LIMIT) -> str:
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 5, limit * 3 // 5
    return f"{text[:head]}\n[... {len(text) - head - tail} characters left out ...]\n{text[-tail:]}"


# --- diagnostics -----------------------------------------------------------------------------------

# EDG front end (nvcc): `kernel.cu(12): error: identifier "x" is undefined`, `... warning #177-D: ...`
_EDG = re.compile(
    r"^(?P<file>[^\s(][^()]*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning|remark|note)"
    r"(?: #[\w-]+)?: (?P<msg>.*)$"
)
# gcc / clang (host compiler, hipcc): `kernel.cu:12:5: error: ...`
_GNU = re.compile(
    r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
# ptxas / nvlink / fatbinary: no source position
_TOOL = re.compile(r"^(?P<tool>ptxas|nvlink|fatbinary|nvcc|ld(?:\.lld)?) ?(?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_SEVERITY = {"catastrophic error": "error", "fatal error": "error", "fatal": "error", "error": "error",
             "warning": "warning", "note": "note"}


def _relative(file: str, source_dir: Path) -> str:
    path = Path(file)
    path = path if path.is_absolute() else source_dir / path
    try:
        return path.resolve().relative_to(source_dir.resolve()).as_posix()
    except ValueError:
        return file


def parse_diagnostics(log: str, source_dir: Path, candidate: str) -> list[Diagnostic]:
    """Errors, warnings and notes of nvcc, gcc, clang and ptxas; files relative to source_dir."""
    out: list[Diagnostic] = []
    for raw in log.splitlines():
        line = raw.rstrip()
        if m := _EDG.match(line):
            if m["sev"] == "remark":
                continue
            out.append(Diagnostic(file=_relative(m["file"], source_dir), line=int(m["line"]), column=None,
                                  severity=_SEVERITY[m["sev"]], message=m["msg"].strip()))
        elif m := _GNU.match(line):
            out.append(Diagnostic(file=_relative(m["file"], source_dir), line=int(m["line"]),
                                  column=int(m["col"]) if m["col"] else None,
                                  severity=_SEVERITY[m["sev"]], message=m["msg"].strip()))
        elif m := _TOOL.match(line):
            out.append(Diagnostic(file=candidate, line=None, column=None, severity=_SEVERITY[m["sev"]],
                                  message=f"{m['tool']}: {m['msg'].strip()}"))
    return out


# --- resources -------------------------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)'")
_PROPS = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<st>\d+) bytes spill stores, (?P<ld>\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


def parse_ptxas(log: str) -> list[KernelResources]:
    """`-Xptxas -v` output -> one KernelResources per entry function, names demangled where possible."""
    entries: dict[str, dict[str, int | None]] = {}
    current: str | None = None  # the entry whose "Used N registers" line comes next
    props_for: str | None = None  # the function whose stack/spill line comes next
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = m["name"]
            entries.setdefault(current, {"registers": None, "shared_bytes": None, "spill_stores": None,
                                         "spill_loads": None, "stack_bytes": None})
        elif m := _PROPS.search(line):
            props_for = m["name"]
        elif (m := _FRAME.search(line)) and props_for in entries:
            entries[props_for].update(stack_bytes=int(m["stack"]), spill_stores=int(m["st"]),
                                      spill_loads=int(m["ld"]))
            props_for = None
        elif (m := _USED.search(line)) and current is not None:
            smem = _SMEM.search(line)
            # ptxas leaves out "bytes smem" when a kernel has none.
            entries[current].update(registers=int(m["regs"]), shared_bytes=int(smem["smem"]) if smem else 0)
            current = None
    names = demangle(list(entries))
    return [KernelResources(name=names[k], **v) for k, v in entries.items()]  # type: ignore[arg-type]


def demangle(names: list[str]) -> dict[str, str]:
    """Itanium-mangled names (CUDA uses them too) -> readable ones, via cu++filt or c++filt if present."""
    tool = find_compiler("cu++filt", "CUDA_HOME", "CUDA_PATH") or shutil.which("c++filt")
    mangled = [n for n in names if n.startswith("_Z")]
    if not tool or not mangled:
        return {n: n for n in names}
    proc = subprocess.run([tool], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                          timeout=30, check=False)
    readable = proc.stdout.splitlines()
    table = dict(zip(mangled, readable, strict=False)) if proc.returncode == 0 else {}
    return {n: table.get(n, n) or n for n in names}


# --- includes ------------------------------------------------------------------------------------

# Headers a candidate may include besides its own files: the system's and the toolkits'.
SYSTEM_HEADER_ROOTS = ("/usr/include", "/usr/lib/gcc", "/usr/lib/llvm*", "/usr/local/include", "/usr/local/cuda*",
                       "/opt/rocm*", "/opt/nvidia/hpc_sdk")


def outside_includes(compiler: str, flags: Sequence[str], candidate: str, source_dir: Path,
                     extra_roots: Sequence[Path], timeout_s: float) -> tuple[list[str], str, int]:
    """Files the candidate #includes from outside source_dir and the header roots, by a preprocessor pass
    (`-M`). Builds run outside the sandbox, so without this `#include "../../solution.cu"` or a hidden
    config would compile in (or show up in error messages). Returns (outside files, log, exit status)."""
    proc = subprocess.run([compiler, *flags, "-M", candidate], cwd=source_dir, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    deps = proc.stdout.replace("\\\n", " ").split()
    roots = [source_dir, *extra_roots, *(Path(p) for p in _env_roots())]
    globbed = [Path(p) for pattern in SYSTEM_HEADER_ROOTS for p in glob.glob(pattern)]
    roots = [r.resolve() for r in roots + globbed]
    outside = []
    for dep in deps[1:]:  # deps[0] is "kernel.o :"
        if dep.endswith(":"):
            continue
        path = (source_dir / dep).resolve()
        if not any(path.is_relative_to(root) for root in roots):
            outside.append(dep)
    return outside, (proc.stderr + proc.stdout if proc.returncode else proc.stderr), proc.returncode


def _env_roots() -> list[str]:
    return [v for k in ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH") if (v := os.environ.get(k))]


# --- the cached build ------------------------------------------------------------------------------


def failed(language: str, target: BuildTarget, candidate: str, message: str, *, command: Sequence[str] = (),
           log: str = "", seconds: float = 0.0) -> BuildResult:
    return BuildResult(ok=False, language=language, target=target, log=log, seconds=seconds,
                       command=list(command), diagnostics=[Diagnostic(file=candidate, message=message)])


def build_shared_library(
    *, language: str, source_dir: Path, candidate: str, target: BuildTarget, out_dir: Path,
    compiler: str, flags: Sequence[str], parse_resources: ResourceParser, key_extra: str = "",
    extra_roots: Sequence[Path] = (), timeout_s: float = DEFAULT_TIMEOUT_S,
) -> BuildResult:
    """Run `compiler *flags -o <lib> candidate` in source_dir, or return the cached result of that build.

    out_dir/<digest>/ holds the library and result.json; result.json is written last, atomically, so a
    half-finished or concurrent build is never mistaken for a finished one. Compile errors are cached
    too (the same source fails the same way); timeouts and missing tools are not.
    """
    start = time.perf_counter()
    source_dir = source_dir.resolve()
    src = source_dir / candidate
    if not src.is_file():
        return failed(language, target, candidate, f"{candidate} not found in the source directory; "
                      "create it or check the task's `candidate` file name")
    key_material = "\n".join([CACHE_VERSION, language, target.model_dump_json(), compiler_version(compiler),
                              " ".join(flags), candidate, key_extra, source_digest(source_dir)])
    digest = hashlib.sha256(key_material.encode()).hexdigest()
    entry = out_dir.resolve() / digest[:24]
    lib = entry / f"lib{src.stem}.so"
    result_file = entry / "result.json"
    if result_file.is_file():
        earlier = BuildResult.model_validate_json(result_file.read_text())
        if earlier.artifact is None or Path(earlier.artifact).is_file():
            return earlier.model_copy(update={"cached": True, "seconds": time.perf_counter() - start})

    outside, dep_log, dep_status = outside_includes(compiler, flags, candidate, source_dir, extra_roots, timeout_s)
    if outside:  # not cached: the files outside may change
        return failed(language, target, candidate, f"{candidate} includes files from outside its source directory: "
                      f"{', '.join(outside[:5])}; a candidate may include only its own files and system/toolkit "
                      "headers", seconds=time.perf_counter() - start)
    if dep_status != 0:  # the preprocessor failed (a missing header): its words are the diagnostics
        diagnostics = parse_diagnostics(dep_log, source_dir, candidate) or [
            Diagnostic(file=candidate, message=f"the preprocessor failed: {dep_log.strip()[-2000:]}")]
        return BuildResult(ok=False, language=language, target=target, diagnostics=diagnostics,
                           log=trim_log(dep_log), seconds=time.perf_counter() - start,
                           command=[compiler, *flags, "-M", candidate])
    entry.mkdir(parents=True, exist_ok=True)
    tmp_lib = entry / f".lib{src.stem}.{os.getpid()}.so"
    command = [compiler, *flags, "-o", str(lib), candidate]
    try:
        proc = subprocess.run([compiler, *flags, "-o", str(tmp_lib), candidate], cwd=source_dir,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as e:
        tmp_lib.unlink(missing_ok=True)
        partial = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return failed(language, target, candidate, f"the compiler ran longer than {timeout_s:.0f} s and was "
                      "stopped; look for huge unrolled loops or template recursion", command=command,
                      log=trim_log(partial), seconds=time.perf_counter() - start)
    log = (proc.stderr + ("\n" + proc.stdout if proc.stdout.strip() else "")).strip()
    ok = proc.returncode == 0 and tmp_lib.is_file()
    diagnostics = parse_diagnostics(log, source_dir, candidate)
    if not ok and not any(d.severity == "error" for d in diagnostics):
        tail = "\n".join(log.splitlines()[-15:]) or f"exit status {proc.returncode}, no output"
        diagnostics.append(Diagnostic(file=candidate, message=f"the build failed: {tail}"))
    if ok:
        os.replace(tmp_lib, lib)
    else:
        tmp_lib.unlink(missing_ok=True)
    result = BuildResult(
        ok=ok, language=language, target=target, diagnostics=diagnostics,
        kernels=parse_resources(log) if ok else [], log=trim_log(log), artifact=str(lib) if ok else None,
        seconds=time.perf_counter() - start, cached=False, command=command,
    )
    tmp_json = entry / f".result.{os.getpid()}.json"
    tmp_json.write_text(result.model_dump_json(indent=1))
    os.replace(tmp_json, result_file)
    return result


class CudaToolchain:
    """CUDA C++ through nvcc; the candidate may #include other files of its source dir."""

    language = "cuda"
    loader = "shared_library"
    runs_on_cpu = False
    traced_build = False

    def __init__(self, *, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.cache_dir = cache_dir
        """Where builds are kept; default: the out_dir given to build()."""
        self.timeout_s = timeout_s

    @staticmethod
    def flags(arch: str) -> list[str]:
        return ["-shared", "-Xcompiler", "-fPIC", "-O3", f"-arch={arch}", "-lineinfo", "-Xptxas", "-v",
                "-cudart", "static"]

    def build(self, source_dir: Path, candidate: str, target: BuildTarget, out_dir: Path) -> BuildResult:
        if not target.arch.startswith("sm_"):
            return failed(self.language, target, candidate, f"CUDA C++ builds for NVIDIA archs (sm_90, ...), "
                          f"not {target.arch}; write HIP for AMD GPUs")
        nvcc = find_compiler("nvcc", "CUDA_HOME", "CUDA_PATH")
        if nvcc is None:
            return failed(self.language, target, candidate, "nvcc not found: install the CUDA toolkit "
                          "(12.x or 13.x) and put its bin/ on PATH, or set CUDA_HOME")
        return build_shared_library(
            language=self.language, source_dir=source_dir, candidate=candidate, target=target,
            out_dir=self.cache_dir or out_dir, compiler=nvcc, flags=self.flags(target.arch),
            parse_resources=parse_ptxas, timeout_s=self.timeout_s,
        )
