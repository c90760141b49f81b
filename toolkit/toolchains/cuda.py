"""CUDA C++: nvcc builds the candidate into a shared library that exports the task's `extern "C"` entry.

    source_dir/kernel.cu ──nvcc -shared -Xptxas -v──▶ out_dir/<digest>/libkernel.so + result.json
                                   │
                                   ├─ ptxas info lines ──▶ KernelResources per entry function
                                   └─ file(line): error ──▶ Diagnostics (paths relative to source_dir)

The cache key is a digest of every source file of source_dir, the compiler's version, the flags and the
target, so an unchanged snapshot returns its earlier result (`cached=True`) without running nvcc. A fresh
directory per digest also means the runtime's dlopen never returns a stale library of the same path.
The helpers here (diagnostic and resource parsing, the cached build) are shared with hip.py.

The build runs in the trusted parent, but the source decides what the compiler reads (`#include`, the
assembler's `.incbin`, `__has_include`) and how much it writes. So every compiler command of a build runs
under ../sandbox_exec.py: Landlock lets it read only the system, the toolkits and the source dir (not the
task folder, the repo, /proc or HOME) and write only a private folder in its cache entry; RLIMIT_FSIZE
caps every file it writes at BUILD_FILE_LIMIT_BYTES, RLIMIT_CPU its CPU time. Without Landlock the build
runs with the rlimits alone and its log says so.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..sandbox_exec import LAUNCH_FAILED, MARK, landlock_abi
from . import BuildResult, BuildTarget, Diagnostic, KernelResources

if TYPE_CHECKING:
    from ..task import Task

LOG_LIMIT = 20_000
DEFAULT_TIMEOUT_S = 300.0
# Bump when the flags, the parsing or result.json's meaning change, so old cache entries are not reused.
CACHE_VERSION = "3"  # 2: the compiler runs sandboxed (entries of 1 may hold files .incbin'd from outside);
# 3: every file of the source folder is in the key (2 left out .inc, .c, .cc: another snapshot's library came back)
BUILD_FILE_LIMIT_BYTES = 256 << 20
"""The most any file a compiler writes may hold (RLIMIT_FSIZE): the library, its objects, its temporaries."""
BUILD_MEMORY_LIMIT_BYTES = 8 << 30
"""The address space of each compiler process (RLIMIT_AS): cicc and ptxas on a large kernel stay well under;
an assembler told to .incbin a big file a hundred times would hold it all, on the host of the judges."""

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


def source_digest(source_dir: Path) -> str:
    """Every file of the source folder, whatever its name: the compiler reads whatever the source
    #includes (.inc, .c, a file with no suffix), so a key of some suffixes only would hand one snapshot
    another's library."""
    h = hashlib.sha256()
    files = sorted(Path(root, name) for root, _, names in os.walk(source_dir) for name in names
                   if "__pycache__" not in Path(root).parts)  # the task folder's, as its reference is imported
    for path in files:
        rel = path.relative_to(source_dir).as_posix()
        try:
            content = hashlib.sha256(path.read_bytes()).digest()
        except OSError:  # a dangling link or a special file: what the compiler would see is its name
            content = os.fsencode(os.readlink(path)) if path.is_symlink() else b"\0unreadable"
        h.update(rel.encode() + b"\0" + content)
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


# gcc's words when the sandbox refuses a read: `kernel.cu:1:10: fatal error: ../task/x.cu: Permission denied`
# (#include), `cc1plus: fatal error: /x/solution.cu: Permission denied` (__has_include).
_DENIED = re.compile(r"^(?:[^\s:][^:]*:\d+:(?:\d+:)?|[\w+.-]+:) fatal error: (?P<path>.+): Permission denied$", re.M)


def denied_reads(log: str) -> list[str]:
    """Files the compiler was refused, by its own words (the sandbox's doing)."""
    return list(dict.fromkeys(m["path"] for m in _DENIED.finditer(log)))


def outside_message(candidate: str, outside: Sequence[str]) -> str:
    return (f"{candidate} reads files from outside its source directory (#include, __has_include, .incbin): "
            f"{', '.join(outside[:5])}; a candidate may use only its own files and system/toolkit headers")


def outside_includes(compiler: str, flags: Sequence[str], candidate: str, source_dir: Path,
                     extra_roots: Sequence[Path], timeout_s: float,
                     sandbox: CompilerSandbox | None = None) -> tuple[list[str], str, int]:
    """Files the candidate #includes from outside source_dir and the header roots, by a preprocessor pass
    (`-M`), run in `sandbox` when given. The sandbox refuses such reads anyway; this names them in a message
    the agent can act on (an include the sandbox refused counts as outside too). Returns (outside files, log,
    exit status)."""
    command = [compiler, *flags, "-M", candidate]
    proc = sandbox.run(command, source_dir, timeout_s) if sandbox else run_compiler(command, source_dir, timeout_s)
    denied = denied_reads(proc.stderr)
    if denied:
        return denied, proc.stderr, proc.returncode
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


# --- the compiler's sandbox ------------------------------------------------------------------------

LAUNCHER = Path(__file__).resolve().parent.parent / "sandbox_exec.py"
"""Applies rlimits and Landlock, then execs the compiler; run as a plain script (`python -I -S`), so it
starts without site-packages."""
SYSTEM_READABLE = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
                   "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
"""The system a compiler reads: programs, shared libraries, headers (gcc's libexec and include trees are
under /usr), and the dynamic loader's cache. Not /proc (other processes' environments and folders), /sys,
the rest of /etc, /tmp or HOME. Landlock checks the file a symlink ends at, so /etc/alternatives need not be
listed."""
HOST_TOOLS = ("gcc", "g++", "cc", "c++", "cpp", "as", "ld", "clang", "clang++")
"""What nvcc and hipcc run besides their own tools: the host compiler, the assembler, the linker."""


def _install_tree(exe: str) -> list[str]:
    """A tool's folder and, for a bin/ folder, its install prefix (nvcc's nvvm/ and include/, gcc's libexec/),
    both as found and after symlinks. pip's CUDA wheels split the toolkit (nvidia/cuda_nvcc/bin/nvcc beside
    nvidia/cuda_runtime/include): there the whole nvidia/ package."""
    home = os.path.realpath(os.path.expanduser("~"))
    out = []
    for path in (os.path.abspath(exe), os.path.realpath(exe)):
        folder = os.path.dirname(path)
        out += [folder, os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder]
        out += [str(p) for p in Path(path).parents
                if p.name == "nvidia" and p.parent.name in ("site-packages", "dist-packages")]
    return [p for p in out if p not in ("/", home)]


def compiler_readable(compiler: str, source_dir: Path, extra_roots: Sequence[Path] = ()) -> list[str]:
    """What a build's compiler may read: SYSTEM_READABLE, the install trees of the compiler and the host
    tools on PATH ($NVCC_CCBIN, $CC, $CXX too), the toolkits (SYSTEM_HEADER_ROOTS, $CUDA_HOME, ...),
    extra_roots (our HIP-on-CUDA headers) and the source dir. Not the task folder, the repo, other builds."""
    tools = [compiler, *(shutil.which(n) for n in HOST_TOOLS),
             *(shutil.which(v) for k in ("NVCC_CCBIN", "CC", "CXX") if (v := os.environ.get(k)))]
    trees = [d for exe in tools if exe for d in _install_tree(exe)]
    toolkits = [p for pattern in SYSTEM_HEADER_ROOTS for p in glob.glob(pattern)] + _env_roots()
    out = []
    for path in [*SYSTEM_READABLE, *trees, *toolkits, *map(str, extra_roots), str(source_dir)]:
        out += [os.path.abspath(path), os.path.realpath(path)]  # Landlock binds the resolved inode
    return [p for p in dict.fromkeys(out) if os.path.exists(p)]


def run_compiler(command: Sequence[str], cwd: Path, timeout_s: float,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a compiler command in a session of its own; past the timeout the whole group is killed (nvcc's
    cicc, ptxas and gcc too), then TimeoutExpired is raised with what it had written."""
    with subprocess.Popen(list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(list(command), timeout_s, output=out, stderr=err) from None
    return subprocess.CompletedProcess(list(command), proc.returncode, out, err)


@dataclass(frozen=True)
class CompilerSandbox:
    """How one build runs its compiler commands: through the launcher, with a private TMPDIR."""

    prefix: list[str]
    """`python -I -S sandbox_exec.py --read ... --write ... --rlimit ... --`"""
    env: dict[str, str]
    note: str
    """One line for the build's log when the filesystem is not sandboxed (no Landlock here), else ""."""

    @classmethod
    def for_build(cls, compiler: str, source_dir: Path, extra_roots: Sequence[Path], tmp: Path,
                  timeout_s: float) -> CompilerSandbox:
        """Reads: compiler_readable; writes: only `tmp` (a private folder in the cache entry), where the
        library is built and the compiler keeps its temporaries."""
        cpu_s = int(timeout_s) + 1
        prefix = [sys.executable, "-I", "-S", str(LAUNCHER), "--rlimit", f"FSIZE={BUILD_FILE_LIMIT_BYTES}",
                  "--rlimit", f"CPU={cpu_s},{cpu_s + 5}", "--rlimit", "CORE=0",
                  "--rlimit", f"AS={BUILD_MEMORY_LIMIT_BYTES}"]
        note = ""
        if landlock_abi() >= 1:
            for path in compiler_readable(compiler, source_dir, extra_roots):
                prefix += ["--read", path]
            prefix += ["--write", str(tmp)]
        else:
            prefix += ["--no-landlock"]
            note = ("crucible: the compiler ran without a filesystem sandbox (no Landlock on this kernel); "
                    f"only its rlimits applied (files up to {BUILD_FILE_LIMIT_BYTES >> 20} MiB)")
        env = {**os.environ, "TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp)}
        return cls(prefix=[*prefix, "--"], env=env, note=note)

    def run(self, command: Sequence[str], cwd: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
        return run_compiler([*self.prefix, *command], cwd, timeout_s, self.env)


def sandbox_failure(proc: subprocess.CompletedProcess[str]) -> str | None:
    """The launcher's own complaint when it could not apply the sandbox (the compiler never ran), else None."""
    if proc.returncode != LAUNCH_FAILED:
        return None
    return next((line for line in proc.stderr.splitlines() if line.startswith(MARK)), None)


_TOO_LARGE = re.compile(r"File too large|File size limit exceeded")
"""What the assembler, the linker or ptxas say when RLIMIT_FSIZE stops a write (the launcher ignores SIGXFSZ,
so a write past the limit fails with EFBIG rather than killing the tool)."""


def size_limit_message() -> str:
    return (f"the built library would exceed {BUILD_FILE_LIMIT_BYTES >> 20} MiB; the compiler was stopped at "
            "that size. Large initialized arrays (and .incbin/.skip data in inline assembly) are written into "
            "the library: allocate big buffers at run time (cudaMalloc) and fill them there")


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
    too (the same source fails the same way); timeouts and missing tools are not. Every compiler command
    runs in a CompilerSandbox that may write only a private folder in out_dir/<digest>/.
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

    tmp = entry / f".build-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)  # in one call, so a concurrent build's cleanup (entry.rmdir) cannot race it
    sandbox = CompilerSandbox.for_build(compiler, source_dir, extra_roots, tmp, timeout_s)
    command = [compiler, *flags, "-o", str(lib), candidate]
    try:
        result, cacheable = _check_and_compile(
            language=language, source_dir=source_dir, candidate=candidate, target=target, compiler=compiler,
            flags=flags, parse_resources=parse_resources, extra_roots=extra_roots, timeout_s=timeout_s,
            sandbox=sandbox, lib=lib, command=command, start=start)
        if cacheable:
            tmp_json = entry / f".result.{os.getpid()}.{uuid.uuid4().hex[:8]}.json"
            tmp_json.write_text(result.model_dump_json(indent=1))
            os.replace(tmp_json, result_file)
        return result
    except subprocess.TimeoutExpired as e:
        partial = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return failed(language, target, candidate, f"the compiler ran longer than {timeout_s:.0f} s and was "
                      "stopped; look for huge unrolled loops or template recursion", command=command,
                      log=trim_log(partial), seconds=time.perf_counter() - start)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            entry.rmdir()  # only when empty: a refused build keeps nothing


def _check_and_compile(
    *, language: str, source_dir: Path, candidate: str, target: BuildTarget, compiler: str, flags: Sequence[str],
    parse_resources: ResourceParser, extra_roots: Sequence[Path], timeout_s: float, sandbox: CompilerSandbox,
    lib: Path, command: list[str], start: float,
) -> tuple[BuildResult, bool]:
    """The include check, then the compile, both in `sandbox`: (the result, whether to cache it). The library
    is written in the sandbox's TMPDIR and moved to `lib` when the build succeeds. Raises TimeoutExpired."""
    tmp = Path(sandbox.env["TMPDIR"])

    def note(log: str) -> str:
        return "\n".join(filter(None, [sandbox.note, log]))

    outside, dep_log, dep_status = outside_includes(compiler, flags, candidate, source_dir, extra_roots,
                                                    timeout_s, sandbox)
    why = sandbox_failure(subprocess.CompletedProcess([], dep_status, "", dep_log))
    if why:  # ours, not the candidate's: not cached
        return failed(language, target, candidate, f"the compiler could not be started in its sandbox: {why}",
                      seconds=time.perf_counter() - start), False
    if outside:  # not cached: the files outside may change
        return failed(language, target, candidate, outside_message(candidate, outside), log=sandbox.note,
                      seconds=time.perf_counter() - start), False
    if dep_status != 0:  # the preprocessor failed (a missing header): its words are the diagnostics
        diagnostics = parse_diagnostics(dep_log, source_dir, candidate) or [
            Diagnostic(file=candidate, message=f"the preprocessor failed: {dep_log.strip()[-2000:]}")]
        return BuildResult(ok=False, language=language, target=target, diagnostics=diagnostics,
                           log=trim_log(note(dep_log)), seconds=time.perf_counter() - start,
                           command=[compiler, *flags, "-M", candidate]), False
    tmp_lib = tmp / lib.name
    proc = sandbox.run([compiler, *flags, "-o", str(tmp_lib), candidate], source_dir, timeout_s)
    why = sandbox_failure(proc)
    if why:
        return failed(language, target, candidate, f"the compiler could not be started in its sandbox: {why}",
                      command=command, seconds=time.perf_counter() - start), False
    log = (proc.stderr + ("\n" + proc.stdout if proc.stdout.strip() else "")).strip()
    ok = proc.returncode == 0 and tmp_lib.is_file()
    diagnostics = parse_diagnostics(log, source_dir, candidate)
    if not ok and _TOO_LARGE.search(log):
        diagnostics = [Diagnostic(file=candidate, message=size_limit_message())]
    elif not ok and (denied := denied_reads(log)):  # a read the include check could not see (not cached)
        return failed(language, target, candidate, outside_message(candidate, denied), command=command,
                      log=sandbox.note, seconds=time.perf_counter() - start), False
    elif not ok and not any(d.severity == "error" for d in diagnostics):
        tail = "\n".join(log.splitlines()[-15:]) or f"exit status {proc.returncode}, no output"
        diagnostics.append(Diagnostic(file=candidate, message=f"the build failed: {tail}"))
    if ok:
        os.replace(tmp_lib, lib)
    result = BuildResult(
        ok=ok, language=language, target=target, diagnostics=diagnostics,
        kernels=parse_resources(log) if ok else [], log=trim_log(note(log)), artifact=str(lib) if ok else None,
        seconds=time.perf_counter() - start, cached=False, command=command,
    )
    return result, True


class CudaToolchain:
    """CUDA C++ through nvcc; the candidate may #include other files of its source dir."""

    language = "cuda"
    loader = "shared_library"
    runs_on_cpu = False
    traced_build = False
    stub_runs = False

    def __init__(self, *, cache_dir: Path | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.cache_dir = cache_dir
        """Where builds are kept; default: the out_dir given to build()."""
        self.timeout_s = timeout_s

    @staticmethod
    def flags(arch: str) -> list[str]:
        return ["-shared", "-Xcompiler", "-fPIC", "-O3", f"-arch={arch}", "-lineinfo", "-Xptxas", "-v",
                "-cudart", "static"]

    def available(self) -> str | None:
        return None  # nvcc's absence is the build's own diagnostic

    def compile_configs(self, task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a",
                        which: str = "all", timeout_s: float = 600) -> BuildResult | None:
        return None  # build compiles for the arch

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
