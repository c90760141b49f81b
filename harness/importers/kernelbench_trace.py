"""Runs a KernelBench problem file, in a subprocess only, and says what its numbers do.

    python -m crucible.harness.importers.kernelbench_trace PROBLEM RULES_JSON OUT_JSON

    variables   the file's module-level numbers (`batch_size = 128`, `M = 1024 * 2`, `height = width = 64`)
    namespace   the file executed statement by statement, a number overridden right after its assignment,
                so what is computed from it (`bias_shape = (out_channels, 1, 1)`) follows
    trace       get_inputs(), get_init_inputs(), Model(...).eval() and forward() under torch.device("meta"):
                shapes, dtypes, FLOPs and the largest tensor any op makes, with no memory allocated
    classify    each number doubled on its own: a size if an input's shape moves (or a parameter's, for a
                name that does not look structural), else fixed; numbers that fail alone but share a value
                are tried together (a size the file spells twice)
    candidates  each rules candidate traced; the first that run, keep the outputs' count, dtypes and ranks,
                and fit the byte caps become the hidden configs

The result is an `Analysis` (JSON); a problem that cannot be imported gives a `Refusal` with its reason.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import traceback
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .kernelbench_rules import VISIBLE_NAME, Rules, candidate_sizes, matches

STRUCTURAL_ATTR = re.compile(r"kernel|stride|pad|dilation|group|pool|window|factor|head|axis|output_size")
"""Module attributes whose change makes a number structural (Conv's kernel_size, GroupNorm's num_groups)."""
CPU_FALLBACK_BYTES = 256 << 20
"""An op without a meta kernel: trace on the CPU instead, for configs whose inputs and weights fit this."""
RANDN = {"randn", "randn_like", "normal"}
"""Inputs drawn by these are centred: the judge may shift and scale them (perturb)."""

RefusalReason = Literal["not_a_problem", "load_error", "model_fails", "unsupported_input", "no_sizes",
                        "too_few_configs", "exists", "timeout"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Refusal(Exception):
    def __init__(self, reason: RefusalReason, message: str):
        super().__init__(message)
        self.reason = reason


class InputInfo(Model):
    kind: Literal["tensor", "scalar"]
    shape: list[int] = Field(default_factory=list)
    dtype: str = ""
    perturb: bool = False
    """Drawn by randn (centred), so the judge may shift and scale it."""
    value: int | float | None = None


class StateInfo(Model):
    key: str
    shape: list[int]
    dtype: str
    parameter: bool


class TensorInfo(Model):
    shape: list[int]
    dtype: str


class Trace(Model):
    inputs: list[InputInfo] = Field(default_factory=list)
    state: list[StateInfo] = Field(default_factory=list)
    structure: dict[str, str] = Field(default_factory=dict)
    outputs: list[TensorInfo] = Field(default_factory=list)
    flops: int = 0
    peak_bytes: int = 0
    """The largest tensor an op of the forward made."""
    error: str = ""

    def input_bytes(self) -> int:
        return sum(_nbytes(i.shape, i.dtype) for i in self.inputs if i.kind == "tensor")

    def state_bytes(self) -> int:
        return sum(_nbytes(s.shape, s.dtype) for s in self.state)

    def output_bytes(self) -> int:
        return sum(_nbytes(o.shape, o.dtype) for o in self.outputs)

    def total_bytes(self) -> int:
        return self.input_bytes() + self.state_bytes() + self.output_bytes()


class Variable(Model):
    name: str
    value: int | float
    role: Literal["size", "fixed"]
    why: str
    follows: str | None = None
    """A size the file spells twice: it takes this size's value in every config."""
    moves: list[str] = Field(default_factory=list)
    """What moved when it was doubled: `in<i>.<axis>`, `out<k>.<axis>`, `state:<key>`."""


class ConfigTrace(Model):
    name: str
    values: dict[str, int | float]
    """Every variable's value in this config."""
    trace: Trace


class Analysis(Model):
    variables: list[Variable]
    forward_names: list[str]
    doc: str
    configs: list[ConfigTrace]
    """The visible config first, then the hidden ones."""
    dropped: list[str]
    """Candidates not taken, with the reason."""


ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def _nbytes(shape: list[int], dtype: str) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * ITEMSIZE.get(dtype, 4)


# ---------------------------------------------------------------- the file's numbers and namespace

def _constant(node: ast.expr) -> bool:
    return all(isinstance(n, ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop)
               for n in ast.walk(node))


def assigned(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign | ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def variables(source: str) -> dict[str, int | float]:
    """Module-level names assigned a number computed from literals only, with their last value; a tuple
    of such numbers gives one per element (`input_shape[0]`)."""
    out: dict[str, int | float] = {}
    for stmt in ast.parse(source).body:
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        names = [n for n in assigned(stmt) if not n.startswith("_")]
        for n in names:  # reassigned: only what this statement says counts
            for key in [k for k in out if k == n or k.startswith(n + "[")]:
                del out[key]
        elements = value.elts if isinstance(value, ast.Tuple | ast.List) else [value] if value is not None else []
        if not names or not elements or not all(_constant(e) for e in elements):
            continue
        numbers = [eval(compile(ast.Expression(e), "<number>", "eval"), {"__builtins__": {}})  # noqa: S307
                   for e in elements]
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers):
            continue
        for n in names:
            if isinstance(value, ast.Tuple | ast.List):
                out.update({f"{n}[{i}]": v for i, v in enumerate(numbers)})
            else:
                out[n] = numbers[0]
    return out


def override(ns: dict[str, Any], names: list[str], overrides: dict[str, Any]) -> None:
    """Put the overridden numbers (`n` or an element `n[i]` of a tuple) in place after `names` were assigned."""
    for name in names:
        if name in overrides:
            ns[name] = overrides[name]
        elif isinstance(ns.get(name), tuple | list) and any(k.startswith(name + "[") for k in overrides):
            value = list(ns[name])
            for i in range(len(value)):
                value[i] = overrides.get(f"{name}[{i}]", value[i])
            ns[name] = type(ns[name])(value)


def namespace(source: str, filename: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The problem file executed with some numbers overridden right after they are assigned."""
    ns: dict[str, Any] = {"__name__": "kernelbench_problem", "__file__": filename}
    for stmt in ast.parse(source, filename).body:
        exec(compile(ast.Module([stmt], type_ignores=[]), filename, "exec"), ns)  # noqa: S102 (the problem)
        override(ns, assigned(stmt), overrides)
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in ns]
    if missing:
        raise Refusal("not_a_problem", f"{filename} defines no {', '.join(missing)}: a KernelBench problem has "
                      "`Model`, `get_inputs()` and `get_init_inputs()`")
    return ns


# ---------------------------------------------------------------- one trace

def _dtype(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def trace(ns: dict[str, Any], device: str = "meta") -> Trace:
    """Shapes, FLOPs and the peak tensor of one config. Errors of the problem's code become `error`."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    created: list[tuple[str, Any]] = []

    class Creations(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                created.append((getattr(func, "__name__", ""), out))
            return out

    class Peak(TorchDispatchMode):
        peak = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.peak = max(self.peak, t.numel() * t.element_size())
            return out

    result = Trace()
    try:
        with torch.device(device):
            torch.manual_seed(0)
            with Creations():
                raw = list(ns["get_inputs"]())
            init = list(ns["get_init_inputs"]())
            model = ns["Model"](*init)
        model.eval()
    except Exception as exc:  # the problem's own code, on these numbers
        return Trace(error=f"building: {type(exc).__name__}: {exc}"[:400])
    for value in raw:
        if isinstance(value, torch.Tensor):
            creator = next((name for name, t in created if t is value), "")
            result.inputs.append(InputInfo(kind="tensor", shape=list(value.shape), dtype=_dtype(value.dtype),
                                           perturb=creator in RANDN and value.dtype.is_floating_point))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            result.inputs.append(InputInfo(kind="scalar", value=value))
        else:
            raise Refusal("unsupported_input", f"get_inputs() returned a {type(value).__name__}; only tensors "
                          "and numbers can be inputs of a task")
    seen: set[str] = set()
    for key, t in list(model.named_parameters()) + list(model.named_buffers()):
        if key not in seen:
            seen.add(key)
            result.state.append(StateInfo(key=key, shape=list(t.shape), dtype=_dtype(t.dtype),
                                          parameter=isinstance(t, torch.nn.Parameter)))
    for mname, module in model.named_modules():
        for attr, v in vars(module).items():
            if (not attr.startswith("_") and isinstance(v, int | float | tuple) and not isinstance(v, bool)
                    and STRUCTURAL_ATTR.search(attr)):
                result.structure[f"{mname}.{attr}"] = repr(v)
    peak = Peak()
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter, peak:
            out = model(*raw)
    except Exception as exc:  # the problem's own code
        if device == "meta" and result.input_bytes() + result.state_bytes() <= CPU_FALLBACK_BYTES:
            return trace(ns, "cpu")  # an op without a meta kernel; small enough to run for real
        result.error = f"forward: {type(exc).__name__}: {exc}"[:400]
        return result
    outs = out if isinstance(out, tuple | list) else (out,)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        result.error = "forward() must return a tensor or a tuple of tensors"
        return result
    result.outputs = [TensorInfo(shape=list(o.shape), dtype=_dtype(o.dtype)) for o in outs]
    result.flops = int(counter.get_total_flops())
    result.peak_bytes = max([peak.peak] + [_nbytes(o.shape, o.dtype) for o in result.outputs])
    return result


def _moves(base: Trace, t: Trace) -> list[str]:
    moved = []
    for i, (a, b) in enumerate(zip(base.inputs, t.inputs, strict=False)):
        moved += [f"in{i}.{k}" for k in range(max(len(a.shape), len(b.shape)))
                  if a.shape[k:k + 1] != b.shape[k:k + 1]]
    for k, (a, b) in enumerate(zip(base.outputs, t.outputs, strict=False)):
        moved += [f"out{k}.{x}" for x in range(max(len(a.shape), len(b.shape))) if a.shape[x:x + 1] != b.shape[x:x + 1]]
    before = {s.key: s.shape for s in base.state}
    moved += [f"state:{s.key}" for s in t.state if before.get(s.key) != s.shape]
    return moved


# ---------------------------------------------------------------- classify, then the candidates

def classify(source: str, filename: str, numbers: dict[str, int | float], base: Trace,
             rules: Rules) -> list[Variable]:
    out: dict[str, Variable] = {}
    failed: list[str] = []
    for name, value in numbers.items():
        if isinstance(value, float):
            out[name] = Variable(name=name, value=value, role="fixed", why="a float")
            continue
        if value <= 0:
            out[name] = Variable(name=name, value=value, role="fixed", why="not positive")
            continue
        if matches(name, rules.sizes.keep):
            out[name] = Variable(name=name, value=value, role="fixed", why="kept by the rules")
            continue
        t = trace(namespace(source, filename, {name: value * 2}))
        if t.error:
            failed.append(name)
            continue
        out[name] = _role(name, value, base, t, rules)
    by_value: dict[int | float, list[str]] = {}
    for name in failed:
        by_value.setdefault(numbers[name], []).append(name)
    for value, names in by_value.items():
        t = trace(namespace(source, filename, dict.fromkeys(names, value * 2))) if len(names) > 1 else None
        if t is not None and not t.error:
            first = _role(names[0], value, base, t, rules)
            if first.role == "size":
                for n in names:
                    out[n] = first.model_copy(update={"name": n, "follows": None if n == names[0] else names[0],
                                                      "why": f"{first.why}, together with {', '.join(names)}"})
                continue
        for n in names:
            out[n] = Variable(name=n, value=value, role="fixed", why="the Model fails when it changes alone")
    return [out[n] for n in numbers]


def _role(name: str, value: int | float, base: Trace, t: Trace, rules: Rules) -> Variable:
    moves = _moves(base, t)
    structure = sorted(k for k, v in t.structure.items() if base.structure.get(k) != v)

    def var(role: Literal["size", "fixed"], why: str) -> Variable:
        return Variable(name=name, value=value, role=role, why=why, moves=moves)

    if any(m.startswith("in") for m in moves):
        return var("size", "an input's shape follows it")
    if structure:
        return var("fixed", f"structural: it sets {', '.join(structure[:3])}")
    if any(m.startswith("state:") for m in moves):
        if matches(name, rules.sizes.structural):
            return var("fixed", "structural by name (it shapes only parameters)")
        if value == 1:  # a bias of shape (C, 1, 1): a 1 there broadcasts, and changing it changes the model
            return var("fixed", "a broadcast dimension (1) of a parameter's shape")
        return var("size", "a parameter's shape follows it")
    return var("fixed", "it shapes no input and no parameter")


def _fits(name: str, t: Trace, visible: Trace, rules: Rules) -> str:
    """Why a hidden config is over a cap, or ''."""
    caps = [("outputs", t.output_bytes(), max(rules.max_output_bytes, visible.output_bytes())),
            ("the largest activation", t.peak_bytes, max(rules.max_activation_bytes, visible.peak_bytes)),
            ("inputs, parameters and outputs", t.total_bytes(), max(rules.max_total_bytes, visible.total_bytes()))]
    for what, got, cap in caps:
        if got > cap:
            return f"{name}: {what} need {got / 2**30:.1f} GiB, over the cap of {cap / 2**30:.1f} GiB"
    return ""


def analyse(path: Path, rules: Rules) -> Analysis:
    source = path.read_text()
    filename = str(path)
    numbers = variables(source)
    ns = namespace(source, filename, {})
    visible = trace(ns)
    if visible.error:
        raise Refusal("model_fails", f"the Model does not run on its own inputs traced on meta tensors: "
                      f"{visible.error}")
    import inspect

    forward = ns["Model"].forward
    forward_names = [p.name for p in list(inspect.signature(forward).parameters.values())[1:]
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    found = classify(source, filename, numbers, visible, rules)
    sizes = {v.name: int(v.value) for v in found if v.role == "size" and v.follows is None}
    if not sizes:
        raise Refusal("no_sizes", "no module-level number changes an input's shape, so no hidden config can "
                      "differ from the visible one: " + "; ".join(f"{v.name}: {v.why}" for v in found)
                      if found else "the file has no module-level numbers (sizes) for hidden configs to change")
    configs = [ConfigTrace(name=VISIBLE_NAME, values=dict(numbers), trace=visible)]
    dropped: list[str] = []
    seen = {tuple(sizes.values())}
    for cand in rules.candidates:
        if len(configs) > rules.hidden_configs:
            break
        new = candidate_sizes(cand, sizes)
        if tuple(new.values()) in seen:
            dropped.append(f"{cand.name}: the same sizes as another config")
            continue
        seen.add(tuple(new.values()))
        values = dict(numbers) | new | {v.name: new[v.follows] for v in found if v.follows in new}
        t = trace(namespace(source, filename, values))
        if t.error:
            dropped.append(f"{cand.name}: the Model fails on these sizes ({t.error[:160]})")
        elif [(len(o.shape), o.dtype) for o in t.outputs] != [(len(o.shape), o.dtype) for o in visible.outputs]:
            dropped.append(f"{cand.name}: the outputs change count, rank or dtype")
        elif why := _fits(cand.name, t, visible, rules):
            dropped.append(why)
        else:
            configs.append(ConfigTrace(name=cand.name, values=values, trace=t))
    if len(configs) - 1 < rules.min_hidden_configs:
        raise Refusal("too_few_configs", f"only {len(configs) - 1} hidden configs (at least "
                      f"{rules.min_hidden_configs} needed): " + "; ".join(dropped))
    return Analysis(variables=found, forward_names=forward_names, doc=(ns["Model"].__doc__ or "").strip(),
                    configs=configs, dropped=dropped)


def main(argv: list[str]) -> None:
    path, rules_json, out = Path(argv[0]), argv[1], Path(argv[2])
    sys.path.insert(0, str(path.parent))  # a problem may import a helper next to it
    try:
        result: dict = analyse(path, Rules.model_validate_json(Path(rules_json).read_text())).model_dump()
    except Refusal as exc:
        result = {"refusal": {"reason": exc.reason, "message": str(exc)}}
    except Exception as exc:  # the problem file itself is broken: report it, with where
        tail = "".join(traceback.format_exception(exc)[-3:])
        result = {"refusal": {"reason": "load_error", "message": f"{type(exc).__name__}: {exc}\n{tail}"[-2000:]}}
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
