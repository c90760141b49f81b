"""Tasks as data: the models of `task.toml` and `hidden.toml`, and the loader that checks them.

A task is a folder `tasks/<category>/<slug>/`:

    task.toml     visible spec: entry point, signature, tolerances, visible configs, metrics
    PROMPT.md     the statement the agent reads
    reference.py  make_inputs(config, gen) and reference(*inputs, **params)   (trusted copy lives here)
    baseline.*    the kernel to improve (X2X tasks); absent for torch2X (the reference is the baseline)
    stub.*        the file the agent starts from in torch2X tasks
    hidden.toml   the unseen configs                                          (never shown)
    solution.*    an expert solution                                          (never shown; an imported task
                  may not have one yet, and validation fails it until it does)

The candidate follows destination-passing style in every language: it is called as
`entry(*inputs, *outputs, **params)` (Triton) or `entry(in_ptrs..., out_ptrs..., params..., stream)`
(CUDA / HIP, an `extern "C"` function returning an int error code), and writes every element of the
output tensors, which the harness allocates and poisons beforehand.

Loading reports every problem at once, each with its file and field (`TaskError`), never a traceback.
"""

from __future__ import annotations

import ast
import operator
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .parsing import parse

Category = Literal["triton2triton", "cuda2cuda", "hip2hip", "torch2triton", "torch2cuda", "torch2hip", "torch2cute",
                   "torch2tilelang"]
Language = Literal["triton", "cuda", "hip", "cute", "tilelang"]
ParamType = Literal["int32", "int64", "float32", "float64"]

CATEGORY_LANGUAGE: dict[str, str] = {
    "triton2triton": "triton", "torch2triton": "triton",
    "cuda2cuda": "cuda", "torch2cuda": "cuda",
    "hip2hip": "hip", "torch2hip": "hip",
    "torch2cute": "cute", "torch2tilelang": "tilelang",
}
SOURCE_SUFFIX = {"triton": ".py", "cuda": ".cu", "hip": ".hip", "cute": ".py", "tilelang": ".py"}

# Defaults follow what a correct kernel of each precision reaches against an fp32/fp64 reference:
# fp32 accumulation order moves results by a few ulps; half types carry ~3 significant digits.
DEFAULT_TOLERANCE: dict[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-8),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    # FP8: about one step of the format at the value (3 or 2 mantissa bits), down to its smallest subnormal:
    # a correct kernel's rounding may differ from the reference's by one step (x * (1/s) against x / s).
    "float8_e4m3fn": (2.0**-9, 2.0**-3),
    "float8_e5m2": (2.0**-16, 2.0**-2),
}


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tolerance(Frozen):
    atol: float = Field(ge=0)
    """Absolute tolerance: |out - ref| <= atol + rtol * |ref| elementwise."""
    rtol: float = Field(ge=0)
    """Relative tolerance."""


class Tolerances(Frozen):
    """Per-dtype overrides of DEFAULT_TOLERANCE, with the reason they differ."""

    float32: Tolerance | None = None
    float16: Tolerance | None = None
    bfloat16: Tolerance | None = None
    float64: Tolerance | None = None
    float8_e4m3fn: Tolerance | None = None
    float8_e5m2: Tolerance | None = None
    reason: str = ""
    """One line: why these tolerances (required when any is set)."""

    @model_validator(mode="after")
    def _reason_when_overridden(self) -> Tolerances:
        overridden = any(getattr(self, d) is not None for d in DEFAULT_TOLERANCE)
        if overridden and not self.reason.strip():
            raise ValueError("give a one-line `reason` for overriding the default tolerances")
        return self

    def for_dtype(self, dtype: str) -> Tolerance:
        own = getattr(self, dtype, None) if dtype in DEFAULT_TOLERANCE else None
        if own is not None:
            return own
        atol, rtol = DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))  # integers and bools compare exactly
        return Tolerance(atol=atol, rtol=rtol)


class Oracle(Frozen):
    """`[oracle]`: whether the reference can be the evaluation's float64 precision oracle (toolkit/oracles.py)."""

    float64: bool = True
    """The reference computes in float64 when its floating inputs are float64, and returns float64 floating
    outputs. Set false only when it truly cannot (an op with no float64 kernel), and say why in `reason`."""
    reason: str = ""
    """One line: why the reference cannot run in float64 (required when `float64 = false`)."""

    @model_validator(mode="after")
    def _reason_when_disabled(self) -> Oracle:
        if not self.float64 and not self.reason.strip():
            raise ValueError("give a one-line `reason` why the reference cannot run in float64 (e.g. which op "
                             "has no float64 kernel), or drop `float64 = false`")
        return self


class TensorSpec(Frozen):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    dtype: str = "{dtype}"
    """A dtype name, or `{key}` to take it from the config (default: the config's `dtype`)."""
    shape: list[int | str] = Field(default_factory=list)
    """Outputs only: each dimension an int or an arithmetic expression over config values."""
    perturb: bool = True
    """Inputs only: apply a random offset and scale per seed (turn off for indices, positive-only data)."""
    check: Literal["close", "sample"] = "close"
    """Outputs only. `close`: within the tolerance of the reference's output, element by element. `sample`:
    indices drawn at random (an int32/int64 output); for it the reference returns the probability of every
    class for each draw (the output's shape and one more dimension, the classes), and the draws are tested
    against those (toolkit/checking.py compare_samples)."""


class ParamSpec(Frozen):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: ParamType = "int64"
    """C type for CUDA/HIP launchers; Python receives an int or a float."""


class Signature(Frozen):
    inputs: list[TensorSpec] = Field(min_length=1)
    outputs: list[TensorSpec] = Field(min_length=1)
    params: list[ParamSpec] = Field(default_factory=list)
    """Scalars taken from the config, passed after the tensors."""

    @model_validator(mode="after")
    def _outputs_have_shapes(self) -> Signature:
        missing = [o.name for o in self.outputs if not o.shape]
        if missing:
            raise ValueError(f"outputs {missing} need a `shape`")
        sampled = [o.name for o in self.outputs if o.check == "sample" and o.dtype not in ("int32", "int64")]
        if sampled:
            raise ValueError(f"outputs {sampled} are checked as samples (check = \"sample\"): give them dtype "
                             "\"int32\" or \"int64\" (the index of each draw)")
        if any(t.check != "close" for t in self.inputs):
            raise ValueError("`check` is for outputs only; remove it from the inputs")
        names = [t.name for t in self.inputs + self.outputs] + [p.name for p in self.params]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"names used twice in the signature: {dupes}")
        return self


ConfigValue = int | float | str | bool


class Config(BaseModel):
    """One problem instance: a name and its values (shapes, dtype, extra parameters)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    values: dict[str, ConfigValue] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_values(cls, data: object) -> object:
        # In TOML a config is a flat table: `name` plus its values.
        if isinstance(data, dict) and "values" not in data:
            data = dict(data)
            name = data.pop("name", None)
            return {"name": name, "values": data}
        return data

    @property
    def dtype(self) -> str | None:
        value = self.values.get("dtype")
        return str(value) if value is not None else None


class Metrics(Frozen):
    flops: str = "0"
    """Floating-point operations of one call, an expression over config values."""
    flops_note: str | None = None
    """Why `flops` is less than the reference's matmul-like work (causal attention skips masked pairs)."""
    bytes: str
    """Compulsory bytes moved (each input read once, each output written once); may use `itemsize`."""
    bytes_note: str | None = None
    """Why `bytes` is less than the tensors hold (e.g. a gather reads only the rows it is asked for); the
    metrics review (toolkit/metrics_review.py) demands it wherever that is so."""


MAX_TIMEOUT_S = 3600.0
"""The longest a worker may be given: past an hour a hung kernel holds its GPU's lease for nothing."""


class Limits(Frozen):
    timeout_s: float = Field(default=300, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    """Wall-clock limit for one evaluation worker (build excluded)."""
    memory_mb: int = Field(default=16384, gt=0)
    """Host memory limit of the worker."""
    max_processes: int = Field(default=256, gt=0)


VENDORS = ("any", "nvidia", "amd")
"""`[hardware] vendor`: the GPUs a task's final scoring may run on. `any` (the default): wherever the run
scores (a HIP task prefers an AMD GPU where the run has one, else runs as HIP on CUDA)."""
FALLBACKS = ("hip-on-cuda",)
"""`[hardware] fallback`: what a task that needs AMD hardware accepts where the run has none."""


class Hardware(Frozen):
    """`[hardware]`: the GPU a task's final scoring needs (harness/placement.py `route`)."""

    vendor: str = "any"
    """`any` (default), `nvidia` or `amd`: final scoring runs only on a GPU of this vendor."""
    fallback: str | None = None
    """`hip-on-cuda`: a HIP task that asks for `amd` may run as HIP on CUDA where the run has no AMD GPU,
    and its score records that it did. Absent: no fallback, and a run without the vendor's GPU scores the
    session `infra_error` saying which hardware the task needs (never the agent's failure)."""

    @field_validator("vendor", mode="before")
    @classmethod
    def _known_vendor(cls, value: object) -> object:
        if value not in VENDORS:
            raise ValueError(f"vendor = {value!r} is not a GPU vendor crucible scores on; write "
                             'vendor = "amd" (AMD GPUs only), vendor = "nvidia" (NVIDIA GPUs only), or leave it '
                             'out (vendor = "any", the default)')
        return value

    @field_validator("fallback", mode="before")
    @classmethod
    def _known_fallback(cls, value: object) -> object:
        if value is not None and value not in FALLBACKS:
            raise ValueError(f"fallback = {value!r} is not a fallback crucible knows; write "
                             'fallback = "hip-on-cuda" (a HIP task may run on an NVIDIA GPU where the run has no '
                             "AMD GPU), or leave it out (no fallback: such a run refuses to score the task)")
        return value

    @model_validator(mode="after")
    def _fallback_needs_amd(self) -> Hardware:
        if self.fallback is not None and self.vendor != "amd":
            raise ValueError(f'fallback = "{self.fallback}" is what a task that needs AMD hardware accepts '
                             f"instead; with vendor = {self.vendor!r} there is nothing to fall back from: write "
                             'vendor = "amd" with it, or drop the fallback')
        return self

    @property
    def any(self) -> bool:
        return self.vendor == "any"


class TaskSpec(Frozen):
    """`task.toml`: everything about a task that the agent may see."""

    id: str = Field(pattern=r"^[a-z0-9_]+/[a-z0-9_\-]+$")
    title: str
    category: Category
    language: Language
    entry: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The function the candidate exports."""
    candidate: str
    """The workspace file the agent edits (e.g. `kernel.py`, `kernel.cu`)."""
    baseline: str | None = None
    """X2X tasks: the given kernel; the workspace's candidate starts as a copy of it."""
    stub: str | None = None
    """torch2X tasks: the starting file of the candidate."""
    solution: str | None = None
    """The expert solution's file name (never shown). Only an imported task may lack one for a while:
    `crucible tasks validate` fails it ("needs an expert solution") until one is written."""
    signature: Signature
    tolerance: Tolerances = Field(default_factory=Tolerances)
    oracle: Oracle = Field(default_factory=Oracle)
    """Whether the reference runs in float64 for the precision oracle (by default it must)."""
    configs: list[Config] = Field(min_length=1)
    metrics: Metrics
    limits: Limits = Field(default_factory=Limits)
    hardware: Hardware = Field(default_factory=Hardware)
    """`[hardware]`: the GPU final scoring needs (default: any the run has)."""
    seeds: int = Field(default=3, ge=1, le=16)
    forbid_ops: list[str] = Field(default_factory=list)
    """Torch ops a candidate may not call (e.g. `aten::mm`)."""
    library_share_max: float = Field(default=0.10, ge=0, le=1)
    """The share of a call's device time that library kernels (aten, cuBLAS, cuDNN, ...) may take: the
    candidate's own kernels must do the work. Raise it only for a task whose stub legitimately calls one."""
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> TaskSpec:
        problems = []
        if CATEGORY_LANGUAGE[self.category] != self.language:
            problems.append(f"category {self.category} needs language {CATEGORY_LANGUAGE[self.category]}")
        if self.category.startswith("torch2"):
            if self.stub is None:
                problems.append("torch2X tasks need a `stub` file for the agent to start from")
        elif self.baseline is None:
            problems.append("X2X tasks need a `baseline` file")
        if self.hardware.vendor == "amd" and self.language == "cuda":
            problems.append('[hardware] vendor = "amd" cannot score a CUDA task (CUDA runs on NVIDIA GPUs only): '
                            'write vendor = "nvidia" or leave [hardware] out')
        if self.hardware.fallback == "hip-on-cuda" and self.language != "hip":
            problems.append(f'[hardware] fallback = "hip-on-cuda" is for HIP tasks; this task is {self.language}: '
                            "drop the fallback")
        suffix = SOURCE_SUFFIX[self.language]
        for field in ("candidate", "baseline", "stub", "solution"):
            value = getattr(self, field)
            if value is not None and not value.endswith(suffix):
                problems.append(f"`{field}` = {value!r} should end in {suffix} for language {self.language}")
        if problems:
            raise ValueError("; ".join(problems))
        _check_unique_names(self.configs, "configs")
        return self

    @property
    def is_torch_task(self) -> bool:
        return self.category.startswith("torch2")

    def visible(self) -> dict:
        """The spec as the agent sees it (task.toml has nothing secret, but the solution's name)."""
        return self.model_dump(mode="json", exclude={"solution"})


class HiddenSpec(Frozen):
    """`hidden.toml`: configs the agent never sees, scored after the session."""

    configs: list[Config] = Field(min_length=1)

    @field_validator("configs")
    @classmethod
    def _unique(cls, configs: list[Config]) -> list[Config]:
        _check_unique_names(configs, "configs")
        return configs


def _check_unique_names(configs: list[Config], where: str) -> None:
    names = [c.name for c in configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"{where}: names used twice: {dupes}")


class Task(BaseModel):
    """A loaded task: its folder, spec and hidden configs."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    root: Path
    spec: TaskSpec
    hidden: HiddenSpec

    @property
    def id(self) -> str:
        return self.spec.id

    def configs(self, which: Literal["visible", "hidden", "all"] = "visible") -> list[Config]:
        if which == "visible":
            return list(self.spec.configs)
        if which == "hidden":
            return list(self.hidden.configs)
        return list(self.spec.configs) + list(self.hidden.configs)

    def config(self, name: str) -> Config:
        for c in self.configs("all"):
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.spec.configs)
        raise KeyError(f"no config named {name!r}; visible configs: {known}")

    def file(self, name: str) -> Path:
        return self.root / name


# ---------------------------------------------------------------- errors and loading


class Problem(Frozen):
    file: str
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class TaskError(Exception):
    """A task folder that does not load; carries every problem found."""

    def __init__(self, root: Path, problems: list[Problem]):
        self.root = root
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"task {root} has {len(problems)} problem(s):\n{lines}")


def _read_toml(path: Path, problems: list[Problem]) -> dict | None:
    if not path.is_file():
        problems.append(Problem(file=path.name, field="", message="missing"))
        return None
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        problems.append(Problem(file=path.name, field="", message=f"not valid TOML: {exc}"))
        return None


def _validation_problems(file: str, exc: ValidationError) -> list[Problem]:
    out = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        out.append(Problem(file=file, field=field, message=msg))
    return out


def load_task(root: Path) -> Task:
    """Load and check a task folder; raise TaskError listing every problem."""
    root = Path(root).resolve()
    problems: list[Problem] = []
    spec = hidden = None
    raw = _read_toml(root / "task.toml", problems)
    if raw is not None:
        try:
            spec = TaskSpec.model_validate(raw)
        except ValidationError as exc:
            problems += _validation_problems("task.toml", exc)
    raw_hidden = _read_toml(root / "hidden.toml", problems)
    if raw_hidden is not None:
        try:
            hidden = HiddenSpec.model_validate(raw_hidden)
        except ValidationError as exc:
            problems += _validation_problems("hidden.toml", exc)
    for name in ("PROMPT.md", "reference.py"):
        if not (root / name).is_file():
            problems.append(Problem(file=name, field="", message="missing"))
    if spec is not None:
        for field in ("baseline", "stub", "solution"):
            name = getattr(spec, field)
            if name is not None and not (root / name).is_file():
                problems.append(Problem(file="task.toml", field=field, message=f"file {name!r} not found"))
        if spec.id.split("/")[0] != spec.category:
            problems.append(Problem(file="task.toml", field="id",
                                    message=f"id {spec.id!r} should start with its category {spec.category!r}/"))
        configs = spec.configs + (hidden.configs if hidden else [])
        problems += _config_problems(spec, configs)
        if hidden is not None:
            clash = {c.name for c in spec.configs} & {c.name for c in hidden.configs}
            if clash:
                problems.append(Problem(file="hidden.toml", field="configs",
                                        message=f"names also used by visible configs: {sorted(clash)}"))
    if problems:
        raise TaskError(root, problems)
    assert spec is not None and hidden is not None
    return Task(root=root, spec=spec, hidden=hidden)


def _config_problems(spec: TaskSpec, configs: list[Config]) -> list[Problem]:
    """Every config must give what the signature and formulas need, with sensible values."""
    problems = []
    for config in configs:
        file = "task.toml" if config in spec.configs else "hidden.toml"
        where = f"configs[{config.name}]"
        try:
            for tensor in spec.signature.inputs + spec.signature.outputs:
                resolve_dtype(tensor.dtype, config)
            for out in spec.signature.outputs:
                shape = output_shape(out, config)
                if any(d < 0 for d in shape):
                    raise ValueError(f"output {out.name} has a negative dimension: {shape}")
            for p in spec.signature.params:
                if p.name not in config.values:
                    raise ValueError(f"parameter {p.name!r} of the signature is not set")
            for formula in (spec.metrics.flops, spec.metrics.bytes):
                evaluate_expr(formula, metric_scope(spec, config))
        except (ValueError, KeyError) as exc:
            problems.append(Problem(file=file, field=where, message=str(exc).strip("'\"")))
    return problems


# ---------------------------------------------------------------- expressions over config values

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Div: operator.truediv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_FUNCS = {"min": min, "max": max, "cdiv": lambda a, b: -(-a // b)}


def evaluate_expr(expr: int | float | str, scope: dict[str, ConfigValue]) -> int | float:
    """Evaluate a small arithmetic expression (numbers, names, + - * / // % **, min, max, cdiv)."""
    if isinstance(expr, int | float):
        return expr

    def walk(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in scope:
                raise ValueError(f"{expr!r}: unknown name {node.id!r} (known: {sorted(scope)})")
            value = scope[node.id]
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"{expr!r}: {node.id!r} is not a number")
            return value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords):
            return _FUNCS[node.func.id](*(walk(a) for a in node.args))
        raise ValueError(f"{expr!r}: only numbers, config names, + - * / // % **, min, max, cdiv are allowed")

    try:
        tree = parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{expr!r} is not an expression: {exc.msg}") from None
    return walk(tree)


ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
            "int64": 8, "int32": 4, "int8": 1, "uint8": 1, "bool": 1}


def resolve_dtype(dtype: str, config: Config) -> str:
    """`{key}` takes the dtype from the config; anything else is a dtype name."""
    name = str(config.values.get(dtype[1:-1], "")) if dtype.startswith("{") and dtype.endswith("}") else dtype
    if name not in ITEMSIZE:
        raise ValueError(f"dtype {dtype!r} resolves to {name!r}, not one of {sorted(ITEMSIZE)}")
    return name


def output_shape(tensor: TensorSpec, config: Config) -> list[int]:
    dims = []
    for d in tensor.shape:
        value = evaluate_expr(d, dict(config.values))
        if not isinstance(value, int) and not float(value).is_integer():
            raise ValueError(f"output {tensor.name}: dimension {d!r} = {value} is not an integer")
        dims.append(int(value))
    return dims


def metric_scope(spec: TaskSpec, config: Config) -> dict[str, ConfigValue]:
    """Config values plus `itemsize` (of the config's dtype, else the first input's)."""
    scope = dict(config.values)
    dtype = config.dtype or resolve_dtype(spec.signature.inputs[0].dtype, config)
    scope.setdefault("itemsize", ITEMSIZE.get(dtype, 4))
    return scope


def task_metrics(spec: TaskSpec, config: Config) -> tuple[float, float]:
    """(flops, bytes) of one call on this config."""
    scope = metric_scope(spec, config)
    return float(evaluate_expr(spec.metrics.flops, scope)), float(evaluate_expr(spec.metrics.bytes, scope))


# ---------------------------------------------------------------- discovery

TASKS_ROOT = Path(__file__).resolve().parent.parent / "tasks"


def suite_root() -> Path:
    """The task suite: `$CRUCIBLE_TASKS` or the `tasks/` folder of this checkout."""
    import os

    return Path(os.environ.get("CRUCIBLE_TASKS", TASKS_ROOT)).resolve()


def discover_tasks(root: Path | None = None) -> tuple[list[Task], list[TaskError]]:
    """Every task under root (`<category>/<slug>/task.toml`); broken ones come back as errors."""
    root = root or suite_root()
    tasks, errors = [], []
    for toml in sorted(root.glob("*/*/task.toml")):
        try:
            tasks.append(load_task(toml.parent))
        except TaskError as exc:
            errors.append(exc)
    return tasks, errors


def find_task(task_id: str, root: Path | None = None) -> Task:
    root = root or suite_root()
    folder = root / task_id
    if not (folder / "task.toml").is_file():
        tasks, _ = discover_tasks(root)
        known = ", ".join(t.id for t in tasks) or "(none)"
        raise KeyError(f"no task {task_id!r} under {root}; known tasks: {known}")
    return load_task(folder)

