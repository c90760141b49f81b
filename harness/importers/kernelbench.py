"""KernelBench problems -> PyTorch-to-kernel tasks.

    problem.py (a `Model`, `get_inputs()`, `get_init_inputs()`, module-level numbers)
      -> kernelbench_trace, in a subprocess: each number a size or fixed, the visible config (the file's own
         numbers) and the hidden configs (the rules' candidates that trace), all on meta tensors
      -> names: a config value per number of the file (`batch_size`, `kernel_size`), an output axis named
         after the size it follows in every config, else a value per config (`out_dim2`)
      -> tasks/<category>/<slug>/: task.toml, hidden.toml, reference.py (the problem's code verbatim + glue),
         stub, PROMPT.md, imported.json (what was decided, for `crucible tasks validate`), and solution.*
         only when the user gives one

The reference re-executes the problem file with a config's numbers in place of its own, so everything the
file computes from them (a bias shape, the inputs' ranges) follows; it draws the inputs with the file's own
get_inputs() and runs the Model in eval mode. The Model's parameters and buffers are inputs of the task: the
candidate is a kernel, called destination-passing style, and cannot see inside a module.

A batch import reports every refusal with its reason and goes on with the next problem.
"""

from __future__ import annotations

import json
import keyword
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from crucible.toolkit.validation import IMPORT_RECORD as RECORD

from . import ImporterError
from .kernelbench_rules import DEFAULT_RULES, Rules, load_rules
from .kernelbench_trace import Analysis, RefusalReason

RESERVED = {"dtype", "model_flops", "model_bytes", "name", "itemsize", "min", "max", "cdiv"}
C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double",
           "int64": "int64_t", "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}
TRACE_TIMEOUT_S = 600
LANG_TITLE = {"triton": "Triton", "cuda": "CUDA"}
GLUE_MARKER = "# ---------------------------------------------------------------- task glue, by `crucible import kernelbench`"


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Outcome(Model):
    """One problem of a batch: imported, or refused with its reason."""

    path: str
    status: str
    """imported | refused"""
    reason: RefusalReason | None = None
    message: str = ""
    task: str | None = None
    """The task id, when imported."""
    hidden: int = 0
    sizes: list[str] = []
    fixed: list[str] = []
    dropped: list[str] = []


class Record(Model):
    """imported.json: what the importer decided, read by `crucible tasks validate`."""

    source: str
    rules: str
    sizes: list[str]
    """Config keys of the sizes (every hidden config must change each)."""
    follows: dict[str, str]
    """A size the file spells twice -> the size it equals."""
    fixed: list[str]
    variables: dict[str, str]
    """Config key -> the problem file's name for it."""
    why: dict[str, str]
    """Config key -> why it is a size or fixed."""
    dropped: list[str]


class ImportRefused(ImporterError):
    def __init__(self, reason: RefusalReason, message: str):
        super().__init__(message)
        self.reason = reason


# ---------------------------------------------------------------- the trace, in a subprocess

def _trace_env() -> dict[str, str]:
    import os

    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # shapes on meta tensors; nothing needs a GPU


def run_trace(path: Path, rules: Rules) -> Analysis:
    with tempfile.TemporaryDirectory(prefix="crucible-import-") as tmp:
        rules_json, out = Path(tmp) / "rules.json", Path(tmp) / "out.json"
        rules_json.write_text(rules.model_dump_json())
        cmd = [sys.executable, "-m", "crucible.harness.importers.kernelbench_trace", str(path.resolve()),
               str(rules_json), str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TRACE_TIMEOUT_S, cwd=tmp,
                                  env=_trace_env())
        except subprocess.TimeoutExpired:
            raise ImportRefused("timeout", f"tracing the problem took over {TRACE_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip()[-2000:]
            raise ImportRefused("load_error", f"running the problem file failed:\n{tail}")
        data = json.loads(out.read_text())
    if "refusal" in data:
        raise ImportRefused(data["refusal"]["reason"], data["refusal"]["message"])
    return Analysis.model_validate(data)


# ---------------------------------------------------------------- names and configs

def _identifier(name: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit():
        name = "m_" + name
    while name in taken or keyword.iskeyword(name) or name in RESERVED:
        name += "_"
    taken.add(name)
    return name


def slug(path: Path) -> str:
    """The task's folder name: the file's stem, after `kb<N>_` when it sits in KernelBench's `level<N>`."""
    stem = re.sub(r"[^a-z0-9_\-]+", "_", path.stem.lower()).strip("_") or "problem"
    level = re.fullmatch(r"level(\d+)", path.parent.name)
    return f"kb{level.group(1)}_{stem}" if level else stem


class Plan(Model):
    """The task's names, from an Analysis."""

    slug: str
    keys: dict[str, str]
    """The problem's number -> its config key (the same name unless reserved)."""
    forward: list[tuple[str, str]]
    """forward()'s arguments in order: (kind, name), kind `tensor` or `param`."""
    inputs: list[dict[str, Any]]
    """Signature inputs: forward's tensors, then the state (name, dtype, perturb, shape, key)."""
    outputs: list[dict[str, Any]]
    """name, dtype, shape (config keys or ints)."""
    params: list[dict[str, str]]
    configs: list[dict[str, Any]]
    dtype: str


def _axis_name(where: str, values: list[int], analysis: Analysis, keys: dict[str, str]) -> str | int | None:
    """The size an axis follows in every config (the trace says which, when sizes tie), else None."""
    if len(set(values)) == 1:
        return values[0]
    sizes = [v for v in analysis.variables if v.role == "size"]
    fits = [v for v in sizes if all(c.values[v.name] == x for c, x in zip(analysis.configs, values, strict=True))]
    if len(fits) > 1:
        fits = [v for v in fits if where in v.moves] or fits
        fits = [v for v in fits if v.follows is None] if len(fits) > 1 else fits
    return keys[fits[0].name] if len(fits) == 1 else None


def plan_task(path: Path, analysis: Analysis) -> Plan:
    taken: set[str] = set()
    keys = {v.name: _identifier(v.name.replace("[", "_").replace("]", ""), taken) for v in analysis.variables}
    visible = analysis.configs[0].trace
    names = analysis.forward_names + [f"x{i}" for i in range(len(analysis.forward_names), len(visible.inputs))]
    configs = [{"name": c.name, "dtype": "float32", **{keys[k]: v for k, v in c.values.items()}}
               for c in analysis.configs]
    forward: list[tuple[str, str]] = []
    inputs: list[dict[str, Any]] = []
    params = [{"name": keys[v.name], "type": "float64" if isinstance(v.value, float) else "int64"}
              for v in analysis.variables]
    for i, (fname, info) in enumerate(zip(names, visible.inputs, strict=False)):
        name = _identifier(fname, taken)
        if info.kind == "scalar":
            forward.append(("param", name))
            params.append({"name": name, "type": "float64" if isinstance(info.value, float) else "int64"})
            for conf, c in zip(configs, analysis.configs, strict=True):
                conf[name] = c.trace.inputs[i].value
            continue
        forward.append(("tensor", name))
        shape: list[str | int] = []
        for axis in range(len(info.shape)):
            named = _axis_name(f"in{i}.{axis}", [c.trace.inputs[i].shape[axis] for c in analysis.configs],
                               analysis, keys)
            shape.append(named if named is not None else "?")
        inputs.append({"name": name, "dtype": info.dtype, "perturb": info.perturb, "shape": shape})
    for s in visible.state:
        inputs.append({"name": _identifier(s.key.replace(".", "_"), taken), "dtype": s.dtype, "perturb": False,
                       "shape": s.shape, "key": s.key, "parameter": s.parameter})
    n_out = len(visible.outputs)
    outputs = []
    for k, info in enumerate(visible.outputs):
        name = _identifier("out" if n_out == 1 else f"out{k}", taken)
        shape = []
        for axis in range(len(info.shape)):
            values = [c.trace.outputs[k].shape[axis] for c in analysis.configs]
            named = _axis_name(f"out{k}.{axis}", values, analysis, keys)
            if named is None:  # no size explains it (a convolution's H - k + 1): a value per config
                named = _identifier(f"{name}_dim{axis}", taken)
                for conf, v in zip(configs, values, strict=True):
                    conf[named] = v
            shape.append(named)
        outputs.append({"name": name, "dtype": info.dtype, "shape": shape or [1], "scalar": not info.shape})
    floats = [i["dtype"] for i in inputs if "key" not in i and i["dtype"].startswith(("float", "bfloat"))]
    dtype = floats[0] if floats else "float32"
    for conf, c in zip(configs, analysis.configs, strict=True):
        conf["dtype"] = dtype
        conf["model_flops"] = c.trace.flops
        conf["model_bytes"] = c.trace.total_bytes()
    return Plan(slug=slug(path), keys=keys, forward=forward, inputs=inputs, outputs=outputs, params=params,
                configs=configs, dtype=dtype)


# ---------------------------------------------------------------- writing the task

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {v!r} as TOML")


def _config_tables(configs: list[dict[str, Any]]) -> str:
    return "\n".join("[[configs]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in c.items())
                     for c in configs)


def task_toml(plan: Plan, category: str, source: Path, rules_path: Path, solution: str | None,
              tags: list[str]) -> str:
    lang, suffix = ("triton", ".py") if category == "torch2triton" else ("cuda", ".cu")
    inputs = [{"name": i["name"], "dtype": i["dtype"], "perturb": i["perturb"]} for i in plan.inputs]
    outs = [{"name": o["name"], "dtype": o["dtype"], "shape": o["shape"]} for o in plan.outputs]
    lines = [f"# Imported from KernelBench problem {source.name} by `crucible import kernelbench` "
             f"(rules: {rules_path.name}).",
             "# Shapes, model_flops and model_bytes were traced per config on meta tensors; to change the configs,",
             "# edit the rules and import again.",
             f'id = "{category}/{plan.slug}"',
             f"title = {json.dumps(f'{source.stem} (KernelBench, PyTorch to {LANG_TITLE[lang]})')}",
             f'category = "{category}"', f'language = "{lang}"', 'entry = "entry"',
             f'candidate = "kernel{suffix}"', f'stub = "stub{suffix}"']
    if solution:
        lines.append(f'solution = "{solution}"')
    else:
        lines.append("# solution: none yet; `crucible tasks validate` proves what it can without one")
    lines += ["seeds = 3", f"tags = {_toml_value(tags)}", "", "[signature]",
              "inputs = [\n" + "".join(f"    {_toml_value(i)},\n" for i in inputs) + "]",
              "outputs = [\n" + "".join(f"    {_toml_value(o)},\n" for o in outs) + "]",
              "params = [\n" + "".join(f"    {_toml_value(p)},\n" for p in plan.params) + "]", "",
              _config_tables(plan.configs[:1]), "[metrics]",
              'flops = "model_flops"   # FlopCounterMode (matmuls and convolutions; elementwise ops count 0)',
              'bytes = "model_bytes"   # every input (weights included) read once, every output written once', ""]
    return "\n".join(lines)


def hidden_toml(plan: Plan, rules_path: Path) -> str:
    return (f"# Hidden configs of an imported KernelBench problem, made by the rules in {rules_path.name}.\n"
            "# Edit the rules and import again rather than this file: output dims, model_flops and\n"
            "# model_bytes were traced per config.\n\n" + _config_tables(plan.configs[1:]))


GLUE = '''

{marker}
# Above: the problem file {source}, verbatim. Below: how the task runs it. A config's numbers replace the
# file's own (everything computed from them follows), get_inputs() draws the inputs, the Model runs in eval
# mode, and its parameters and buffers are inputs of the task: a kernel cannot see inside a module.
import ast as _ast  # noqa: E402
import contextlib as _contextlib  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

import torch as _torch  # noqa: E402
from torch.func import functional_call as _functional_call  # noqa: E402

_NUMBERS = {numbers!r}  # config key -> the file's name for it
_FORWARD = {forward!r}  # forward()'s arguments: (tensor | param, name)
_STATE = {state!r}  # the Model's parameters and buffers: (its name, the task input's name)
_FP32 = {fp32!r}  # the reference computes in float32: no TF32 in matmuls or cuDNN
_SCALAR_OUTPUTS = {scalars!r}  # 0-dim outputs are passed as [1] tensors
_NAMESPACES: dict = {{}}
_SKELETONS: dict = {{}}


def _problem(config: dict) -> dict:
    """The problem file executed with the config's numbers in place of its own."""
    key = tuple(config[k] for k in _NUMBERS)
    if key not in _NAMESPACES:
        source = _Path(__file__).read_text().partition("\\n{marker}\\n")[0]
        overrides = {{name: config[k] for k, name in _NUMBERS.items()}}
        ns: dict = {{"__name__": __name__, "__file__": __file__}}  # classes named after an importable module
        for stmt in _ast.parse(source).body:
            exec(compile(_ast.Module([stmt], type_ignores=[]), __file__, "exec"), ns)  # noqa: S102
            targets = stmt.targets if isinstance(stmt, _ast.Assign) else [getattr(stmt, "target", None)]
            for name in [t.id for t in targets if isinstance(t, _ast.Name)]:
                if name in overrides:
                    ns[name] = overrides[name]
                elif isinstance(ns.get(name), tuple | list):  # elements of a tuple of sizes: `shape[0]`
                    value = [overrides.get(f"{{name}}[{{i}}]", v) for i, v in enumerate(ns[name])]
                    ns[name] = type(ns[name])(value)
        _NAMESPACES[key] = ns
    return _NAMESPACES[key]


def _rng(device: _torch.device):
    return _torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else [])


def make_inputs(config: dict, gen: _torch.Generator, device: _torch.device) -> dict[str, _torch.Tensor]:
    """The file's get_inputs() on the config's numbers, then the Model's parameters and buffers from its
    own initialisation, both seeded from this generator."""
    ns = _problem(config)
    device = _torch.device(device)
    out = {{}}
    with _rng(device):
        _torch.manual_seed(gen.initial_seed())
        with _torch.device(device):
            values = list(ns["get_inputs"]())
        for (kind, name), value in zip(_FORWARD, values, strict=True):
            if kind == "tensor":
                out[name] = value.to(device).contiguous()
        if _STATE:
            with _torch.device(device):
                model = ns["Model"](*ns["get_init_inputs"]())
            state = dict(model.named_parameters()) | dict(model.named_buffers())
            for key, name in _STATE:
                t = state[key].detach()
                if t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all()):
                    # A constant init (a norm's ones and zeros) would let a kernel that ignores it pass.
                    t = t + 0.1 * _torch.randn(t.shape, dtype=_torch.float32, device=device).to(t.dtype)
                out[name] = t.contiguous()
    return out


def _skeleton(ns: dict, device: _torch.device):
    """The Model in eval mode, its tensors empty: functional_call supplies every parameter and buffer."""
    key = (id(ns), str(device))
    if key not in _SKELETONS:
        with _torch.device("meta"):
            model = ns["Model"](*ns["get_init_inputs"]())
        _SKELETONS[key] = model.to_empty(device=device).eval()
    return _SKELETONS[key]


@_contextlib.contextmanager
def _precise():
    saved = (_torch.backends.cuda.matmul.allow_tf32, _torch.backends.cudnn.allow_tf32)
    if _FP32:
        _torch.backends.cuda.matmul.allow_tf32 = _torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        _torch.backends.cuda.matmul.allow_tf32, _torch.backends.cudnn.allow_tf32 = saved


@_torch.no_grad()
def reference({signature}):
    """The Model's forward() in eval mode with the given parameters and buffers (eager PyTorch: the baseline)."""
    config = {{{config}}}
    model = _skeleton(_problem(config), {first}.device)
    state = {{{state_args}}}
    with _precise():
        out = _functional_call(model, state, ({forward_args},))
    outs = tuple(out) if isinstance(out, tuple | list) else (out,)
    outs = tuple(o.reshape(1) if s else o for o, s in zip(outs, _SCALAR_OUTPUTS, strict=True))
    return outs if len(outs) > 1 else outs[0]
'''


def reference_py(plan: Plan, source_text: str, source: Path) -> str:
    tensors = plan.inputs
    kw = ", ".join(f"{p['name']}: {'int' if p['type'] == 'int64' else 'float'}" for p in plan.params)
    signature = ", ".join(f"{i['name']}: _torch.Tensor" for i in tensors) + (", *, " + kw if kw else "")
    state = [(i["key"], i["name"]) for i in plan.inputs if "key" in i]
    glue = GLUE.format(
        marker=GLUE_MARKER, source=source.name, numbers={k: n for n, k in plan.keys.items()},
        forward=plan.forward, state=state, fp32=plan.dtype == "float32",
        scalars=[o["scalar"] for o in plan.outputs],
        signature=signature, config=", ".join(f"{k!r}: {k}" for k in plan.keys.values()),
        first=tensors[0]["name"], state_args=", ".join(f"{k!r}: {n}" for k, n in state),
        forward_args=", ".join(n for _, n in plan.forward))
    header = (f"# {source.stem}: a KernelBench problem, imported by `crucible import kernelbench`. The code down "
              "to the task glue is the problem file.\n\n")
    return header + source_text.rstrip() + "\n" + glue


def _shape_text(dims: list[str | int]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def stub_source(plan: Plan, category: str) -> str:
    tensors = [i["name"] for i in plan.inputs]
    outputs = [o["name"] for o in plan.outputs]
    if category == "torch2triton":
        args = ", ".join([f"{n}: torch.Tensor" for n in tensors + outputs])
        kw = ", ".join(f"{p['name']}: {'int' if p['type'] == 'int64' else 'float'}" for p in plan.params)
        return (f'"""{plan.slug} in Triton: write your kernel here (see PROMPT.md for the Model it computes)."""\n\n'
                "import torch\nimport triton  # noqa: F401\nimport triton.language as tl  # noqa: F401\n\n\n"
                f"def entry({args}{', *, ' + kw if kw else ''}) -> None:\n"
                f'    """Write Model.forward\'s result into {", ".join(outputs)} (preallocated); return None."""\n'
                '    raise NotImplementedError("write a Triton kernel and launch it from entry()")\n')
    ptrs = [f"const {C_TYPES.get(i['dtype'], 'float')}* {i['name']}" for i in plan.inputs]
    ptrs += [f"{C_TYPES.get(o['dtype'], 'float')}* {o['name']}" for o in plan.outputs]
    ptrs += [f"{'int64_t' if p['type'] == 'int64' else 'double'} {p['name']}" for p in plan.params]
    return (f"// {plan.slug} in CUDA: write your kernel here (see PROMPT.md for the Model it computes).\n"
            "#include <cstdint>\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n"
            f'extern "C" int entry({", ".join(ptrs)}, cudaStream_t stream) {{\n'
            "    // Launch your kernel on `stream`, then return (int)cudaGetLastError().\n"
            "    return (int)cudaErrorNotYetImplemented;\n}\n")


def prompt_md(plan: Plan, analysis: Analysis, category: str, source: Path, source_text: str) -> str:
    visible = plan.configs[0]
    lang = "Triton" if category == "torch2triton" else "CUDA"
    rows = []
    for i in plan.inputs:
        what = f"the Model's `{i['key']}`" if "key" in i else "input"
        rows.append(f"| `{i['name']}` | {what} | {i['dtype']} | {_shape_text(i['shape'])} |")
    rows += [f"| `{o['name']}` | output | {o['dtype']} | {_shape_text(o['shape'])} |" for o in plan.outputs]
    sizes = [v for v in analysis.variables if v.role == "size"]
    fixed = [v for v in analysis.variables if v.role == "fixed"]
    size_text = ", ".join(f"`{plan.keys[v.name]}` = {visible[plan.keys[v.name]]}" for v in sizes)
    fixed_text = ", ".join(f"`{plan.keys[v.name]}` = {v.value}" for v in fixed) or "none"
    per_config = sorted({d for o in plan.outputs for d in o["shape"] if isinstance(d, str)
                         and d not in plan.keys.values()})
    call = ("`entry(*inputs, *outputs, **params)`: a Python function that launches Triton kernels, writes "
            "every element of the outputs and returns None" if lang == "Triton" else
            '`extern "C" int entry(const T* inputs..., T* outputs..., params..., cudaStream_t stream)`: launch '
            "on `stream` and return `(int)cudaGetLastError()`; params are `int64_t` / `double`")
    extra = (f" Output sizes that no single number gives ({', '.join(f'`{d}`' for d in per_config)}) are "
             "config values too." if per_config else "")
    return f"""# {source.stem} (KernelBench), in {lang}

Write a {lang} kernel that computes `Model.forward` of the PyTorch module below, a KernelBench problem
({source.name}), in eval mode, as fast as you can. Your kernel is timed against eager PyTorch running the Model.

```python
{source_text.strip()}
```

## Calling convention

Your `kernel.{'py' if lang == 'Triton' else 'cu'}` exports {call}. The harness allocates the outputs and
fills them with NaN before each call; inputs are read-only. The Model's parameters and buffers are passed as
inputs (named after them), in this order (`?`: an axis no single number gives):

| name | what | dtype | shape |
| --- | --- | --- | --- |
{chr(10).join(rows)}

Params (passed by name after the tensors): every module-level number of the file,
{", ".join(f"`{p['name']}`" for p in plan.params) or "none"}. A 0-dim output of the Model is a tensor of shape [1].{extra}

## Configs and checking

The visible config is the problem's own. Sizes: {size_text}. Hidden configs change every size (half,
double, odd and tail sizes, sizes that differ from each other) and are scored after the session: do not
hard-code them. Fixed in every config: {fixed_text}. Outputs must match the reference elementwise within
the default tolerances (float32: atol = rtol = 1e-4; float16: 1e-2; bfloat16: 2e-2): compute in the inputs'
precision or better, no TF32 for float32 data (the reference runs with TF32 off, cuDNN included). Calling
PyTorch to do the work is not a kernel.
"""


def _write(folder: Path, files: dict[str, str], force: bool) -> None:
    if folder.exists():
        if not force:
            raise ImportRefused("exists", f"{folder} exists; pass --force to overwrite it, or choose another --out")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def record(plan: Plan, analysis: Analysis, source: Path, rules_path: Path) -> Record:
    keys = plan.keys
    sizes = [v for v in analysis.variables if v.role == "size"]
    return Record(source=source.name, rules=rules_path.name,
                  sizes=[keys[v.name] for v in sizes],
                  follows={keys[v.name]: keys[v.follows] for v in sizes if v.follows},
                  fixed=[keys[v.name] for v in analysis.variables if v.role == "fixed"],
                  variables={k: n for n, k in keys.items()}, why={keys[v.name]: v.why for v in analysis.variables},
                  dropped=analysis.dropped)


def import_problem(path: Path, out: Path, category: str = "torch2triton", rules: Path | None = None,
                   solution: Path | None = None, force: bool = False) -> tuple[Path, Plan, Analysis]:
    """Import one problem file; raises ImportRefused (with its reason) when it cannot."""
    path = Path(path)
    if not path.is_file():
        raise ImportRefused("not_a_problem", f"no problem file {path}")
    if category not in ("torch2triton", "torch2cuda"):
        raise ImporterError(f"category {category!r}: choose torch2triton or torch2cuda")
    rules_path = Path(rules) if rules else DEFAULT_RULES
    loaded = load_rules(rules_path)
    folder = Path(out) / category / slug(path)
    if folder.exists() and not force:  # before running anything: the answer does not depend on the problem
        raise ImportRefused("exists", f"{folder} exists; pass --force to overwrite it, or choose another --out")
    analysis = run_trace(path, loaded)
    plan = plan_task(path, analysis)
    suffix = ".py" if category == "torch2triton" else ".cu"
    if solution is not None and Path(solution).suffix != suffix:
        raise ImporterError(f"the solution {solution} should be a {suffix} file for {category}")
    level = re.fullmatch(r"level(\d+)", path.parent.name)
    tags = ["kernelbench", "imported"] + ([f"kernelbench-l{level.group(1)}"] if level else [])
    source_text = path.read_text()
    files = {
        "task.toml": task_toml(plan, category, path, rules_path, f"solution{suffix}" if solution else None, tags),
        "hidden.toml": hidden_toml(plan, rules_path),
        "reference.py": reference_py(plan, source_text, path),
        f"stub{suffix}": stub_source(plan, category),
        "PROMPT.md": prompt_md(plan, analysis, category, path, source_text),
        RECORD: record(plan, analysis, path, rules_path).model_dump_json(indent=2) + "\n",
    }
    if solution is not None:
        files[f"solution{suffix}"] = Path(solution).read_text()
    _write(folder, files, force)
    return folder, plan, analysis


def import_batch(paths: list[Path], out: Path, category: str = "torch2triton", rules: Path | None = None,
                 solution: Path | None = None, force: bool = False) -> list[Outcome]:
    """Every problem, each imported or refused with its reason; a refusal never stops the batch."""
    if solution is not None and len(paths) != 1:
        raise ImporterError("--solution goes with exactly one problem file")
    load_rules(Path(rules) if rules else None)  # a broken rules file stops the batch before it starts
    outcomes = []
    for path in paths:
        try:
            folder, plan, analysis = import_problem(path, out, category, rules, solution, force)
        except ImportRefused as exc:
            outcomes.append(Outcome(path=str(path), status="refused", reason=exc.reason, message=str(exc)))
            continue
        outcomes.append(Outcome(
            path=str(path), status="imported", task=f"{category}/{plan.slug}", hidden=len(plan.configs) - 1,
            sizes=[plan.keys[v.name] for v in analysis.variables if v.role == "size"],
            fixed=[plan.keys[v.name] for v in analysis.variables if v.role == "fixed"], dropped=analysis.dropped,
            message=str(folder)))
    if any(o.status == "imported" for o in outcomes):
        write_suites(Path(out))
    return outcomes


def write_suites(out: Path) -> None:
    """A suites.toml for a folder of imported tasks (kept when there is one), so that
    `CRUCIBLE_TASKS=<out> crucible run --suite kernelbench-l1` finds the suite."""
    from ..suites import SUITES_FILE, suite_entries

    path = out / SUITES_FILE
    if not path.exists():
        path.write_text("# Written by `crucible import kernelbench`: the suites of the imported tasks.\n\n"
                        + suite_entries(["core", "kernelbench-l1", "kernelbench-l2"]))


def import_problems(paths: list[Path], out: Path, category: str = "torch2triton", rules: Path | None = None,
                    solution: Path | None = None, force: bool = False) -> list[str]:
    """The `crucible import kernelbench` command: report lines, each refusal on a line starting `refused`."""
    outcomes = import_batch(paths, out, category, rules, solution, force)
    lines = []
    for o in outcomes:
        if o.status == "refused":
            lines.append(f"refused {o.path} ({o.reason}): {o.message}")
            continue
        lines.append(f"wrote {o.message}: sizes {', '.join(o.sizes)}; fixed {', '.join(o.fixed) or 'none'}; "
                     f"{o.hidden} hidden configs")
        lines += [f"  not taken: {d}" for d in o.dropped]
        if solution is None:
            lines.append(f"  no expert solution yet: `crucible tasks validate {o.task}` proves what it can")
    refused = [o for o in outcomes if o.status == "refused"]
    lines.append(f"imported {len(outcomes) - len(refused)} of {len(outcomes)}"
                 + (f"; refused {len(refused)} (" + ", ".join(sorted({o.reason or '' for o in refused})) + ")"
                    if refused else ""))
    return lines
