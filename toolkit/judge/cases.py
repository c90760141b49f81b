"""Inputs the judge makes, and the arena layout a runner sees them through.

    Case(task, ref, config, seed)    the reference's make_inputs with a random offset and scale per seed
    Fresh(task, ref, config)         timed calls: every call's inputs made anew by make_inputs, from a seed
                                     (and a scale and offset) drawn by a private generator: no structure
                                     a cache could exploit (contents that are an affine function of a few
                                     bases would let a matmul be answered from a cached product)
    Layout(task, config)             where each input and output lives in the arena (256-byte aligned)
"""

from __future__ import annotations

import math
import random
import types
from dataclasses import dataclass

import torch

from ..checking import is_fp8
from ..protocol import TensorLayout
from ..task import Config, Task, output_shape, resolve_dtype

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
          "int32": torch.int32, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
ALIGN = 256


def raw_inputs(task: Task, ref: types.ModuleType, config: Config, seed: int, device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    made = ref.make_inputs(dict(config.values), gen, device)
    missing = [t.name for t in task.spec.signature.inputs if t.name not in made]
    if missing:
        raise RuntimeError(f"reference.make_inputs gave no {missing} for config {config.name}")
    return [made[t.name].contiguous() for t in task.spec.signature.inputs]


def draw_affine(rng: random.Random) -> tuple[float, float]:
    """A scale and an offset: an identity or approximate kernel cannot hide under a random one."""
    return math.exp(rng.uniform(-0.7, 0.7)), rng.uniform(-0.5, 0.5)


def perturbed(task: Task, raw: list[torch.Tensor], scale: float, offset: float) -> list[torch.Tensor]:
    out = []
    for spec, t in zip(task.spec.signature.inputs, raw, strict=True):
        if spec.perturb and t.dtype.is_floating_point:
            t = (t.to(torch.float64 if t.dtype == torch.float64 else torch.float32) * scale + offset).to(t.dtype)
        out.append(t)
    return out


class Case:
    """One config on one seed: the inputs (the judge's own copy) and the params."""

    def __init__(self, task: Task, ref: types.ModuleType, config: Config, seed: int, device: torch.device):
        raw = raw_inputs(task, ref, config, seed, device)
        self.inputs = perturbed(task, raw, *draw_affine(random.Random(seed * 7919 + 17)))
        self.params = params_of(task, config)


def params_of(task: Task, config: Config) -> dict[str, int | float]:
    return {p.name: config.values[p.name] for p in task.spec.signature.params}


@dataclass
class FreshCall:
    """How one timed call's inputs were made, so the judge can make them again to check its outputs."""

    seed: int
    scale: float
    offset: float


class Fresh:
    """Inputs for timed calls: contents no call has seen before, from a generator the runner cannot see."""

    def __init__(self, task: Task, ref: types.ModuleType, config: Config, device: torch.device):
        self.task, self.ref, self.config, self.device = task, ref, config, device
        self.first = raw_inputs(task, ref, config, 1000, device)
        """The shapes and dtypes of every call's inputs (make_inputs keeps them per config)."""
        self.rng = random.SystemRandom()

    def draw(self) -> FreshCall:
        return FreshCall(self.rng.getrandbits(62), *draw_affine(self.rng))

    def fill(self, into: list[torch.Tensor], call: FreshCall) -> None:
        """Write the call's inputs into `into` (queued on the device; nothing waits for it)."""
        made = raw_inputs(self.task, self.ref, self.config, call.seed, self.device)
        for spec, dst, raw in zip(self.task.spec.signature.inputs, into, made, strict=True):
            dst.copy_(raw)
            if spec.perturb and dst.dtype.is_floating_point:
                if is_fp8(dst):  # FP8 has no arithmetic of its own
                    dst.copy_(dst.float().mul_(call.scale).add_(call.offset))
                else:
                    dst.mul_(call.scale).add_(call.offset)

    def inputs(self, call: FreshCall) -> list[torch.Tensor]:
        """The same inputs again, in tensors of their own (to check a sampled call)."""
        out = [torch.empty_like(t) for t in self.first]
        self.fill(out, call)
        return out


class Layout:
    """Inputs, then outputs, each 256-byte aligned, in one arena; `sets` copies of that, `set_bytes` apart
    (a timed window's calls each get inputs and outputs of their own)."""

    def __init__(self, task: Task, config: Config, inputs: list[torch.Tensor], sets: int = 1):
        sig = task.spec.signature
        self.tensors: list[TensorLayout] = []
        offset = 0
        specs = [(s.name, "input", t.dtype, tuple(t.shape)) for s, t in zip(sig.inputs, inputs, strict=True)]
        specs += [(o.name, "output", DTYPES[resolve_dtype(o.dtype, config)], tuple(output_shape(o, config)))
                  for o in sig.outputs]
        for name, role, dtype, shape in specs:
            self.tensors.append(TensorLayout(name=name, role=role, dtype=str(dtype).removeprefix("torch."),
                                             shape=list(shape), offset=offset))
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            offset += -(-max(size, 1) // ALIGN) * ALIGN
        self.sets, self.set_bytes = sets, offset
        self.nbytes = offset * sets

    def views(self, arena: object, which: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Set `which`'s inputs and outputs."""
        base = which * self.set_bytes
        views = [arena.tensor(base + t.offset, tuple(t.shape), DTYPES[t.dtype]) for t in self.tensors]  # type: ignore[attr-defined]
        ins = [v for v, t in zip(views, self.tensors, strict=True) if t.role == "input"]
        outs = [v for v, t in zip(views, self.tensors, strict=True) if t.role == "output"]
        return ins, outs
