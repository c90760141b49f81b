"""KernelBench problems -> PyTorch-to-kernel tasks.

    problem.py (a `Model`, `get_inputs()`, `get_init_inputs()`)
      -> probe, in a subprocess: the init arguments, the inputs (shapes, dtypes, ranges), the Model's
         parameters and buffers, the parameter names of __init__ and forward, module-level ints
      -> dimensions named (an __init__ argument or module variable of that size, else D0, D1, ...); the
         visible config is get_inputs()' shapes; hidden configs come from the rules (kernelbench_rules.toml)
      -> shapes, in a subprocess: each config's output shapes, FLOPs (FlopCounterMode) and state shapes,
         by running the Model on meta tensors
      -> tasks/<category>/<slug>/: task.toml, hidden.toml, reference.py (the problem's code verbatim + glue),
         stub, PROMPT.md, and solution.* only when the user gives one

The Model's parameters and buffers become inputs of the task (`linear_weight`, ...): the candidate is a
kernel, called destination-passing style, and cannot see inside a module; make_inputs draws them by
constructing the Model under a seed taken from the input generator, so each seed has its own weights.
Init arguments that are numbers become params (config values); those equal to an input dimension are
that dimension, so `Linear(in_features, ...)` scales with x. Output dims no dimension explains (a
convolution's H - k + 1) become per-config values `<output>_dim<i>`, as do `model_flops` and `model_bytes`.

The problem file is trusted input chosen by the user, but it is still run only in a subprocess
(`python -m crucible.harness.importers.kernelbench probe|shapes ...`), never in the caller's process.
"""

from __future__ import annotations

import fnmatch
import json
import keyword
import math
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import ImporterError

DEFAULT_RULES = Path(__file__).with_name("kernelbench_rules.toml")
VISIBLE_NAME = "original"
RESERVED = {"dtype", "model_flops", "model_bytes", "name", "itemsize", "min", "max", "cdiv"}
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1}
C_TYPES = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16", "float64": "double",
           "int64": "int64_t", "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}
PROBE_TIMEOUT_S = 600
MIN_SIZE = 8
LANG_TITLE = {"triton": "Triton", "cuda": "CUDA"}


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- rules

class Rule(Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    """The hidden config's name."""
    scale: float = Field(default=1.0, gt=0)
    add: int = 0
    odd: bool = False
    """Make each changed dimension odd (adding 1 where it is even)."""
    dims: list[str] = Field(default_factory=lambda: ["*"])
    """Globs over the varied dimensions this rule changes."""
    leading: int | None = Field(default=None, ge=1)
    """Set the first dimension of the first input to this instead (if it is varied)."""


class DimRules(Model):
    vary: list[str] = Field(default_factory=lambda: ["*"])
    keep: list[str] = Field(default_factory=list)


class Rules(Model):
    max_elements: int = Field(default=1 << 30, gt=0)
    dims: DimRules = Field(default_factory=DimRules)
    rules: list[Rule] = Field(default_factory=list)


def load_rules(path: Path | None = None) -> Rules:
    path = path or DEFAULT_RULES
    try:
        rules = Rules.model_validate(tomllib.loads(Path(path).read_text()))
    except OSError as exc:
        raise ImporterError(f"cannot read the rules file {path}: {exc}") from None
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ImporterError(f"the rules file {path} is not valid: {exc}") from None
    names = [r.name for r in rules.rules]
    if VISIBLE_NAME in names or len(set(names)) != len(names):
        raise ImporterError(f"{path}: rule names must be distinct and not {VISIBLE_NAME!r}: {names}")
    return rules


def _matches(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def apply_rule(rule: Rule, values: dict[str, int], varied: list[str], leading: str | None) -> dict[str, int]:
    """New values of the dimensions for one rule (only varied ones change)."""
    new = dict(values)
    if rule.leading is not None:
        if leading is not None and leading in varied:
            new[leading] = rule.leading
        return new
    for dim in varied:
        if not _matches(dim, rule.dims):
            continue
        v = max(1, round(values[dim] * rule.scale) + rule.add)
        if rule.odd and v % 2 == 0:
            v += 1
        new[dim] = v
    return new


# ---------------------------------------------------------------- the probe (runs in a subprocess)

def _load_problem(path: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernelbench_problem"] = module
    spec.loader.exec_module(module)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, name):
            raise SystemExit(f"{path} defines no {name}: a KernelBench problem has `Model`, `get_inputs()` "
                             "and `get_init_inputs()`")
    return module


def _param_names(fn: Any) -> list[str]:
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())[1:]  # without self
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def probe(path: str) -> dict:
    """What the problem file defines, with get_inputs()' and get_init_inputs()' values (seeded)."""
    import torch

    module = _load_problem(path)
    torch.manual_seed(0)
    init = list(module.get_init_inputs())
    inputs = list(module.get_inputs())
    init_out = []
    for value in init:
        if isinstance(value, bool) or not isinstance(value, int | float):
            if isinstance(value, torch.Tensor):
                raise SystemExit("a tensor in get_init_inputs() is not supported: make it a module buffer")
            init_out.append({"kind": "literal", "repr": repr(value)})
        else:
            init_out.append({"kind": "int" if isinstance(value, int) else "float", "value": value})
    inputs_out = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            dtype = _dtype_name(value.dtype)
            info: dict[str, Any] = {"kind": "tensor", "shape": list(value.shape), "dtype": dtype}
            if value.dtype.is_floating_point:
                info["draw"] = "rand" if value.numel() and float(value.min()) >= 0 else "randn"
            elif value.dtype == torch.bool:
                info["draw"] = "bool"
            elif dtype in ITEMSIZE:
                info.update(draw="randint", low=int(value.min()), high=int(value.max()) + 1)
            else:
                raise SystemExit(f"input dtype {dtype} is not supported")
            inputs_out.append(info)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            inputs_out.append({"kind": "int" if isinstance(value, int) else "float", "value": value})
        else:
            raise SystemExit(f"get_inputs() returned a {type(value).__name__}; only tensors and numbers are supported")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = module.Model(*init)
    state = _state(model)
    ints = {k: v for k, v in vars(module).items()
            if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_")}
    return {"init": init_out, "inputs": inputs_out, "init_names": _param_names(module.Model.__init__),
            "forward_names": _param_names(module.Model.forward), "globals": ints,
            "state": [{"key": k, "shape": list(t.shape), "dtype": _dtype_name(t.dtype),
                       "parameter": isinstance(t, torch.nn.Parameter)} for k, t in state.items()],
            "doc": (module.Model.__doc__ or "").strip()}


def _state(model: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, t in list(model.named_parameters()) + list(model.named_buffers()):
        out.setdefault(k, t)
    return out


def shapes(path: str, calls: list[dict]) -> list[dict]:
    """Per call {init: [...], inputs: [...]}: output shapes and dtypes, state shapes, FLOPs, on meta tensors
    (on the CPU, for small calls, where an op has no meta kernel). An error becomes {"error": message}."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    module = _load_problem(path)
    results = []
    for call in calls:
        init = [a["value"] if "value" in a else eval(a["repr"], {"torch": torch}) for a in call["init"]]  # noqa: S307
        attempts = ["meta"] + (["cpu"] if call.get("elements", 0) <= (1 << 24) else [])
        error = ""
        for device in attempts:
            try:
                with torch.device(device):
                    torch.manual_seed(0)
                    model = module.Model(*init)
                args = []
                for spec in call["inputs"]:
                    if spec["kind"] != "tensor":
                        args.append(spec["value"])
                    else:
                        dtype = getattr(torch, spec["dtype"])
                        args.append(torch.zeros(spec["shape"], dtype=dtype, device=device) if device == "meta"
                                    else torch.rand(spec["shape"], device=device).to(dtype))
                with torch.no_grad(), FlopCounterMode(display=False) as counter:
                    out = model(*args)
                outs = out if isinstance(out, tuple | list) else (out,)
                if not all(isinstance(o, torch.Tensor) for o in outs):
                    raise TypeError("forward() must return a tensor or a tuple of tensors")
                results.append({"outputs": [{"shape": list(o.shape), "dtype": _dtype_name(o.dtype)} for o in outs],
                                "state": [{"key": k, "shape": list(t.shape), "dtype": _dtype_name(t.dtype)}
                                          for k, t in _state(model).items()],
                                "flops": int(counter.get_total_flops())})
                break
            except Exception as exc:  # the problem's own code: any failure drops this config
                error = f"{type(exc).__name__}: {exc}"
        else:
            results.append({"error": error[:500]})
    return results


def _main(argv: list[str]) -> None:
    """`probe FILE OUT` or `shapes FILE CALLS OUT`: JSON to a file (the problem may print to stdout)."""
    if argv[0] == "probe":
        Path(argv[2]).write_text(json.dumps(probe(argv[1])))
    elif argv[0] == "shapes":
        Path(argv[3]).write_text(json.dumps(shapes(argv[1], json.loads(Path(argv[2]).read_text()))))
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")


def _subprocess(args: list[str], path: Path) -> Any:
    with tempfile.TemporaryDirectory(prefix="crucible-import-") as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, "-m", "crucible.harness.importers.kernelbench", args[0], str(path.resolve())]
        for i, extra in enumerate(args[1:]):
            extra_path = Path(tmp) / f"arg{i}.json"
            extra_path.write_text(extra)
            cmd.append(str(extra_path))
        cmd.append(str(out))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=tmp,
                                  env=_probe_env())
        except subprocess.TimeoutExpired:
            raise ImporterError(f"{path}: running the problem took over {PROBE_TIMEOUT_S} s") from None
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip()[-2000:]
            raise ImporterError(f"{path}: running the problem file failed:\n{tail}")
        return json.loads(out.read_text())


def _probe_env() -> dict[str, str]:
    import os

    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # shapes and weights on the CPU; nothing needs a GPU


# ---------------------------------------------------------------- the plan: names, configs

class InputPlan(Model):
    name: str
    kind: Literal["tensor", "param"]
    dims: list[str | int] = Field(default_factory=list)
    dtype: str = ""
    draw: str = ""
    low: int | str = 0
    high: int | str = 0


class StatePlan(Model):
    key: str
    """The Model's own name (`linear.weight`)."""
    name: str
    """The task input's name (`linear_weight`)."""
    dtype: str
    parameter: bool


class ParamPlan(Model):
    name: str
    type: Literal["int64", "float64"]
    value: int | float
    dim: str | None = None
    """The dimension this param is (its value follows the dimension in every config)."""


class Plan(Model):
    slug: str
    dims: dict[str, int]
    """Dimension name -> visible value, in order of first use."""
    leading: str | None
    inputs: list[InputPlan]
    """forward()'s arguments in order: tensors and params."""
    state: list[StatePlan]
    params: list[ParamPlan]
    init: list[dict]
    """Per init argument: {"param": name} or {"repr": text}."""
    dtype: str


def _identifier(name: str, taken: set[str]) -> str:
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit():
        name = "m_" + name
    while name in taken or keyword.iskeyword(name) or name in RESERVED:
        name += "_"
    taken.add(name)
    return name


def _slug(path: Path) -> str:
    return re.sub(r"[^a-z0-9_\-]+", "_", path.stem.lower()).strip("_") or "problem"


def plan_problem(path: Path, info: dict) -> Plan:
    """Name the dimensions, inputs, state tensors and params of a probed problem."""
    taken: set[str] = set()
    init_names = info["init_names"] + [f"init{i}" for i in range(len(info["init_names"]), len(info["init"]))]
    fwd_names = info["forward_names"] + [f"x{i}" for i in range(len(info["forward_names"]), len(info["inputs"]))]
    size_names: dict[int, list[str]] = {}
    for name, arg in zip(init_names, info["init"], strict=False):
        if arg["kind"] == "int":
            size_names.setdefault(arg["value"], []).append(name)
    for name, value in info["globals"].items():
        size_names.setdefault(value, []).append(name)

    dims: dict[str, int] = {}
    by_value: dict[int, str] = {}
    inputs: list[InputPlan] = []
    tensor_names = [_identifier(n, taken) for n, i in zip(fwd_names, info["inputs"], strict=False)
                    if i["kind"] == "tensor"]
    t_iter = iter(tensor_names)
    leading = None
    for fname, item in zip(fwd_names, info["inputs"], strict=False):
        if item["kind"] != "tensor":
            inputs.append(InputPlan(name=fname, kind="param"))
            continue
        shape: list[str | int] = []
        for v in item["shape"]:
            if v < 2:
                shape.append(v)  # size-1 axes are structure (keepdim, a singleton batch), not sizes
                continue
            if v not in by_value:
                named = [n for n in size_names.get(v, []) if n not in dims]
                by_value[v] = _identifier(named[0] if named else f"D{len(dims)}", taken)
                dims[by_value[v]] = v
            shape.append(by_value[v])
        if leading is None and shape and isinstance(shape[0], str):
            leading = shape[0]
        inputs.append(InputPlan(name=next(t_iter), kind="tensor", dims=shape, dtype=item["dtype"],
                                draw=item["draw"], low=item.get("low", 0), high=item.get("high", 0)))
    for plan_in in inputs:  # an index range the size of a dimension (class ids < num_classes) follows it
        if plan_in.draw == "randint" and isinstance(plan_in.high, int) and plan_in.high in by_value:
            plan_in.high = by_value[plan_in.high]

    # An int init argument that no input dimension explains but is a size (Linear's out_features) is a
    # dimension too; values under MIN_SIZE are taken as structure (kernel sizes, strides, a dim index).
    for name, arg in zip(init_names, info["init"], strict=False):
        if arg["kind"] == "int" and arg["value"] >= MIN_SIZE and arg["value"] not in by_value:
            by_value[arg["value"]] = _identifier(name, taken)
            dims[by_value[arg["value"]]] = arg["value"]

    params: list[ParamPlan] = []
    init: list[dict] = []
    for name, arg in zip(init_names, info["init"], strict=False):
        if arg["kind"] == "literal":
            init.append({"repr": arg["repr"]})
            continue
        dim = by_value.get(arg["value"]) if arg["kind"] == "int" and arg["value"] >= 2 else None
        pname = dim if dim is not None and dim == name else _identifier(name, taken)
        params.append(ParamPlan(name=pname, type="int64" if arg["kind"] == "int" else "float64",
                                value=arg["value"], dim=dim))
        init.append({"param": pname})
    for plan_in, item in zip(inputs, info["inputs"], strict=False):
        if plan_in.kind == "param":
            plan_in.name = _identifier(plan_in.name, taken)
            params.append(ParamPlan(name=plan_in.name, type="int64" if item["kind"] == "int" else "float64",
                                    value=item["value"]))
    state = [StatePlan(key=s["key"], name=_identifier(s["key"].replace(".", "_"), taken), dtype=s["dtype"],
                       parameter=s["parameter"]) for s in info["state"]]
    floats = [i.dtype for i in inputs if i.kind == "tensor" and i.dtype.startswith(("float", "bfloat"))]
    return Plan(slug=_slug(path), dims=dims, leading=leading, inputs=inputs, state=state, params=params, init=init,
                dtype=floats[0] if floats else "float32")


def config_values(plan: Plan, dims: dict[str, int]) -> dict[str, Any]:
    values: dict[str, Any] = {"dtype": plan.dtype, **dims}
    for p in plan.params:
        values[p.name] = dims[p.dim] if p.dim is not None else p.value
    return values


def _call(plan: Plan, values: dict[str, Any]) -> dict:
    inputs, elements = [], 0
    for i in plan.inputs:
        if i.kind == "param":
            inputs.append({"kind": "param", "value": values[i.name]})
        else:
            shape = [values[d] if isinstance(d, str) else d for d in i.dims]
            elements = max(elements, math.prod(shape))
            inputs.append({"kind": "tensor", "shape": shape, "dtype": i.dtype})
    init = [{"value": values[a["param"]]} if "param" in a else a for a in plan.init]
    return {"init": init, "inputs": inputs, "elements": elements}


class Imported(Model):
    """What the importer decided, for the task files and the report."""

    plan: Plan
    configs: list[dict[str, Any]]
    """Visible first; each a flat config table (name + values)."""
    output_dims: list[list[str | int]]
    output_dtypes: list[str]
    scalar_outputs: list[bool]
    dropped: list[str]


def build_configs(path: Path, plan: Plan, rules: Rules) -> Imported:
    varied = [d for d in plan.dims if _matches(d, rules.dims.vary) and not _matches(d, rules.dims.keep)]
    candidates: list[tuple[str, dict[str, int]]] = [(VISIBLE_NAME, dict(plan.dims))]
    dropped: list[str] = []
    seen = {tuple(sorted(plan.dims.items()))}
    for rule in rules.rules:
        dims = apply_rule(rule, plan.dims, varied, plan.leading)
        key = tuple(sorted(dims.items()))
        if key in seen:
            dropped.append(f"{rule.name}: same sizes as another config")
            continue
        seen.add(key)
        candidates.append((rule.name, dims))
    calls, kept = [], []
    for name, dims in candidates:
        call = _call(plan, config_values(plan, dims))
        if call["elements"] > rules.max_elements:
            dropped.append(f"{name}: an input of {call['elements']:,} elements is over max_elements")
            continue
        calls.append(call)
        kept.append((name, dims))
    results = _subprocess(["shapes", json.dumps(calls)], path)
    if "error" in results[0]:
        raise ImporterError(f"{path}: the Model does not run on get_inputs()' shapes: {results[0]['error']}")
    configs, runs = [], []
    for (name, dims), call, res in zip(kept, calls, results, strict=True):
        if "error" in res:
            dropped.append(f"{name}: the Model fails on these sizes ({res['error'][:200]})")
        elif [o["dtype"] for o in res["outputs"]] != [o["dtype"] for o in results[0]["outputs"]]:
            dropped.append(f"{name}: the outputs change dtype")
        else:
            configs.append({"name": name, **config_values(plan, dims)})
            runs.append((call, res))
    n_out = len(results[0]["outputs"])
    output_dims: list[list[str | int]] = []
    for k in range(n_out):
        rank = len(results[0]["outputs"][k]["shape"])
        if any(len(res["outputs"][k]["shape"]) != rank for _, res in runs):
            raise ImporterError(f"{path}: output {k} changes rank between configs; drop the rules that do it")
        exprs: list[str | int] = []
        for axis in range(rank):
            seen_values = [res["outputs"][k]["shape"][axis] for _, res in runs]
            match = next((d for d in plan.dims
                          if all(c[d] == v for c, v in zip(configs, seen_values, strict=True))), None)
            if match is not None:
                exprs.append(match)
            elif len(set(seen_values)) == 1:
                exprs.append(seen_values[0])
            else:  # no dimension explains it (a convolution's H - k + 1): a value per config
                key = f"out{k}_dim{axis}"
                for c, v in zip(configs, seen_values, strict=True):
                    c[key] = v
                exprs.append(key)
        output_dims.append(exprs or [1])  # a 0-dim output is passed as a [1] tensor
    for c, (call, res) in zip(configs, runs, strict=True):
        nbytes = sum(math.prod(i["shape"]) * ITEMSIZE[i["dtype"]] for i in call["inputs"] if i["kind"] == "tensor")
        nbytes += sum(math.prod(s["shape"]) * ITEMSIZE.get(s["dtype"], 4) for s in res["state"])
        nbytes += sum(math.prod(o["shape"]) * ITEMSIZE.get(o["dtype"], 4) for o in res["outputs"])
        c["model_flops"] = res["flops"]
        c["model_bytes"] = nbytes
    return Imported(plan=plan, configs=configs, output_dims=output_dims,
                    output_dtypes=[o["dtype"] for o in results[0]["outputs"]],
                    scalar_outputs=[not o["shape"] for o in results[0]["outputs"]], dropped=dropped)


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


def _output_names(imp: Imported, taken: set[str]) -> list[str]:
    base = ["out"] if len(imp.output_dtypes) == 1 else [f"out{k}" for k in range(len(imp.output_dtypes))]
    return [_identifier(n, taken) for n in base]


def task_toml(imp: Imported, category: str, source: Path, rules_path: Path, outputs: list[str],
              solution: str | None) -> str:
    plan = imp.plan
    lang, suffix = ("triton", ".py") if category == "torch2triton" else ("cuda", ".cu")
    perturb = {i.name: i.draw == "randn" for i in plan.inputs if i.kind == "tensor"}
    inputs = [{"name": i.name, "dtype": i.dtype, "perturb": perturb[i.name]} for i in plan.inputs
              if i.kind == "tensor"]
    inputs += [{"name": s.name, "dtype": s.dtype, "perturb": False} for s in plan.state]
    outs = [{"name": n, "dtype": d, "shape": s} for n, d, s in zip(outputs, imp.output_dtypes, imp.output_dims,
                                                                   strict=True)]
    params = [{"name": p.name, "type": p.type} for p in plan.params]
    lines = [f"# Imported from KernelBench problem {source.name} by `crucible import kernelbench` "
             f"(rules: {rules_path.name}).",
             "# Output shapes, model_flops and model_bytes were computed per config by running the Model;",
             "# to change the configs, edit the rules and import again.",
             f'id = "{category}/{plan.slug}"',
             f"title = {json.dumps(f'{source.stem} (KernelBench, PyTorch to {LANG_TITLE[lang]})')}",
             f'category = "{category}"', f'language = "{lang}"', 'entry = "entry"',
             f'candidate = "kernel{suffix}"', f'stub = "stub{suffix}"']
    if solution:
        lines.append(f'solution = "{solution}"')
    else:
        lines.append("# solution: none yet; `crucible tasks validate` fails the task until an expert solution "
                     "is written and named here")
    lines += ["seeds = 3", 'tags = ["kernelbench", "imported"]', "", "[signature]",
              "inputs = [\n" + "".join(f"    {_toml_value(i)},\n" for i in inputs) + "]",
              "outputs = [\n" + "".join(f"    {_toml_value(o)},\n" for o in outs) + "]",
              "params = [\n" + "".join(f"    {_toml_value(p)},\n" for p in params) + "]", "",
              _config_tables(imp.configs[:1]), "[metrics]",
              'flops = "model_flops"   # FlopCounterMode (matmuls and convolutions; elementwise ops count 0)',
              'bytes = "model_bytes"   # every input (weights included) read once, every output written once', ""]
    return "\n".join(lines)


def hidden_toml(imp: Imported, rules_path: Path) -> str:
    return (f"# Hidden configs of an imported KernelBench problem, made by the rules in {rules_path.name}.\n"
            "# Edit the rules and import again rather than this file: output dims, model_flops and\n"
            "# model_bytes are computed per config by running the Model.\n\n" + _config_tables(imp.configs[1:]))


def reference_py(imp: Imported, source_text: str, source: Path, outputs: list[str]) -> str:
    plan = imp.plan
    tensors = [i for i in plan.inputs if i.kind == "tensor"]
    state_names = [s.name for s in plan.state]
    sig = ", ".join([f"{i.name}: _torch.Tensor" for i in tensors] + [f"{n}: _torch.Tensor" for n in state_names])
    kw = ", ".join(f"{p.name}: {'int' if p.type == 'int64' else 'float'}" for p in plan.params)
    sig = sig + (", *, " + kw if kw else "")
    init_args = ", ".join(f"{a['param']}" if "param" in a else a["repr"] for a in plan.init)
    init_from_config = ", ".join((f"config[{a['param']!r}]" if "param" in a else a["repr"])
                                 for a in plan.init)
    forward_args = ", ".join(i.name for i in plan.inputs)
    table = ",\n".join(f"    ({i.name!r}, {tuple(i.dims)!r}, {i.dtype!r}, {i.draw!r}, {i.low!r}, {i.high!r})"
                       for i in tensors)
    state_table = ",\n".join(f"    ({s.key!r}, {s.name!r}, {s.parameter!r})" for s in plan.state)
    trailing = "," if len(plan.init) == 1 else ""
    glue = f'''

# ---------------------------------------------------------------- task glue, by `crucible import kernelbench`
# Above: the problem file {source.name}, verbatim (its get_inputs / get_init_inputs are not used here).
# The Model's parameters and buffers are inputs of the task: a kernel cannot see inside a module.
import torch as _torch  # noqa: E402
from torch.func import functional_call as _functional_call  # noqa: E402

_SEED = 0
_OUTPUTS = {outputs!r}
_SCALAR_OUTPUTS = {imp.scalar_outputs!r}  # 0-dim outputs are passed as [1] tensors
_INPUTS = [  # forward()'s tensors: name, shape (config names or sizes), dtype, how drawn, low, high
{table},
]
_STATE = [  # the Model's parameters and buffers: its name, the task input's name, is a parameter
{state_table}
]
_SKELETONS: dict = {{}}


def _draw(shape, dtype, draw, low, high, config, gen):
    dt = getattr(_torch, dtype)
    if draw == "randint":
        low, high = (int(config[v]) if isinstance(v, str) else v for v in (low, high))
        return _torch.randint(low, max(high, low + 1), shape, generator=gen, device=gen.device, dtype=dt)
    if draw == "bool":
        return _torch.rand(shape, generator=gen, device=gen.device) < 0.5
    fn = _torch.rand if draw == "rand" else _torch.randn
    return fn(shape, generator=gen, device=gen.device, dtype=_torch.float32).to(dt)


def make_inputs(config: dict, gen: _torch.Generator, device: _torch.device) -> dict[str, _torch.Tensor]:
    """forward()'s tensors as in get_inputs() (same distribution, the config's sizes), then the Model's
    parameters and buffers from its own initialisation, seeded from this generator."""
    out = {{}}
    for name, dims, dtype, draw, low, high in _INPUTS:
        shape = [int(config[d]) if isinstance(d, str) else d for d in dims]
        out[name] = _draw(shape, dtype, draw, low, high, config, gen).to(device)
    if _STATE:
        with _torch.random.fork_rng(devices=[]):
            _torch.manual_seed(gen.initial_seed())
            model = Model({init_from_config}{trailing})
            state = dict(model.named_parameters()) | dict(model.named_buffers())
            for key, name, parameter in _STATE:
                t = state[key].detach()
                if parameter and t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all()):
                    # A constant init (a norm's ones and zeros) would let a kernel that ignores it pass.
                    t = t + 0.1 * _torch.randn(t.shape, dtype=_torch.float32).to(t.dtype)
                out[name] = t.contiguous().to(device)
    return out


def _skeleton(init: tuple, device: _torch.device):
    key = (init, str(device))
    if key not in _SKELETONS:
        with _torch.random.fork_rng(devices=[]):
            _torch.manual_seed(_SEED)
            _SKELETONS[key] = Model(*init).to(device)
    return _SKELETONS[key]


@_torch.no_grad()
def reference({sig}):
    """The Model's forward() with the given parameters and buffers (eager PyTorch: the baseline)."""
    model = _skeleton(({init_args}{trailing}), {tensors[0].name}.device)
    state = {{{", ".join(f"{s.key!r}: {s.name}" for s in plan.state)}}}
    args = ({forward_args}{"," if len(plan.inputs) == 1 else ""})
    out = _functional_call(model, state, args) if state else model(*args)
    outs = tuple(out) if isinstance(out, tuple | list) else (out,)
    outs = tuple(o.reshape(1) if s else o for o, s in zip(outs, _SCALAR_OUTPUTS, strict=True))
    return outs if len(outs) > 1 else outs[0]
'''
    header = f"# {source.stem}: a KernelBench problem, imported. The code below is the problem file.\n\n"
    return header + source_text.rstrip() + "\n" + glue


def _shape_text(dims: list[str | int]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def stub_source(imp: Imported, category: str, outputs: list[str]) -> str:
    plan = imp.plan
    tensors = [i.name for i in plan.inputs if i.kind == "tensor"] + [s.name for s in plan.state]
    if category == "torch2triton":
        args = ", ".join([f"{n}: torch.Tensor" for n in tensors + outputs])
        kw = ", ".join(f"{p.name}: {'int' if p.type == 'int64' else 'float'}" for p in plan.params)
        return (f'"""{plan.slug} in Triton: write your kernel here (see PROMPT.md for the Model it computes)."""\n\n'
                "import torch\nimport triton  # noqa: F401\nimport triton.language as tl  # noqa: F401\n\n\n"
                f"def entry({args}{', *, ' + kw if kw else ''}) -> None:\n"
                f'    """Write Model.forward\'s result into {", ".join(outputs)} (preallocated); return None."""\n'
                '    raise NotImplementedError("write a Triton kernel and launch it from entry()")\n')
    dtypes = {i.name: i.dtype for i in plan.inputs if i.kind == "tensor"} | {s.name: s.dtype for s in plan.state}
    ptrs = [f"const {C_TYPES[dtypes[n]]}* {n}" for n in tensors]
    ptrs += [f"{C_TYPES[d]}* {n}" for n, d in zip(outputs, imp.output_dtypes, strict=True)]
    ptrs += [f"{'int64_t' if p.type == 'int64' else 'double'} {p.name}" for p in plan.params]
    return (f"// {plan.slug} in CUDA: write your kernel here (see PROMPT.md for the Model it computes).\n"
            "#include <cstdint>\n#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n\n"
            f'extern "C" int entry({", ".join(ptrs)}, cudaStream_t stream) {{\n'
            "    // Launch your kernel on `stream`, then return (int)cudaGetLastError().\n"
            "    return (int)cudaErrorNotYetImplemented;\n}\n")


def prompt_md(imp: Imported, category: str, source: Path, source_text: str, outputs: list[str]) -> str:
    plan = imp.plan
    visible = imp.configs[0]
    lang = "Triton" if category == "torch2triton" else "CUDA"
    rows = [f"| `{i.name}` | input | {i.dtype} | {_shape_text(i.dims)} |" for i in plan.inputs if i.kind == "tensor"]
    rows += [f"| `{s.name}` | the Model's `{s.key}` | {s.dtype} | as the Model makes it |" for s in plan.state]
    rows += [f"| `{n}` | output | {d} | {_shape_text(s)} |" for n, d, s in zip(outputs, imp.output_dtypes,
                                                                              imp.output_dims, strict=True)]
    params = ", ".join(f"`{p.name}`" for p in plan.params) or "none"
    dims = ", ".join(f"`{k}` = {v}" for k, v in visible.items() if k not in ("name", "model_flops", "model_bytes"))
    call = ("`entry(*inputs, *outputs, **params)`: a Python function that launches Triton kernels, writes "
            "every element of the outputs and returns None" if lang == "Triton" else
            '`extern "C" int entry(const T* inputs..., T* outputs..., params..., cudaStream_t stream)`: launch '
            "on `stream` and return `(int)cudaGetLastError()`; params are `int64_t` / `double`")
    return f"""# {source.stem} (KernelBench), in {lang}

Write a {lang} kernel that computes `Model.forward` of the PyTorch module below, a KernelBench problem
({source.name}), as fast as you can. Your kernel is timed against eager PyTorch running the Model.

```python
{source_text.strip()}
```

## Calling convention

Your `kernel.{'py' if lang == 'Triton' else 'cu'}` exports {call}. The harness allocates the outputs and
fills them with NaN before each call; inputs are read-only. The Model's parameters and buffers are passed as
inputs (named after them), in this order:

| name | what | dtype | shape |
| --- | --- | --- | --- |
{chr(10).join(rows)}

Params (passed by name after the tensors): {params}. A 0-dim output of the Model is a tensor of shape [1].

## Configs and checking

The visible config is the problem's own: {dims}. Hidden configs with other sizes (half, double,
odd and tail sizes, a single row) are scored after the session: do not hard-code the sizes. Outputs must
match the reference elementwise within the default tolerances (float32: atol = rtol = 1e-4; float16: 1e-2;
bfloat16: 2e-2): compute in the inputs' precision or better, no TF32 for float32 data. Calling PyTorch to do
the work is not a kernel.
"""


def _write(folder: Path, files: dict[str, str], force: bool) -> None:
    if folder.exists():
        if not force:
            raise ImporterError(f"{folder} exists; pass --force to overwrite it, or choose another --out")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")


def import_problem(path: Path, out: Path, category: str = "torch2triton", rules: Path | None = None,
                   solution: Path | None = None, force: bool = False) -> tuple[Path, Imported]:
    """Import one problem file; returns the task folder and what was decided."""
    path = Path(path)
    if not path.is_file():
        raise ImporterError(f"no problem file {path}")
    if category not in ("torch2triton", "torch2cuda"):
        raise ImporterError(f"category {category!r}: choose torch2triton or torch2cuda")
    rules_path = Path(rules) if rules else DEFAULT_RULES
    loaded = load_rules(rules_path)
    folder = Path(out) / category / _slug(path)
    if folder.exists() and not force:  # before running anything: the answer does not depend on the problem
        raise ImporterError(f"{folder} exists; pass --force to overwrite it, or choose another --out")
    info = _subprocess(["probe"], path)
    plan = plan_problem(path, info)
    imp = build_configs(path, plan, loaded)
    if len(imp.configs) < 2:
        raise ImporterError(f"{path}: the rules made no hidden config ({'; '.join(imp.dropped) or 'no rules'}); "
                            "edit the rules")
    suffix = ".py" if category == "torch2triton" else ".cu"
    taken = {i.name for i in plan.inputs} | {s.name for s in plan.state} | {p.name for p in plan.params}
    outputs = _output_names(imp, taken)
    source_text = path.read_text()
    files = {
        "task.toml": task_toml(imp, category, path, rules_path, outputs, f"solution{suffix}" if solution else None),
        "hidden.toml": hidden_toml(imp, rules_path),
        "reference.py": reference_py(imp, source_text, path, outputs),
        f"stub{suffix}": stub_source(imp, category, outputs),
        "PROMPT.md": prompt_md(imp, category, path, source_text, outputs),
    }
    if solution is not None:
        if Path(solution).suffix != suffix:
            raise ImporterError(f"the solution {solution} should be a {suffix} file for {category}")
        files[f"solution{suffix}"] = Path(solution).read_text()
    _write(folder, files, force)
    return folder, imp


def import_problems(paths: list[Path], out: Path, category: str = "torch2triton", rules: Path | None = None,
                    solution: Path | None = None, force: bool = False) -> list[str]:
    """The `crucible import kernelbench` command: one report line (or a few) per problem."""
    if solution is not None and len(paths) != 1:
        raise ImporterError("--solution goes with exactly one problem file")
    lines = []
    for path in paths:
        folder, imp = import_problem(path, out, category, rules, solution, force)
        dims = ", ".join(f"{k}={v}" for k, v in imp.plan.dims.items()) or "none"
        lines.append(f"wrote {folder}: dims {dims}; {len(imp.configs) - 1} hidden configs "
                     f"({', '.join(c['name'] for c in imp.configs[1:])})")
        lines += [f"  dropped {d}" for d in imp.dropped]
        if solution is None:
            lines.append("  no expert solution yet: write one and name it in task.toml, then "
                         f"`crucible tasks validate {category}/{imp.plan.slug}`")
    return lines


if __name__ == "__main__":
    _main(sys.argv[1:])
