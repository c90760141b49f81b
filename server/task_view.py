"""The visible task, as `get_task` shows it: built from task.toml and PROMPT.md only.

Nothing here reads `task.hidden` or the solution file; tests/test_server.py checks the output for both.
"""

from __future__ import annotations

from pathlib import Path

from crucible.toolkit.evaluation import Backend, build_target
from crucible.toolkit.task import DEFAULT_TOLERANCE, Task
from crucible.toolkit.toolchains import get_toolchain

from .models import Argument, ConfigInfo, DeviceView, LimitsInfo, MetricsInfo, TaskInfo, ToleranceInfo
from .session import ToolLimits

C_TYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
           "int32": "int32_t", "int64": "int64_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}
HIP_TYPES = {**C_TYPES, "bfloat16": "__hip_bfloat16"}


def _c_type(dtype: str, language: str) -> str:
    if dtype.startswith("{"):
        return "T"  # taken from the config; the calling convention says so
    return (HIP_TYPES if language == "hip" else C_TYPES).get(dtype, dtype)


def signature_text(task: Task) -> tuple[str, str]:
    """(signature, calling convention) in the candidate's language."""
    spec = task.spec
    sig = spec.signature
    if get_toolchain(spec.language).loader == "python_module":  # Triton, CuTe DSL
        names = [t.name for t in sig.inputs + sig.outputs]
        params = [p.name for p in sig.params]
        text = f"def {spec.entry}({', '.join(names)}" + (f", *, {', '.join(params)}" if params else "") + ")"
        convention = (f"{spec.entry}(*inputs, *outputs, **params): inputs and outputs are torch tensors on the "
                      "device, params are keyword arguments; write every element of the outputs (they are "
                      "poisoned before each call) and return None. Do not call the reference.")
        return text, convention
    stream = "hipStream_t" if spec.language == "hip" else "cudaStream_t"
    args = ([f"const {_c_type(t.dtype, spec.language)}* {t.name}" for t in sig.inputs]
            + [f"{_c_type(t.dtype, spec.language)}* {t.name}" for t in sig.outputs]
            + [f"{_c_type(p.type, spec.language)} {p.name}" for p in sig.params] + [f"{stream} stream"])
    text = f'extern "C" int {spec.entry}({", ".join(args)})'
    convention = ("device pointers to contiguous tensors, then the params, then the stream to launch on; "
                  "write every element of the outputs and return 0 (a nonzero return is an error code)"
                  + ("; T is the config's dtype" if "T" in text.split("(", 1)[1] else ""))
    return text, convention


def task_info(task: Task, workspace: Path, backend: Backend, limits: ToolLimits) -> TaskInfo:
    spec = task.spec
    sig = spec.signature
    signature, convention = signature_text(task)
    arguments = ([Argument(name=t.name, role="input", dtype=t.dtype) for t in sig.inputs]
                 + [Argument(name=t.name, role="output", dtype=t.dtype, shape=list(t.shape)) for t in sig.outputs]
                 + [Argument(name=p.name, role="param", dtype=p.type) for p in sig.params])
    tolerances = [ToleranceInfo(dtype=d, atol=spec.tolerance.for_dtype(d).atol, rtol=spec.tolerance.for_dtype(d).rtol)
                  for d in DEFAULT_TOLERANCE]
    lim = spec.limits
    return TaskInfo(
        id=spec.id, title=spec.title, category=spec.category, language=spec.language,
        prompt=task.file("PROMPT.md").read_text(), entry=spec.entry, signature=signature,
        calling_convention=convention, arguments=arguments, candidate_file=spec.candidate,
        baseline_file=spec.baseline, reference_file="reference.py",
        configs=[ConfigInfo(name=c.name, values=dict(c.values)) for c in spec.configs],
        tolerances=tolerances, tolerance_reason=spec.tolerance.reason or "the defaults",
        seeds=spec.seeds, metrics=MetricsInfo(flops=spec.metrics.flops, bytes=spec.metrics.bytes),
        forbidden_ops=list(spec.forbid_ops),
        device=DeviceView(backend=backend, arch=build_target(backend).arch, timing_comparable=backend != "cpu"),
        limits=LimitsInfo(worker_timeout_s=lim.timeout_s, memory_mb=lim.memory_mb,
                          tool_limits_s=limits.model_dump()),
        workspace=str(workspace.resolve()))
