"""Triton: a candidate is a Python module, so its build is split where candidate code starts to run.

    parent (trusted)                    evaluation worker (sandboxed; runs candidate code)
    ─────────────────                   ───────────────────────────────────────────────────────────────
    TritonToolchain.build               trace_build(payload, progress)            (a worker job)
      syntax check of every .py           import the module, then
      (ast only, no import)               records = record_launches(lambda: entry(*args))
                                          kernels, diagnostics = compile_records(records, target)

record_launches intercepts every `@triton.jit` launch while a call runs: `InterpretedFunction.run` under
TRITON_INTERPRET=1 (CPU tensors), `JITFunction.run` otherwise (a GPU, or launch=False to trace without
running anything). compile_records compiles each distinct launch ahead of time for the target
(`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))` works with no GPU), with the same
specialization Triton's JIT would use, and reads registers and spills from `ptxas -v` (the ptxas inside
Triton's wheel) and shared memory from the compiled kernel's metadata.

Builds by content (the same snapshot compiles once):

    <cache>/builds/traced/<key>.json      the compile tool's result (kernels, diagnostics) for one snapshot:
                                          an unchanged workspace answers without a runner (traced_key)
    <cache>/builds/triton-jit/<key>/      the Triton cache entries one kernel's runners compiled, copied into
                                          each new runner of the same kernel (jit_store, judge/triton_cache.py)

Nothing here imports triton or torch at module import: the parent stays light.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import subprocess
import sys
import tempfile
import time
import traceback
import types
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..parsing import parse
from . import BuildResult, BuildTarget, Diagnostic, KernelResources
from .cuda import parse_ptxas, trim_log

if TYPE_CHECKING:
    from ..task import Task

Progress = Callable[[dict[str, Any]], None]
"""The worker's progress channel: small dicts with a "stage" key (see toolkit/jobs.py)."""


class TritonToolchain:
    """Parent side: a syntax check without importing; the worker does import + trace + compile."""

    language = "triton"
    loader = "python_module"
    runs_on_cpu = True
    traced_build = True
    stub_runs = False

    def available(self) -> str | None:
        return None  # a dependency of crucible itself

    def compile_configs(self, task: Task, source_dir: Path, file: str, *, arch: str = "sm_90a",
                        which: str = "all", timeout_s: float = 600) -> BuildResult | None:
        return None  # its kernels are made at launch: trace_build, in a worker

    def build(self, source_dir: Path, candidate: str, target: BuildTarget, out_dir: Path) -> BuildResult:
        start = time.perf_counter()
        source_dir = source_dir.resolve()
        files = sorted(p for p in source_dir.rglob("*.py") if p.is_file())
        rels = [p.relative_to(source_dir).as_posix() for p in files]
        diagnostics = [] if (source_dir / candidate).is_file() else [Diagnostic(
            file=candidate, message=f"{candidate} not found in the source directory; create it")]
        for path, rel in zip(files, rels, strict=True):
            try:
                parse(path.read_bytes(), filename=rel)
            except SyntaxError as e:
                diagnostics.append(Diagnostic(file=rel, line=e.lineno, column=e.offset, message=e.msg))
        log = "\n".join(f"{d.file}:{d.line}:{d.column}: error: {d.message}" for d in diagnostics)
        return BuildResult(
            ok=not diagnostics, language=self.language, target=target, diagnostics=diagnostics, log=log,
            artifact=str(source_dir / candidate), seconds=time.perf_counter() - start, cached=False,
            command=[sys.executable, "-m", "py_compile", *rels],
        )


# --- builds by content ----------------------------------------------------------------------------

TRACE_CACHE_VERSION = "1"
"""Bump when what a traced build reports changes in a way this module's source does not show."""


@functools.cache
def toolchain_versions() -> str:
    """What a Triton build depends on besides the kernel: Triton's and torch's versions and the source of
    this module (the tracing and the resource report), so a changed crucible never reuses an old build."""
    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "none"

    own = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    return f"triton {of('triton')} torch {of('torch')} trace {TRACE_CACHE_VERSION} {own}"


def content_key(*parts: str) -> str:
    """A cache key: the toolchain's versions and `parts` (the kernel's content digest, the target...)."""
    return hashlib.sha256("\0".join([toolchain_versions(), *parts]).encode()).hexdigest()[:32]


def jit_store(out_dir: Path, kind: str, content: str, target: BuildTarget) -> Path:
    """Where the Triton cache entries of one kernel's runners are kept: `kind` (candidate, baseline) keeps
    a candidate's builds from ever reaching a baseline's runner, even for the same source."""
    return out_dir / "triton-jit" / content_key(kind, content, target.model_dump_json())


def cached_trace(out_dir: Path, key: str) -> BuildResult | None:
    """The compile tool's earlier result for this key, marked cached."""
    path = out_dir / "traced" / f"{key}.json"
    try:
        earlier = BuildResult.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    return earlier.model_copy(update={"cached": True})


def store_trace(out_dir: Path, key: str, result: BuildResult) -> None:
    folder = out_dir / "traced"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(result.model_dump_json())
    os.replace(tmp, folder / f"{key}.json")  # whole or absent: a concurrent reader never sees half


# --- recording launches ----------------------------------------------------------------------------


class _TensorStandIn:
    """What the JIT's specializer reads of a tensor (dtype, alignment), without keeping its memory alive."""

    def __init__(self, tensor: Any) -> None:
        self.dtype = tensor.dtype
        self._ptr = int(tensor.data_ptr())
        self.shape = tuple(getattr(tensor, "shape", (1,)))

    def data_ptr(self) -> int:
        return self._ptr

    def ptr_range(self) -> int:
        return 0


def _stand_in(value: Any) -> Any:
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        return _TensorStandIn(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_stand_in(v) for v in value)
    return value


@dataclass
class LaunchRecord:
    """One distinct launch of a `@triton.jit` kernel (a live object: it stays in the worker process)."""

    kernel: Any
    """The JITFunction or InterpretedFunction that was launched."""
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    """Keyword arguments: kernel parameters and launch options (num_warps, num_stages, ...)."""
    signature: dict[str, str]
    """Parameter -> Triton type ("*fp32", "i32", "fp32", ...) or "constexpr"."""
    constexprs: dict[str, Any]
    launches: int = 1
    """How many times this exact specialization was launched during the call."""
    options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{k}={self.constexprs.get(k)!r}" if t == "constexpr" else t for k, t in self.signature.items()]
        parts += [f"{k}={v!r}" for k, v in self.options.items()]
        return f"{self.name}({', '.join(parts)})"


_SM90 = None  # the GPUTarget used for specialization at record time; built lazily (imports triton)


_binders: dict[tuple[int, str], tuple[Any, Callable[..., Any]]] = {}


def _binder_for(jit_fn: Any, gpu_target: Any) -> tuple[Any, Callable[..., Any]]:
    """Triton's argument binder for this kernel and target, built once (it exec()s generated code)."""
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    key = (id(jit_fn), repr(gpu_target))
    if key not in _binders:
        backend = make_backend(gpu_target)
        _binders[key] = backend, create_function_from_signature(jit_fn.signature, jit_fn.params, backend)
        _originals.append(jit_fn)  # keeps the id valid
    return _binders[key]


def _specialize(jit_fn: Any, gpu_target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Triton's own specialization of a launch: (options, signature, constexprs, attrs) as JITFunction.run."""
    backend, binder = _binder_for(jit_fn, gpu_target)
    kwargs = {"debug": jit_fn.debug, **kwargs}
    bound_args, specialization, options = binder(*args, **kwargs)
    return jit_fn._pack_args(backend, kwargs, bound_args, specialization, options)


def _record(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> LaunchRecord:
    from triton.backends.compiler import GPUTarget

    global _SM90
    _SM90 = _SM90 or GPUTarget("cuda", 90, 32)
    args = tuple(_stand_in(a) for a in args)
    kwargs = {k: _stand_in(v) for k, v in kwargs.items()}
    jit_fn = _as_jit_function(kernel)
    _, signature, constexprs, _ = _specialize(jit_fn, _SM90, args, kwargs)
    names = list(jit_fn.arg_names)
    const_by_name = {names[path[0]]: v for path, v in constexprs.items() if len(path) == 1}
    options = {k: v for k, v in kwargs.items() if k not in names}
    return LaunchRecord(kernel=kernel, name=jit_fn.__name__, args=args, kwargs=kwargs, signature=dict(signature),
                        constexprs=const_by_name, options=options)


def install_interpreter_fix() -> None:
    """Make Triton 3.x's interpreter undo its patches of triton.language after a @jit helper call.

    `InterpretedFunction.__call__` (a device-function call) patches triton.language for the interpreter
    and never restores it, so after any interpreted kernel that calls a helper, triton.compile in the
    same process fails with "'ir.value' object has no attribute 'dtype'". Idempotent; call it before
    running interpreted kernels in a process that will also compile (record_launches does).
    """
    from triton.runtime import interpreter

    cls = interpreter.InterpretedFunction
    if getattr(cls.__call__, "_crucible_restores", False):
        return

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        scope = interpreter._patch_lang(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised as Triton's own wrapper does
            raise interpreter.InterpreterError(repr(e)) from e
        finally:
            scope.restore()

    __call__._crucible_restores = True  # type: ignore[attr-defined]
    cls.__call__ = __call__  # type: ignore[method-assign]


def _interpreter_patches_left() -> bool:
    import triton.language as tl

    code = getattr(tl.tensor.__mul__, "__code__", None)
    return code is not None and code.co_filename.endswith("interpreter.py")


def record_launches(call: Callable[[], object], *, launch: bool = True,
                    into: list[LaunchRecord] | None = None) -> list[LaunchRecord]:
    """Run `call()` and return every distinct `@triton.jit` launch it made, in first-launch order.

    launch=False records without running the kernels (JITFunction only: a trace on a machine with no
    GPU and no interpreter; the call's outputs are then garbage). Exceptions of `call` propagate;
    pass `into` to keep what was recorded before one (records are appended to it as they happen).
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    install_interpreter_fix()
    seen: dict[tuple[int, str], LaunchRecord] = {}
    originals = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def intercept(cls: type) -> Callable[..., Any]:
        original = originals[cls]

        def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            if not warmup:
                record = _record(self, args, kwargs)
                key = (id(self), record.describe())
                if key in seen:
                    seen[key].launches += 1
                else:
                    seen[key] = record
                    if into is not None:
                        into.append(record)
                if not launch and cls is JITFunction:
                    return None
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        return run

    for cls in originals:
        cls.run = intercept(cls)  # type: ignore[method-assign]
    try:
        call()
    finally:
        for cls, original in originals.items():
            cls.run = original  # type: ignore[method-assign]
    return list(seen.values())


# --- interpreted kernels -> compilable twins ----------------------------------------------------------

_twins: dict[int, Any] = {}
"""id(InterpretedFunction or globals dict or module) -> its compilable twin."""
_originals: list[Any] = []
"""Keeps every twinned original alive, so an id in _twins is never reused by another object."""


def _as_jit_function(kernel: Any) -> Any:
    """A JITFunction for `kernel`. Under TRITON_INTERPRET=1 kernels are InterpretedFunctions, which
    triton.compile cannot take; their twin is a JITFunction over the same Python function whose globals
    show twins of the interpreted helpers too, so calls to them compile and their source enters
    Triton's cache key (the twin's key equals the one the JIT computes on a GPU)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    if not isinstance(kernel, InterpretedFunction):
        raise TypeError(f"not a @triton.jit kernel: {kernel!r}")
    if id(kernel) in _twins:
        return _twins[id(kernel)]
    twin = JITFunction(kernel.fn, **kernel.kwargs)
    _twins[id(kernel)] = twin  # before translating globals: a kernel may reach itself through them
    _originals.append(kernel)
    twin.__globals__ = _twin_of(kernel.fn.__globals__)
    nonlocals = {k: _twin_of(v) for k, v in inspect.getclosurevars(kernel.fn).nonlocals.items()}
    twin.get_capture_scope = lambda: twin.__globals__ | nonlocals  # type: ignore[method-assign]
    return twin


def _twin_of(value: Any) -> Any:
    """Interpreted kernels -> JIT twins; dicts and user modules holding them -> translated copies."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(value, InterpretedFunction):
        return _as_jit_function(value)
    # triton.language's own @jit functions (tl.zeros, tl.sum, tl.cdiv, ...) are interpreted too.
    name = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else ""
    translatable = name.startswith("triton.language") or (name and name.partition(".")[0] not in _LIBRARIES)
    if not isinstance(value, dict) and not translatable:
        return value
    if id(value) in _twins:
        return _twins[id(value)]
    scope = value if isinstance(value, dict) else vars(value)
    if isinstance(value, types.ModuleType) and not any(
            isinstance(v, InterpretedFunction) for v in scope.values()):
        return value
    translated: dict[str, Any] = {}
    twin: Any = translated if isinstance(value, dict) else types.ModuleType(value.__name__)
    _twins[id(value)] = twin
    _originals.append(value)
    for k, v in list(scope.items()):
        translated[k] = _twin_of(v) if isinstance(v, InterpretedFunction | types.ModuleType) else v
    if isinstance(twin, types.ModuleType):
        twin.__dict__.update(translated)
    return twin


_LIBRARIES = ("triton", "torch", "numpy", "builtins", "math", "os", "sys")


# --- compiling records --------------------------------------------------------------------------------


def _gpu_target(target: BuildTarget) -> Any:
    from triton.backends.compiler import GPUTarget

    if target.arch.startswith("sm_"):
        return GPUTarget("cuda", int(target.arch[3:].rstrip("a")), 32)
    return GPUTarget("hip", target.arch, 64)


def _ptxas_resources(ptx: str, name: str, enable_fp_fusion: bool) -> KernelResources:
    """Run Triton's own ptxas with -v on the kernel's PTX (the compiled object itself says nothing
    about registers until a GPU loads it)."""
    from triton.backends.nvidia.compiler import get_ptxas

    arch = next((line.split()[1] for line in ptx.splitlines() if line.startswith(".target")), "sm_90a")
    ptxas = get_ptxas(int(arch[3:].rstrip("a"))).path
    with tempfile.TemporaryDirectory(prefix="crucible-ptx-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        fmad = [] if enable_fp_fusion else ["--fmad=false"]
        proc = subprocess.run([ptxas, "-lineinfo", *fmad, "-v", f"--gpu-name={arch}", str(src), "-o",
                               str(Path(tmp) / "kernel.o")], capture_output=True, text=True, timeout=300,
                              check=False)
    found = parse_ptxas(proc.stderr + proc.stdout)
    return found[0] if found else KernelResources(name=name)


def _diagnostics_from_compile_error(err: BaseException, jit_fn: Any, source_dir: Path | None) -> list[Diagnostic]:
    """A CompilationError chain (outer: the call site in the kernel; inner: the failing line of a helper)
    -> one error at the innermost line, with notes for each call site above it."""
    from triton.compiler.errors import CompilationError
    from triton.runtime.jit import JITCallable, get_jit_fn_file_line

    by_src: dict[str, tuple[str, int]] = {}
    pending, visited = [jit_fn], set()
    while pending:  # every @jit function the kernel can reach, by its source text
        fn = pending.pop()
        if id(fn) in visited:
            continue
        visited.add(id(fn))
        by_src.setdefault(fn.src, get_jit_fn_file_line(fn))
        for value in fn.get_capture_scope().values():
            if isinstance(value, JITCallable):
                pending.append(value)
            elif isinstance(value, types.ModuleType) and value.__name__.partition(".")[0] != "triton":
                pending.extend(v for v in vars(value).values() if isinstance(v, JITCallable))

    chain: list[CompilationError] = []
    cur: BaseException | None = err
    while isinstance(cur, CompilationError):
        chain.append(cur)
        cur = cur.__cause__
    out: list[Diagnostic] = []
    for i, e in enumerate(chain):
        file, begin = by_src.get(e.src or "", (None, None))
        lineno = getattr(e.node, "lineno", None)
        line = begin + lineno - 1 if begin is not None and lineno is not None else None
        col = getattr(e.node, "col_offset", None)
        innermost = i == len(chain) - 1
        message = e.error_message or (repr(cur) if innermost and cur is not None else "in this call")
        out.append(Diagnostic(file=_rel(file, source_dir) if file else "<unknown>", line=line,
                              column=col + 1 if col is not None else None,
                              severity="error" if innermost else "note", message=message))
    return out[::-1]  # the error first, then where it was called from


def _rel(file: str, source_dir: Path | None) -> str:
    if source_dir is None:
        return file
    try:
        return Path(file).resolve().relative_to(source_dir.resolve()).as_posix()
    except ValueError:
        return file


def compile_records(records: list[LaunchRecord], target: BuildTarget | str, *, source_dir: Path | None = None,
                    progress: Progress | None = None) -> tuple[list[KernelResources], list[Diagnostic]]:
    """Compile each recorded launch for `target` (no GPU needed) -> resources per kernel, diagnostics.

    target: a BuildTarget or just its arch ("sm_90", "gfx942"). source_dir, when given, makes
    diagnostic paths relative to it (else they are absolute). Kernel names are the launch's
    description: `add_kernel(*fp32, *fp32, *fp32, i32, BLOCK=1024)`.
    """
    if isinstance(target, str):
        target = BuildTarget(backend="rocm" if target.startswith("gfx") else "cuda", arch=target)
    import triton
    from triton import knobs
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError

    if _interpreter_patches_left():
        raise RuntimeError("triton.language is still patched by Triton's interpreter, so nothing compiles in "
                           "this process: call install_interpreter_fix() before running interpreted kernels")
    gpu_target = _gpu_target(target)
    kernels: list[KernelResources] = []
    diagnostics: list[Diagnostic] = []
    with knobs.runtime.scope():
        knobs.runtime.interpret = False  # some constexpr handling differs under the interpreter
        for record in records:
            if progress:
                progress({"stage": "compile", "kernel": record.describe(), "arch": target.arch})
            jit_fn = _as_jit_function(record.kernel)
            try:
                options, signature, constexprs, attrs = _specialize(jit_fn, gpu_target, record.args, record.kwargs)
                compiled = triton.compile(ASTSource(jit_fn, signature, constexprs, attrs), target=gpu_target,
                                          options=options.__dict__)
            except CompilationError as e:
                diagnostics.extend(_diagnostics_from_compile_error(e, jit_fn, source_dir))
                continue
            except Exception as e:  # noqa: BLE001 - Triton's backends raise many types; each is the agent's to read
                file, line = _jit_location(jit_fn, source_dir)
                diagnostics.append(Diagnostic(file=file, line=line, message=f"{record.name}: Triton failed to "
                                              f"compile this kernel: {type(e).__name__}: {trim_log(str(e), 4000)}"))
                continue
            name = record.describe()
            if "ptx" in compiled.asm:
                res = _ptxas_resources(compiled.asm["ptx"], name, options.enable_fp_fusion)
            else:
                res = KernelResources(name=name)
            kernels.append(res.model_copy(update={"name": name, "shared_bytes": compiled.metadata.shared}))
    return kernels, diagnostics


def _jit_location(jit_fn: Any, source_dir: Path | None) -> tuple[str, int | None]:
    from triton.runtime.jit import get_jit_fn_file_line

    file, line = get_jit_fn_file_line(jit_fn)
    return _rel(file, source_dir), line


# --- the worker job --------------------------------------------------------------------------------


def _diagnostic_from_exception(exc: BaseException, source_dir: Path, candidate: str) -> Diagnostic:
    """The innermost frame inside source_dir, across the exception's chain (the interpreter wraps the
    kernel's own error twice), gives file:line; the innermost exception gives the message."""
    file, line = candidate, None
    innermost: BaseException = exc
    cur: BaseException | None = exc
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        innermost = cur
        for frame in traceback.extract_tb(cur.__traceback__):
            rel = _rel(frame.filename, source_dir)
            if not Path(rel).is_absolute() and not rel.startswith("<"):
                file, line = rel, frame.lineno
        cur = cur.__cause__ or cur.__context__
    return Diagnostic(file=file, line=line, message=f"{type(innermost).__name__}: {trim_log(str(innermost), 4000)}")


def import_candidate(path: Path) -> types.ModuleType:
    """Import a module from its file (its directory first on sys.path, for sibling imports)."""
    path = path.resolve()
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"crucible_candidate_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _load_callable(spec: str) -> Callable[..., Any]:
    """`package.module:function` or `path/to/file.py:function` (trusted code: the task's input maker)."""
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        path = Path(where).resolve()
        mod_spec = importlib.util.spec_from_file_location(f"crucible_inputs_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def trace_build(payload: dict[str, Any], progress: Progress | None = None) -> dict[str, Any]:
    """Worker job: import the candidate, trace one small call, compile what it launched.

    payload:
      source_dir   the snapshot's directory          candidate  e.g. "kernel.py"
      entry        the function to call              target     BuildTarget as a dict
      inputs       "module:function" or "file.py:function" (trusted) returning the entry's positional
                   arguments (a list/tuple), called with payload["inputs_kwargs"] (default {})
      interpret    run kernels in Triton's interpreter (default: true when target.backend == "cpu")
      launch       false: record without running kernels (no GPU, no interpreter; default true)
    Returns BuildResult as a JSON-able dict (artifact: the module path).
    """
    start = time.perf_counter()
    target = BuildTarget.model_validate(payload["target"])
    source_dir = Path(payload["source_dir"]).resolve()
    candidate = str(payload["candidate"])
    interpret = bool(payload.get("interpret", target.backend == "cpu"))
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"  # read by @triton.jit when the candidate module is imported

    def result(ok: bool, kernels: list[KernelResources], diagnostics: list[Diagnostic], log: str = "") -> dict:
        return BuildResult(ok=ok, language="triton", target=target, diagnostics=diagnostics, kernels=kernels,
                           log=trim_log(log), artifact=str(source_dir / candidate),
                           seconds=time.perf_counter() - start, cached=False,
                           command=["trace_build", str(source_dir / candidate), str(payload["entry"])],
                           ).model_dump(mode="json")

    if progress:
        progress({"stage": "import", "file": candidate})
    # Candidate code runs from here on; any exception is the candidate's and becomes a diagnostic.
    try:
        module = import_candidate(source_dir / candidate)
        entry = getattr(module, str(payload["entry"]), None)
        if entry is None:
            return result(False, [], [Diagnostic(file=candidate, message=f"{candidate} defines no function "
                                                 f"`{payload['entry']}`; the task calls that entry point")])
        args = _load_callable(str(payload["inputs"]))(**payload.get("inputs_kwargs", {}))
    except Exception as e:  # noqa: BLE001 - candidate code may raise anything; the agent reads it
        return result(False, [], [_diagnostic_from_exception(e, source_dir, candidate)], traceback.format_exc())
    if progress:
        progress({"stage": "trace", "entry": str(payload["entry"])})
    records: list[LaunchRecord] = []
    try:
        record_launches(lambda: entry(*args), launch=bool(payload.get("launch", True)), into=records)
    except Exception as e:  # noqa: BLE001 - as above
        # Under the interpreter a kernel that would not compile fails while running; compiling what was
        # launched so far gives Triton's own compile error, the one a GPU run would show.
        kernels, diagnostics = compile_records(records, target, source_dir=source_dir, progress=progress)
        failure = _diagnostic_from_exception(e, source_dir, candidate)
        if any(d.severity == "error" for d in diagnostics):
            failure = failure.model_copy(update={"severity": "note",
                                                 "message": f"while tracing: {failure.message}"})
        return result(False, kernels, [*diagnostics, failure], traceback.format_exc())
    if not records:
        return result(False, [], [Diagnostic(file=candidate, message=f"`{payload['entry']}` launched no "
                                             "@triton.jit kernel; a Triton candidate must launch one")])
    kernels, diagnostics = compile_records(records, target, source_dir=source_dir, progress=progress)
    log = "\n".join(f"{r.launches} x {r.describe()}" for r in records)
    return result(not any(d.severity == "error" for d in diagnostics), kernels, diagnostics, log)
